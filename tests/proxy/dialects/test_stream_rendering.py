"""Stream rendering of a crafted Generation (reasoning, text and two tool calls, which the tiny model rarely
emits): every event validates against the official SDKs' types and the deltas assemble to the full answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from rollwire.proxy.conversation import Choice, Conversation, Generation, Message, ToolCall
from rollwire.proxy.dialects.messages import MessagesDialect
from rollwire.proxy.dialects.responses import ResponsesDialect

CALLS = (ToolCall("call_a", "get_weather", '{"city": "Paris"}'), ToolCall("call_b", "get_time", "{}"))


def _generation(finish: str = "tool_calls", calls: tuple[ToolCall, ...] = CALLS) -> Generation:
    message = Message("assistant", "Let me check.", reasoning="plan it", tool_calls=calls)
    choice = Choice(0, message, finish, sampled_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3])
    return Generation("chatcmpl-abc123", 1700000000, "my-model", [choice], 11, 3, policy_version=4)


def _events(sse: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in sse.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        payload = json.loads(data[6:])
        assert payload["type"] == name[7:]
        out.append((name[7:], payload))
    return out


def test_responses_events_validate_and_assemble() -> None:
    dialect = ResponsesDialect()
    generation = _generation()
    events = _events("".join(dialect.stream_events(generation, Conversation("my-model", ()))))
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    parsed = [adapter.validate_python(payload) for _, payload in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert parsed[0].type == "response.created" and parsed[-1].type == "response.completed"
    final = Response.model_validate(events[-1][1]["response"])
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]
    args: dict[str, str] = {}
    for event in parsed:
        if event.type == "response.function_call_arguments.delta":
            args[event.item_id] = args.get(event.item_id, "") + event.delta
    assembled = []
    for item in final.output:
        if item.type == "function_call":
            assert item.id is not None  # every call item is named: its argument deltas carry the name
            assembled.append((item.call_id, item.name, args.get(item.id, "")))
    assert assembled == [(c.id, c.name, c.arguments) for c in CALLS]
    text = "".join(e.delta for e in parsed if e.type == "response.output_text.delta")
    assert text == final.output_text == "Let me check."
    assert final.usage is not None and final.usage.total_tokens == 14


def test_responses_body_reads_back_as_the_same_answer() -> None:
    dialect = ResponsesDialect()
    generation = _generation()
    body = dialect.response_body(generation)
    assert dialect.answer_message(body, 0).key() == generation.choices[0].message.key()
    assert dialect.response_body(_generation("length", ()))["status"] == "incomplete"


@pytest.mark.parametrize(("finish", "stop_reason"), [("tool_calls", "tool_use"), ("length", "max_tokens")])
def test_messages_events_validate_and_assemble(finish: str, stop_reason: str) -> None:
    dialect = MessagesDialect()
    generation = _generation(finish)
    events = _events("".join(dialect.stream_events(generation, Conversation("my-model", ()))))
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    parsed = [adapter.validate_python(p) for name, p in events if name != "ping"]
    assert [name for name, _ in events][:2] == ["message_start", "ping"]
    assert parsed[-1].type == "message_stop" and parsed[-2].type == "message_delta"
    assert parsed[-2].delta.stop_reason == stop_reason
    partial: dict[int, str] = {}
    for event in parsed:
        if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
    body = AnthropicMessage.model_validate(dialect.response_body(generation))
    uses = [(i, b) for i, b in enumerate(body.content) if b.type == "tool_use"]
    assert [(b.id, b.name, json.loads(partial[i])) for i, b in uses] == [
        (c.id, c.name, json.loads(c.arguments)) for c in CALLS
    ]
    assert [b.type for b in body.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert dialect.answer_message(dialect.response_body(generation), 0).key() == generation.choices[0].message.key()
