"""Must-show 1 (Responses): the official openai client's responses.create and responses.stream against
proxy + engine, with a tool round trip in the history; every answer parses and the trajectory is exact."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.responses import ResponseInputParam

from rollwire.reconstruct import load_calls
from rollwire.store import open_engine
from tests.proxy.dialects.conftest import Stack


@pytest.fixture()
def dialect_stack(conformance_stack: Stack) -> Stack:
    """Every test here runs against the bundled engine and against real vLLM."""
    return conformance_stack


TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
ROUND_TRIP: list[Any] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21C"},
]


def _client(stack: Stack) -> tuple[openai.OpenAI, dict[str, Any]]:
    rollout = stack.new_rollout()
    return openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0), rollout


def test_create_with_a_tool_round_trip(dialect_stack: Stack) -> None:
    client, rollout = _client(dialect_stack)
    first = len(dialect_stack.tap.calls)
    out = client.responses.create(
        model="gpt-5-codex",
        instructions="Be terse.",
        input=ROUND_TRIP,
        tools=TOOLS,
        max_output_tokens=8,
        temperature=0.0,
        store=False,
    )
    assert out.object == "response" and out.model == "gpt-5-codex"
    assert out.usage is not None and 1 <= out.usage.output_tokens <= 8
    assert out.usage.total_tokens == out.usage.input_tokens + out.usage.output_tokens
    assert out.status == ("incomplete" if out.usage.output_tokens == 8 else "completed")
    assert isinstance(out.output_text, str)
    # the harness carries the answer back and asks again: the second call continues the same segment
    history = ROUND_TRIP + [item.model_dump(exclude_none=True) for item in out.output]
    again = client.responses.create(
        model="gpt-5-codex",
        instructions="Be terse.",
        input=history + [{"role": "user", "content": "And Rome?"}],
        tools=TOOLS,
        max_output_tokens=6,
        temperature=0.0,
    )
    assert again.usage is not None and again.usage.input_tokens > out.usage.input_tokens
    trajectory = dialect_stack.check_exact(rollout["id"], first)
    assert len(trajectory["segments"]) == 1
    view = dialect_stack.admin.get(f"/admin/v1/rollouts/{rollout['id']}").json()
    assert [c["completion_tokens"] for c in view["calls"]] == [out.usage.output_tokens, again.usage.output_tokens]


def test_stream_assembles_to_the_same_shape(dialect_stack: Stack) -> None:
    client, rollout = _client(dialect_stack)
    first = len(dialect_stack.tap.calls)
    with client.responses.stream(
        model="any-name", input=ROUND_TRIP, tools=TOOLS, max_output_tokens=10, temperature=0.0
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text
    assert final.usage is not None and final.usage.output_tokens == len(
        dialect_stack.tap.calls[-1][1]["choices"][0]["token_ids"]
    )
    dialect_stack.check_exact(rollout["id"], first)


def test_previous_response_id_continues_the_stored_history(dialect_stack: Stack) -> None:
    client, rollout = _client(dialect_stack)
    first = len(dialect_stack.tap.calls)
    out = client.responses.create(model="m", input=ROUND_TRIP, tools=TOOLS, max_output_tokens=5, temperature=0.0)
    follow: ResponseInputParam = [{"role": "user", "content": "And Rome?"}]
    again = client.responses.create(
        model="m", previous_response_id=out.id, input=follow, tools=TOOLS, max_output_tokens=5, temperature=0.0
    )
    assert again.usage is not None and out.usage is not None
    assert again.usage.input_tokens > out.usage.input_tokens + out.usage.output_tokens
    # the second call's row keeps its request as an edit of the first's: named again, it is read back whole
    third = client.responses.create(
        model="m", previous_response_id=again.id, input=follow, tools=TOOLS, max_output_tokens=5, temperature=0.0
    )
    assert third.usage is not None and third.usage.input_tokens > again.usage.input_tokens + again.usage.output_tokens
    trajectory = dialect_stack.check_exact(rollout["id"], first)
    assert len(trajectory["segments"]) == 1  # each expanded history splices onto the last call's exact ids
    engine = open_engine(dialect_stack.store_url)
    try:
        calls = load_calls(engine, rollout["id"])
    finally:
        engine.dispose()
    assert [c.request_base for c in calls] == [None, calls[0].id, calls[1].id]
