"""A function of a text is remembered for short texts only, bounded in entries; its answers stay its own."""

from __future__ import annotations

from rollwire.text_memo import remember_short_texts


def test_short_texts_are_remembered_and_long_ones_worked_out_each_time() -> None:
    calls: list[tuple[str, str]] = []

    @remember_short_texts(max_chars=10, entries=2)
    def found(pattern: str, text: str) -> bool:
        calls.append((pattern, text))
        return pattern in text

    short, long = "a short", "a text past ten characters"
    assert [found("a", short), found("a", short), found("z", short)] == [True, True, False]
    assert calls == [("a", short), ("z", short)]  # the repeat was remembered; another pattern is another entry
    assert [found("past", long), found("past", long)] == [True, True]
    assert calls[-2:] == [("past", long), ("past", long)]  # past max_chars: worked out each time
    found("b", short)  # a third short entry drops the least recently used ("a", short)
    found("a", short)
    assert calls[-1] == ("a", short)
