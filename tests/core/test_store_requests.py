"""A continuing call's row keeps its request as an edit of the request of the call it continues; every reader gets
the whole request back, byte for byte (``rollwire.store.requests``), or a clear error where the base is gone."""

from __future__ import annotations

import json
import random

import pytest

from rollwire.errors import StoreError
from rollwire.store import ModelCall
from rollwire.store.requests import (
    MIN_SAVED,
    SentRequest,
    StoredRequest,
    common_prefix,
    common_suffix,
    stored_request,
    whole_requests,
)  # fmt: skip

TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "x" * 200}} for i in range(3)]


def _body(messages: list[dict[str, str]]) -> str:
    """A request as an SDK writes it: the messages first, then the fields that stay (the tools among them)."""
    return json.dumps({"messages": messages, "model": "m", "tools": TOOLS, "max_tokens": 6})


def _kept(whole: str, base: int | None, base_text: str | None) -> StoredRequest:
    """``stored_request`` as the proxy calls it: the request's bytes as sent, its base's as held."""
    return stored_request(whole.encode(), base, SentRequest.of_text(base_text) if base_text is not None else None)


def _call(call_id: int, whole: str, base: int | None = None, base_text: str | None = None) -> ModelCall:
    """A row as the proxy writes it: ``whole`` is the call's whole request."""
    kept = _kept(whole, base, base_text)
    return ModelCall(
        id=call_id, rollout_id="r", request_json=kept.text, request_base=kept.base, request_head=kept.head,
        request_tail=kept.tail,
    )  # fmt: skip


def _turns() -> list[str]:
    messages = [{"role": "user", "content": "Fix the build."}]
    bodies = [_body(messages)]
    for turn in range(3):
        messages += [{"role": "assistant", "content": f"step {turn}"}, {"role": "user", "content": f"ok {turn} ü€"}]
        bodies.append(_body(messages))
    return bodies


def test_a_chain_of_edited_requests_reads_back_whole_in_any_order() -> None:
    first, second, third, fourth = _turns()
    calls = [
        _call(1, first),
        _call(2, second, 1, first),
        _call(3, third, 2, second),
        _call(4, fourth, 3, third),
        _call(5, _body([{"role": "user", "content": "branch"}]), 1, first),  # a branch of call 1
        _call(6, "{}"),  # a new segment: stored whole
    ]
    assert [c.request_base for c in calls] == [None, 1, 2, 3, 1, None]
    assert all(len(c.request_json) < 100 for c in calls[1:4])  # only what each turn added
    assert calls[3].request_head + len(calls[3].request_json) + calls[3].request_tail == len(fourth)
    shuffled = [calls[i] for i in (3, 5, 0, 4, 2, 1)]
    expected = [fourth, "{}", first, _body([{"role": "user", "content": "branch"}]), third, second]
    assert whole_requests(shuffled) == expected


def test_a_call_read_earlier_opens_the_request_of_one_read_now() -> None:
    """A process that holds call 2 reads only call 3, written by another process."""
    _first, second, third, _fourth = _turns()
    assert whole_requests([_call(3, third, 2, second)], {2: second}) == [third]


def test_a_missing_or_shorter_base_is_a_clear_store_error() -> None:
    _first, second, third, _fourth = _turns()
    edited = _call(3, third, 2, second)
    with pytest.raises(StoreError, match="call 3's request edits call 2's, which is not in the store"):
        whole_requests([edited])
    with pytest.raises(StoreError, match="call 3's request keeps .* characters of call 2's, which holds 10"):
        whole_requests([edited], {2: "x" * 10})


def test_an_edit_that_saves_little_or_has_no_base_is_stored_whole() -> None:
    short = "x" * (MIN_SAVED - 1)
    assert _kept(short + "y", 1, short).base is None  # saves fewer than MIN_SAVED bytes
    assert _kept("abc", None, "abc").base is None
    assert _kept("abc" * 200, 1, None).base is None  # the base's request is not held
    kept = _kept("a" * 300 + "b" * 300, 1, "a" * 300 + "c" + "b" * 300)
    assert (kept.text, kept.base, kept.head, kept.tail) == ("", 1, 300, 300)  # a deletion: nothing between


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("\U0001f600", "\U0001f601"),  # 4-byte characters alike but for their last byte: the head is cut before
        ("\u00e9", "\u00a9"),  # 2-byte characters alike but for their first byte: the tail starts after
        ("\U0001f600x", "y\U0001f600"),  # a character that moved
        ("", "\u4e2d\u6587"),  # an insertion between two 3-byte characters' neighbours
    ],
)
def test_an_edit_is_cut_at_whole_characters_and_counted_in_characters(old: str, new: str) -> None:
    """The edit is found on UTF-8 bytes, where characters past ASCII are several bytes alike in part: it must still
    cut at whole characters and count them as the stored text does, or a request would read back wrong."""
    head, tail = "a\u00fc\U0001f916" * 100, "b\u20ac" * 100
    base_text, whole = head + old + tail, head + new + tail
    kept = _kept(whole, 1, base_text)
    assert kept.base == 1 and kept.chars == len(whole)
    assert kept.head + len(kept.text) + kept.tail == len(whole)
    assert base_text[: kept.head] + kept.text + base_text[len(base_text) - kept.tail :] == whole
    row = ModelCall(id=2, rollout_id="r", request_json=kept.text, request_base=1, request_head=kept.head, request_tail=kept.tail)
    assert whole_requests([row], {1: base_text}) == [whole]


def test_common_prefix_and_suffix_match_a_character_by_character_count() -> None:
    """Against the plain loop, over edits at every scale (the blocks double from 4,096 characters)."""
    rng = random.Random(7)

    def prefix(a: str, b: str) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    def suffix(a: str, b: str, limit: int) -> int:
        n = 0
        while n < limit and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
            n += 1
        return n

    for _ in range(400):
        size = rng.choice([0, 1, 7, 300, 5000, 40_000])
        base = "".join(rng.choice("ab") for _ in range(size))
        head = rng.randint(0, size)
        tail = rng.randint(0, size - head)
        middle = "".join(rng.choice("abé") for _ in range(rng.randint(0, 40)))
        edited = base[:head] + middle + base[size - tail :]
        kept = common_prefix(edited, base)
        assert kept == prefix(edited, base)
        limit = min(len(edited), size) - kept
        assert common_suffix(edited, base, limit) == suffix(edited, base, limit)
        row = _call(2, edited, 1, base)
        assert whole_requests([row], {1: base}) == [edited]
