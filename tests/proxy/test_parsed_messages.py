"""The per-rollout memo of parsed messages (``rollwire.proxy.dialects.parsed``): a request reads exactly as a whole
parse would read it, whatever it repeats, and only what a rollout sent before is taken from the memo."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from rollwire.errors import InvalidRequest
from rollwire.proxy.dialects.chat import ChatDialect
from rollwire.proxy.dialects.messages import MessagesDialect
from rollwire.proxy.dialects.parsed import ParsedMessages
from rollwire.proxy.dialects.responses import ResponsesDialect

CHAT, MESSAGES = ChatDialect(), MessagesDialect()


def _claude_turns(turns: int, use_input: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Messages request as Claude Code grows one: each turn a tool call and its result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "fix the build"}]}]
    for i in range(turns):
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": use_input or {"command": f"ls {i}"}}
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"step {i}"}, call]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"file_{i}.py\n" * 3}
        messages.append({"role": "user", "content": [result, {"type": "text", "text": "go on"}]})
    return {"model": "m", "max_tokens": 64, "system": "You are Claude Code.", "messages": messages}


def _chat_turns(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "guide"}, {"role": "user", "content": "task"}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "sh", "arguments": f'{{"cmd": "ls {i}"}}'}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i}"}]
    return {"model": "m", "messages": messages}


def _through(memo: ParsedMessages, rollout: str, body: dict[str, Any], dialect: Any = MESSAGES) -> Any:
    """``body`` read through ``memo`` (as a parse of the JSON the client sent: fresh objects each call)."""
    return dialect.parse_request(orjson.loads(orjson.dumps(body)), memo.reading(rollout, dialect.name))


@pytest.mark.parametrize("dialect", [MESSAGES, CHAT], ids=["messages", "chat"])
def test_a_growing_conversation_reads_as_a_whole_parse_and_reuses_what_it_sent(dialect: Any) -> None:
    memo = ParsedMessages(1 << 20)
    turns = _claude_turns if dialect is MESSAGES else _chat_turns
    reused = []
    for n in range(1, 6):
        body = turns(n)
        before = memo.reused
        assert _through(memo, "r", body, dialect) == dialect.parse_request(body)
        reused.append(memo.reused - before)
    assert reused == [0] + [len(turns(n)["messages"]) for n in range(1, 5)]  # every entry of the call before


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"n": 1}, {"n": True}),  # equal in Python (1 == True), different JSON: a different tool call
        ({"n": 1}, {"n": 1.0}),
        ({"a": "x", "b": "y"}, {"b": "y", "a": "x"}),  # equal dicts, but the harness's arguments text differs
    ],
)
def test_history_equal_in_python_but_not_in_json_is_parsed_again(before: dict[str, Any], after: dict[str, Any]) -> None:
    """The policy writes its own history back: a memo keyed by ``==`` would hand a rewritten tool call the text
    of the one it replaced."""
    memo = ParsedMessages(1 << 20)
    _through(memo, "r", _claude_turns(3, before))
    conv = _through(memo, "r", _claude_turns(3, after))
    assert conv == MESSAGES.parse_request(_claude_turns(3, after))
    assert [c.arguments for m in conv.messages for c in m.tool_calls] == [orjson.dumps(after).decode().replace(":", ": ").replace(",", ", ")] * 3


def test_a_rewritten_message_is_parsed_from_there_on() -> None:
    memo = ParsedMessages(1 << 20)
    body = _claude_turns(4)
    _through(memo, "r", body)
    rewritten = copy.deepcopy(body)
    rewritten["messages"][3]["content"][0]["text"] = "a different step"
    before = memo.reused
    assert _through(memo, "r", rewritten) == MESSAGES.parse_request(rewritten)
    assert memo.reused - before == 3  # the three entries before the rewrite


def test_no_rollout_is_read_through_another_rollouts_memo_nor_a_dialect_through_another() -> None:
    memo = ParsedMessages(1 << 20)
    _through(memo, "victim", _claude_turns(4))
    before = memo.reused
    _through(memo, "attacker", _claude_turns(4))
    _through(memo, "victim", _chat_turns(4), CHAT)
    assert memo.reused == before


def test_the_memo_holds_at_most_its_bytes_and_drops_the_least_recently_called_first() -> None:
    size = len(b"".join(orjson.dumps(m) for m in _claude_turns(8)["messages"]))
    memo = ParsedMessages(3 * size)
    for rollout in range(10):  # many rollouts, each a large request: the memory a policy could make the proxy hold
        _through(memo, f"r{rollout}", _claude_turns(8))
        assert memo.held_bytes <= 3 * size
    before = memo.reused
    _through(memo, "r0", _claude_turns(8))  # dropped long ago: parsed whole
    _through(memo, "r9", _claude_turns(8))  # the latest: reused
    assert memo.reused - before == len(_claude_turns(8)["messages"])
    assert ParsedMessages(size - 1).parse("r", "messages", _claude_turns(8)["messages"], lambda e, i: ()) == ()


def test_an_entry_that_fails_names_its_place_after_reused_ones() -> None:
    memo = ParsedMessages(1 << 20)
    body = _claude_turns(3)
    _through(memo, "r", body)
    body["messages"].append({"role": "robot", "content": "hi"})
    with pytest.raises(InvalidRequest, match=r"messages\[7\]\.role must be"):
        _through(memo, "r", body)


def test_a_request_orjson_cannot_write_is_parsed_whole() -> None:
    """An integer past 64 bits (read by the standard library's parser) has no orjson form: nothing is kept."""
    memo = ParsedMessages(1 << 20)
    body = _claude_turns(2, {"n": 2**70})
    read = MESSAGES.parse_request(body, memo.reading("r", "messages"))
    assert read == MESSAGES.parse_request(body) and memo.held_bytes == 0


def test_a_tool_list_sent_again_is_taken_as_read_and_one_that_differs_in_json_is_read_again() -> None:
    memo = ParsedMessages(1 << 20)
    tools = [{"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {"n": {}}}}]
    body = {**_claude_turns(1), "tools": tools}
    first, again = _through(memo, "a", body), _through(memo, "b", body)  # another rollout: the harness's own tools
    assert again.tools is first.tools and again.known_tools_key == first.tools_key()
    assert first == MESSAGES.parse_request(body) and first.tools_key() == MESSAGES.parse_request(body).tools_key()
    reordered = {**body, "tools": [{**tools[0], "input_schema": {"properties": {"n": {}}, "type": "object"}}]}
    read = _through(memo, "a", reordered)
    assert read.tools is not first.tools and read.tools == MESSAGES.parse_request(reordered).tools
    assert list(read.tools[0]["function"]["parameters"]) == ["properties", "type"]  # the order a template prints
    as_chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools}
    with pytest.raises(InvalidRequest):  # the same bytes in another dialect are read by that dialect
        _through(memo, "a", as_chat, CHAT)


RESPONSES = ResponsesDialect()


def _codex_turns(turns: int, instructions: str = "You are Codex.") -> dict[str, Any]:
    """A Responses request as Codex grows one: reasoning, then calls that join the assistant turn before them."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]
    for i in range(turns):
        items += [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"think {i}"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"step {i}"}]},
            {"type": "function_call", "call_id": f"c{i}", "name": "shell", "arguments": f'{{"cmd": "ls {i}"}}'},
            {"type": "function_call", "call_id": f"d{i}", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"out {i}"},
            {"type": "function_call_output", "call_id": f"d{i}", "output": "ok"},
        ]
    return {"model": "m", "instructions": instructions, "input": items}


def test_responses_items_resume_from_where_the_last_request_ended() -> None:
    """Responses items fold into their neighbours (a call joins the assistant turn before it), so a request is
    resumed from the state the last one ended in, and folded whole when anything before its new items differs."""
    memo = ParsedMessages(1 << 20)
    for n in range(1, 5):
        before = memo.reused
        assert _through(memo, "r", _codex_turns(n), RESPONSES) == RESPONSES.parse_request(_codex_turns(n))
        assert memo.reused - before == (0 if n == 1 else len(_codex_turns(n - 1)["input"]))
    before = memo.reused
    changed = _codex_turns(4, instructions="You are someone else.")  # the head differs: folded from its start
    assert _through(memo, "r", changed, RESPONSES) == RESPONSES.parse_request(changed)
    shorter = _codex_turns(2)  # a request that is no extension of the last: folded from its start
    assert _through(memo, "r", shorter, RESPONSES) == RESPONSES.parse_request(shorter)
    assert memo.reused == before
    longer = _codex_turns(3)
    longer["input"].append({"type": "function_call", "call_id": "late", "name": "shell", "arguments": "{}"})
    assert _through(memo, "r", longer, RESPONSES) == RESPONSES.parse_request(longer)  # joins the resumed turn
