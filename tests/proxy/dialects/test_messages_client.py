"""Must-show 1 (Messages): the official anthropic client's messages.create and messages.stream against
proxy + engine, with a tool_use/tool_result round trip in the history; answers parse, the trajectory is exact."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.proxy.dialects.conftest import Stack


@pytest.fixture()
def dialect_stack(conformance_stack: Stack) -> Stack:
    """Every test here runs against the bundled engine and against real vLLM."""
    return conformance_stack


TOOLS: list[Any] = [
    {
        "name": "get_weather",
        "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
ROUND_TRIP: list[Any] = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I should look it up.", "signature": ""},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C"}]},
]
SYSTEM: Any = [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}]


def _client(stack: Stack) -> tuple[anthropic.Anthropic, dict[str, Any]]:
    rollout = stack.new_rollout()
    return anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="unused", max_retries=0), rollout


def test_create_with_a_tool_round_trip(dialect_stack: Stack) -> None:
    client, rollout = _client(dialect_stack)
    first = len(dialect_stack.tap.calls)
    out = client.messages.create(
        model="claude-sonnet-4-5",
        system=SYSTEM,
        messages=ROUND_TRIP,
        tools=TOOLS,
        max_tokens=8,
        extra_body={"temperature": 0.0},
    )
    assert out.type == "message" and out.role == "assistant" and out.model == "claude-sonnet-4-5"
    assert 1 <= out.usage.output_tokens <= 8
    assert (
        out.stop_reason == ("max_tokens" if out.usage.output_tokens == 8 else "end_turn")
        or out.stop_reason == "tool_use"
    )
    history = ROUND_TRIP + [{"role": "assistant", "content": [b.model_dump() for b in out.content]}]
    again = client.messages.create(
        model="claude-sonnet-4-5",
        system=SYSTEM,
        messages=history + [{"role": "user", "content": "And Rome?"}],
        tools=TOOLS,
        max_tokens=6,
        extra_body={"temperature": 0.0},
    )
    assert again.usage.input_tokens > out.usage.input_tokens
    count = client.messages.count_tokens(model="claude-sonnet-4-5", system=SYSTEM, messages=ROUND_TRIP, tools=TOOLS)
    assert count.input_tokens == out.usage.input_tokens
    trajectory = dialect_stack.check_exact(rollout["id"], first)
    assert len(trajectory["segments"]) == 1


def test_stream_assembles_to_the_same_shape(dialect_stack: Stack) -> None:
    client, rollout = _client(dialect_stack)
    first = len(dialect_stack.tap.calls)
    with client.messages.stream(
        model="claude-haiku-4-5",
        system="Be terse.",
        messages=ROUND_TRIP,
        tools=TOOLS,
        max_tokens=10,
        extra_body={"temperature": 0.0},
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "message_delta" in kinds and "content_block_stop" in kinds
    text = "".join(b.text for b in final.content if b.type == "text")
    assert text == "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert final.usage.output_tokens == len(dialect_stack.tap.calls[-1][1]["choices"][0]["token_ids"])
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    dialect_stack.check_exact(rollout["id"], first)
