"""A rollout's body that resends its last one's entries takes them as parsed then (``proxy.resent_body``), and
reads exactly as a whole parse reads it."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from rollwire.proxy.resent_body import ResentBodies
from rollwire.request_body import parse_json


def compact(value: Any) -> bytes:
    """As harnesses write a body: Node's JSON.stringify, the official Python SDKs (httpx's ``json=``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def conversation(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the parser é 🤖"}]
    for i in range(turns):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": f"cat f{i}", "n": 1.5}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f'line {i}\n"quoted" [x] {{y}}'}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return {"model": "claude", "max_tokens": 64, "messages": messages, "system": "be brief", "stream": False}


def same(a: Any, b: Any) -> bool:
    """Equal as JSON: the same text orjson writes (``1`` is not ``true``, key order counts)."""
    return bool(orjson.dumps(a) == orjson.dumps(b))


def test_a_growing_conversation_takes_what_it_resends_and_reads_as_a_whole_parse() -> None:
    bodies = ResentBodies(1 << 20)
    for turns in range(5):
        body = compact(conversation(turns))
        before = bodies.reused
        parsed = bodies.parse("r1", "messages", body)
        assert same(parsed.value, orjson.loads(body)) and parsed.paired
        assert bodies.reused - before == (2 * turns - 1 if turns else 0)  # every entry of the call before
    assert bodies.held_bytes == len(body)


def test_a_rewritten_entry_is_parsed_again_from_where_the_bytes_differ() -> None:
    bodies = ResentBodies(1 << 20)
    first = conversation(3)
    bodies.parse("r1", "messages", compact(first))
    rewritten = conversation(3)
    rewritten["messages"][3]["content"][0]["input"]["n"] = 1  # equal to 1.5's type in Python, not in JSON
    before = bodies.reused
    parsed = bodies.parse("r1", "messages", compact(rewritten))
    assert bodies.reused - before == 3  # the entries before it
    assert same(parsed.value, rewritten) and type(parsed.value["messages"][3]["content"][0]["input"]["n"]) is int


@pytest.mark.parametrize(
    "writer",
    [
        lambda v: json.dumps(v).encode(),  # spaces after separators, non-ASCII escaped
        lambda v: json.dumps(v, indent=1).encode(),
        lambda v: json.dumps(v, separators=(",", ":")).encode(),  # compact, but the first entry's é escaped
    ],
)
def test_a_body_written_otherwise_is_parsed_whole_every_time(writer: Any) -> None:
    bodies = ResentBodies(1 << 20)
    for turns in range(3):
        value = conversation(turns)
        assert same(bodies.parse("r1", "messages", writer(value)).value, value)
        assert bodies.held_entries("r1") == 0
    assert bodies.reused == 0


def test_only_the_entries_before_one_written_otherwise_are_held() -> None:
    bodies = ResentBodies(1 << 20)
    value = conversation(2)
    value["messages"][0]["content"] = "plain"
    escaped = json.dumps(value["messages"][2], separators=(",", ":")).encode().replace(b'"user"', b'"\\u0075ser"')
    body = compact(value).replace(compact(value["messages"][2]), escaped)
    assert same(bodies.parse("r1", "messages", body).value, value)
    assert bodies.held_entries("r1") == 2  # the two before it; nothing after it


def test_entries_are_taken_only_from_the_same_rollouts_body_under_the_same_key() -> None:
    bodies = ResentBodies(1 << 20)
    bodies.parse("r1", "messages", compact(conversation(2)))
    bodies.parse("r2", "messages", compact(conversation(3)))
    assert bodies.reused == 0
    bodies.parse("r1", "input", compact(conversation(3)))
    assert bodies.reused == 0


@pytest.mark.parametrize(
    "edit",
    [
        lambda body: body.replace(b'],"system"', b',],"system"'),  # a trailing comma after the entries
        lambda body: body.replace(b'"stream":false}', b'"stream":false,"messages":[1]}'),  # a later duplicate key
        lambda body: body.replace(b'"stream":false}', b'"stream":NaN}'),
        lambda body: body.replace(b'"model":"claude"', b'"model":"claude","model":"other"'),
    ],
)
def test_a_body_that_resends_entries_around_a_fault_reads_as_a_whole_parse(edit: Any) -> None:
    bodies = ResentBodies(1 << 20)
    bodies.parse("r1", "messages", compact(conversation(2)))
    body = edit(compact(conversation(3)))
    try:
        expected = parse_json(body)
    except ValueError:
        with pytest.raises(ValueError):
            bodies.parse("r1", "messages", body)
        return
    parsed = bodies.parse("r1", "messages", body)
    assert same(parsed.value, expected.value) and parsed.paired == expected.paired


def test_a_memo_of_no_bytes_holds_nothing_and_a_small_one_drops_the_least_recent() -> None:
    off = ResentBodies(0)
    for turns in range(3):
        off.parse("r1", "messages", compact(conversation(turns)))
    assert off.reused == 0 and off.held_bytes == 0
    size = len(compact(conversation(2)))
    small = ResentBodies(size + 10)
    small.parse("r1", "messages", compact(conversation(2)))
    small.parse("r2", "messages", compact(conversation(2)))
    assert small.held_bytes == size  # r1's body dropped for r2's
    small.parse("r1", "messages", compact(conversation(3)))
    assert small.reused == 0


def with_tools(turns: int) -> dict[str, Any]:
    value = conversation(turns)
    value["tools"] = [
        {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
    ]
    return value


def test_members_after_the_entries_are_taken_as_parsed_while_their_bytes_are_unchanged() -> None:
    bodies = ResentBodies(1 << 20)
    previous = bodies.parse("r1", "messages", compact(with_tools(0))).value
    for turns in range(1, 4):
        body = compact(with_tools(turns))
        parsed = bodies.parse("r1", "messages", body)
        assert same(parsed.value, orjson.loads(body)) and list(parsed.value) == list(orjson.loads(body))
        assert parsed.value["tools"] is previous["tools"] and parsed.value["system"] is previous["system"]
        previous = parsed.value
    assert bodies.members_reused == 3
    changed = with_tools(4)
    changed["system"] = "be briefer"
    parsed = bodies.parse("r1", "messages", compact(changed))
    assert same(parsed.value, changed) and parsed.value["tools"] is not previous["tools"]
    assert bodies.members_reused == 3 and bodies.held_entries("r1") == len(changed["messages"])


@pytest.mark.parametrize(
    "edit",
    [
        # a later duplicate of the member, in the body held too, holding the entries that body held: the body
        # held is not one orjson writes, so the next body's new entries cannot outvote the duplicate
        lambda body: body[:-1] + b',"messages":' + compact(with_tools(2)["messages"]) + b"}",
        # a duplicate of another member, in both bodies
        lambda body: body[:-1] + b',"system":"other"}',
    ],
)
def test_members_of_a_body_that_repeats_a_key_are_never_taken(edit: Any) -> None:
    bodies = ResentBodies(1 << 20)
    bodies.parse("r1", "messages", edit(compact(with_tools(2))))
    body = edit(compact(with_tools(3)))
    parsed = bodies.parse("r1", "messages", body)
    assert same(parsed.value, parse_json(body).value)
    assert bodies.members_reused == 0


@pytest.mark.parametrize(
    "middle",
    [
        b'],"messages":[{"role":"user","content":"injected"}',  # closes the member early and opens it again
        b'],"system":"injected","x":[',  # closes it and sets another member before the held ones
        b',{"role":"user","content":"x"}],"messages":[',
    ],
)
def test_new_entries_that_close_the_member_early_read_as_a_whole_parse(middle: bytes) -> None:
    bodies = ResentBodies(1 << 20)
    first = compact(with_tools(2))
    bodies.parse("r1", "messages", first)
    close = first.index(b'],"system"')
    body = first[:close] + middle + first[close:]
    try:
        expected = parse_json(body).value
    except ValueError:
        with pytest.raises(ValueError):
            bodies.parse("r1", "messages", body)
        return
    assert same(bodies.parse("r1", "messages", body).value, expected)
