"""The policy writes most of what a harness resends (its answers, its tool calls' arguments, the tool results
they cause), and the proxy now reads a rollout's body through the layout of its last one
(``rollwire.proxy.resent_body``). Whatever bytes come next, the read is a whole parse's: the same value (as JSON:
``1`` is not ``true``) or the same refusal. Seeded edits of a growing conversation, each sent after a body the
memo holds: bytes inserted, removed and changed at every depth (inside strings, across entry boundaries, in the
members around the entries), strings that name the memo's own marker, entries that look like the closing of
the array."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from rollwire.errors import InvalidRequest
from rollwire.proxy.resent_body import ResentBodies
from rollwire.request_body import MAX_DEPTH, WALKED_BYTES, check_json_value, parse_json

PIECES = [
    b",",
    b"]",
    b"[",
    b"}",
    b"{",
    b'"',
    b"\\",
    b":",
    b" ",
    b"1",
    b"true",
    b'"rollwire-held-entries-"',
    b"\xc3",
    b"\xa9",
]
"""What an edit puts in: JSON's structure, escapes, half a UTF-8 character, the memo's marker without its nonce."""


def _body(turns: int, rng: random.Random) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for i in range(turns):
        text = "".join(
            rng.choice(['"', "\\", "],", '{"role":"user"}', "é", "x", "rollwire-held-entries-"]) for _ in range(8)
        )
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "B", "input": {"c": text}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]},
        ]
    value = {"model": "m", "messages": messages, "tools": [{"name": "B"}], "stream": True}
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _edited(body: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(body))
    kind = rng.randrange(3)
    if kind == 0:
        return body[:at] + rng.choice(PIECES) + body[at:]
    if kind == 1:
        return body[:at] + body[at + rng.randrange(1, 4) :]
    return body[:at] + rng.choice(PIECES) + body[at + 1 :]


def _read(parse: Any, body: bytes) -> tuple[str, bytes | str]:
    try:
        return "value", orjson.dumps(parse(body).value)
    except ValueError as error:
        return "refused", type(error).__name__
    except TypeError:  # a value orjson cannot write: compared as the standard library writes it
        return "value", json.dumps(parse(body).value).encode()


def test_every_edit_of_a_resent_body_reads_as_a_whole_parse() -> None:
    rng = random.Random(20261207)
    taken = bodies_with_members = 0
    for case in range(600):
        bodies = ResentBodies(1 << 20)
        turns = rng.randrange(1, 5)
        bodies.parse("r", "messages", _body(turns, random.Random(case)))
        body = _body(turns + 1, random.Random(case))  # the next call: every entry before, and two new ones
        for _ in range(rng.randrange(0, 3)):
            body = _edited(body, rng)
        before, members = bodies.reused, bodies.members_reused
        assert _read(lambda b: bodies.parse("r", "messages", b), body) == _read(parse_json, body), body
        taken += bodies.reused > before
        bodies_with_members += bodies.members_reused > members
    assert taken > 100, "the memo took part in the cases"
    assert bodies_with_members > 50, "bodies with their other members taken as parsed were among them"


def test_entries_refused_as_too_deep_are_refused_again_when_resent() -> None:
    """The nesting of a small body is walked by the read's check, after the parse: a body refused there must leave
    no layout that would let its entries skip the walk when the next request resends them."""
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    messages: list[Any] = [{"role": "user", "content": "hi"}, {"role": "user", "content": [{"input": deep}]}]
    bodies = ResentBodies(1 << 20)
    for turn in range(2):
        body = json.dumps({"model": "m", "messages": messages}, separators=(",", ":")).encode()
        assert len(body) < WALKED_BYTES  # walked by the check, not by the parse
        parsed = bodies.parse("r", "messages", body)
        with pytest.raises(InvalidRequest, match="nested deeper"):
            check_json_value(parsed.value, body, paired=parsed.paired, shallow=parsed.shallow)
        messages.append({"role": "user", "content": f"turn {turn}"})
    assert bodies.reused <= 1  # at most the shallow first entry was taken


def test_a_too_deep_entry_among_the_new_ones_is_refused_while_the_other_members_are_taken() -> None:
    """Only the new entries are parsed when the members around them are unchanged (``_between``): their nesting
    is still walked, at the depth they lie in the body."""
    deep: Any = "x"
    for _ in range(MAX_DEPTH - 4):  # the body, its member, the entry and its content make four levels more
        deep = [deep]
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    bodies = ResentBodies(1 << 20)
    for content in ("fine", [deep], [[deep]]):
        messages.append({"role": "user", "content": content})
        body = json.dumps({"model": "m", "messages": messages, "tools": []}, separators=(",", ":")).encode()
        before = bodies.members_reused
        parsed = bodies.parse("r", "messages", body)
        if content == [[deep]]:
            assert bodies.members_reused > before
            with pytest.raises(InvalidRequest, match="nested deeper"):
                check_json_value(parsed.value, body, paired=parsed.paired, shallow=parsed.shallow)
        else:
            check_json_value(parsed.value, body, paired=parsed.paired, shallow=parsed.shallow)
