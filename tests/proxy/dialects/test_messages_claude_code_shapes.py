"""Must-show 2: what Claude Code sends at its defaults, each piece on its own through the official client:
``system`` messages inside ``messages`` (rendered where they stand), ``thinking`` as the template's reasoning
switch, the fields the proxy accepts without acting on them, ``top_k`` reaching the engine, the ``HEAD /``
probe, ``count_tokens`` matching what a call is billed, and its structured side calls (``output_config.format``)
answered with JSON by the engine."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest

from tests.proxy.dialects.conftest import Stack

REMINDER = "<system-reminder>Today is Thursday.</system-reminder>"
HISTORY: list[Any] = [
    {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]},
    {"role": "system", "content": REMINDER},
]


def _client(stack: Stack) -> tuple[anthropic.Anthropic, dict[str, Any]]:
    rollout = stack.new_rollout()
    return anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="unused", max_retries=0), rollout


def _prompt_text(stack: Stack, tiny_model_dir: Any) -> str:
    from transformers import AutoTokenizer

    prompt = stack.tap.calls[-1][0]["prompt"]
    return str(AutoTokenizer.from_pretrained(str(tiny_model_dir)).decode(prompt, skip_special_tokens=False))


def test_a_system_message_inside_messages_renders_where_it_stands(dialect_stack: Stack, tiny_model_dir: Any) -> None:
    client, rollout = _client(dialect_stack)
    out = client.messages.create(
        model="claude-opus-4-8", system="Be terse.", messages=HISTORY, max_tokens=4, extra_body={"temperature": 0.0}
    )
    text = _prompt_text(dialect_stack, tiny_model_dir)
    user_turn = "<|im_start|>user\nHi<|im_end|>\n"
    assert text.startswith("<|im_start|>system\nBe terse.<|im_end|>\n" + user_turn)
    assert text.endswith(user_turn + f"<|im_start|>system\n{REMINDER}<|im_end|>\n<|im_start|>assistant\n")
    history = HISTORY + [
        {"role": "assistant", "content": [b.model_dump() for b in out.content]},
        {"role": "system", "content": [{"type": "text", "text": "Second reminder."}]},
        {"role": "user", "content": "Go on."},
    ]
    client.messages.create(model="claude-opus-4-8", system="Be terse.", messages=history, max_tokens=4)
    assert "<|im_start|>system\nSecond reminder.<|im_end|>\n<|im_start|>user\nGo on." in _prompt_text(
        dialect_stack, tiny_model_dir
    )
    trajectory = dialect_stack.check_exact(rollout["id"], len(dialect_stack.tap.calls) - 2)
    assert len(trajectory["segments"]) == 1  # the second call splices onto the first's exact ids


@pytest.mark.parametrize(
    ("thinking", "empty_think_block"),
    [({"type": "disabled"}, True), ({"type": "enabled", "budget_tokens": 1024}, False), ({"type": "adaptive"}, False)],
)
def test_thinking_drives_the_templates_reasoning_switch(
    dialect_stack: Stack, tiny_model_dir: Any, thinking: dict[str, Any], empty_think_block: bool
) -> None:
    client, _ = _client(dialect_stack)
    client.messages.create(
        model="claude-opus-4-8", messages=HISTORY[:1], max_tokens=3, extra_body={"thinking": thinking}
    )
    text = _prompt_text(dialect_stack, tiny_model_dir)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") is empty_think_block
    count = client.messages.count_tokens(
        model="claude-opus-4-8", messages=HISTORY[:1], extra_body={"thinking": thinking}
    )
    assert count.input_tokens == len(dialect_stack.tap.calls[-1][0]["prompt"])


def test_claude_codes_other_fields_are_accepted_and_top_k_reaches_the_engine(dialect_stack: Stack) -> None:
    client, rollout = _client(dialect_stack)
    extra = {
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": '{"device_id":"d","session_id":"s"}'},
        "top_k": 5,
    }
    system: Any = [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    tools: Any = [{"name": "f", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}]
    out = client.messages.create(
        model="claude-opus-4-8", system=system, messages=HISTORY, tools=tools, max_tokens=3, extra_body=extra
    )
    assert out.type == "message"
    assert dialect_stack.tap.calls[-1][0]["top_k"] == 5
    dialect_stack.check_exact(rollout["id"], len(dialect_stack.tap.calls) - 1)


def test_count_tokens_is_what_a_call_is_billed(dialect_stack: Stack) -> None:
    client, _ = _client(dialect_stack)
    body: dict[str, Any] = {"system": "Be terse.", "messages": HISTORY}
    out = client.messages.create(model="claude-opus-4-8", max_tokens=2, **body)
    count = client.messages.count_tokens(model="claude-opus-4-8", **body)
    assert count.input_tokens == out.usage.input_tokens == len(dialect_stack.tap.calls[-1][0]["prompt"])


@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_the_root_probe_answers_200(dialect_stack: Stack, method: str) -> None:
    rollout = dialect_stack.new_rollout()
    for url in (dialect_stack.url + "/", rollout["anthropic_base_url"], rollout["anthropic_base_url"] + "/"):
        assert httpx.request(method, url, timeout=10).status_code == 200, url


def test_top_k_acts_in_the_engine(dialect_stack: Stack) -> None:
    """top_k 1 at temperature 1 samples what greedy decoding does: the engine applied it."""
    client, _ = _client(dialect_stack)
    sampled = []
    for extra in ({"temperature": 0.0}, {"temperature": 1.0, "top_k": 1}, {"temperature": 1.0, "top_k": 1}):
        client.messages.create(model="claude-opus-4-8", messages=HISTORY[:1], max_tokens=12, extra_body=extra)
        sampled.append(dialect_stack.tap.calls[-1][1]["choices"][0]["token_ids"])
    assert sampled[0] == sampled[1] == sampled[2]


CLAUDE_CODE_FORMATS: dict[str, dict[str, Any]] = {
    "generate_session_title": {"properties": {"title": {"type": "string"}}, "required": ["title"]},
    "rename_generate_name": {"properties": {"name": {"type": "string"}}, "required": ["name"]},
    "teleport_generate_title": {
        "properties": {"title": {"type": "string"}, "branch": {"type": "string"}}, "required": ["title", "branch"]
    },
    "hook_verdict": {
        "properties": {"ok": {"type": "boolean"}, "reason": {"type": "string"}, "impossible": {"type": "boolean"}},
        "required": ["ok", "reason"],
    },
}
"""The ``output_config.format`` schemas Claude Code 2.1.197 sends on its side calls (session title, rename,
teleport title and branch, a hook's verdict), as its binary holds them: objects, no other properties."""


@pytest.mark.parametrize("source", list(CLAUDE_CODE_FORMATS))
def test_claude_codes_structured_side_calls_get_json_from_the_engine(
    conformance_stack: Stack, source: str
) -> None:
    """Each answered 200 (not refused), the text JSON of the schema: whole where the model ended it, else an
    opening of it cut at the output cap (a free string may run that long); on the bundled engine and vLLM."""
    schema = {"type": "object", **CLAUDE_CODE_FORMATS[source], "additionalProperties": False}
    client, rollout = _client(conformance_stack)
    out = client.messages.create(
        model="claude-haiku-4-5", max_tokens=48, messages=[{"role": "user", "content": "Fix the flaky retry test."}],
        system=[{"type": "text", "text": "Generate a concise title for this coding session."}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )  # fmt: skip
    text = "".join(block.text for block in out.content if block.type == "text")
    first = schema["required"][0]
    assert text.startswith(f'{{"{first}":'), text
    if out.stop_reason == "end_turn":
        jsonschema.validate(json.loads(text), schema)
    else:
        assert out.stop_reason == "max_tokens", out.stop_reason
    conformance_stack.check_exact(rollout["id"], len(conformance_stack.tap.calls) - 1)
