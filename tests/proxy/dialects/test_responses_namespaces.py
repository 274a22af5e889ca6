"""Responses ``namespace`` tools (how Codex sends an MCP server's tools), through the official openai client:
the template sees each inner function as one flat ``<namespace>__<tool>`` tool; a call the model samples goes
back as a ``function_call`` with ``namespace`` + ``name`` (streamed and not); that call carried back in the
history renders as what was sampled, so the next call splices onto the exact ids in one segment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from rollwire.tokenizers import load_tokenizer
from tests.proxy import test_tool_call_stream as upstream
from tests.proxy.conftest import OpenAIRollout
from tests.proxy.dialects.conftest import Stack
from tests.proxy.test_tool_call_stream import Script

SCHEMA: Any = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
NAMESPACE: Any = {
    "type": "namespace",
    "name": "mcp__rollwire",
    "description": "Tools of the rollwire MCP server.",
    "tools": [
        {
            "type": "function",
            "name": "write_file",
            "description": "Write a file.",
            "strict": False,
            "parameters": SCHEMA,
        }
    ],
}
SHELL: Any = {"type": "function", "name": "shell", "description": "Run a command.", "parameters": SCHEMA}
FLAT: Any = {
    "type": "function",
    "name": "mcp__rollwire__write_file",
    "description": "Write a file.",
    "parameters": SCHEMA,
}
CALL = '<tool_call>\n{"name": "mcp__rollwire__write_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
INPUT: list[Any] = [{"role": "user", "content": "Write a.txt."}]
scripted = upstream.scripted
"""An upstream that samples scripted ids: the tiny random model rarely emits a tool call."""


def _history(**call: Any) -> list[Any]:
    done = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    return INPUT + [{"type": "function_call", "call_id": "call_1", "arguments": '{"path": "a.txt"}', **call}, done]


FLATTENED = [  # (tools, history) as Codex sends them, and the same with the flat names the template shows
    ([SHELL, NAMESPACE], _history(namespace="mcp__rollwire", name="write_file")),
    ([SHELL, FLAT], _history(name="mcp__rollwire__write_file")),
]


def test_the_template_sees_each_namespaced_function_as_one_flat_tool(
    dialect_stack: Stack, tiny_model_dir: Path
) -> None:
    first = len(dialect_stack.tap.calls)
    for tools, history in FLATTENED:  # one rollout each: no splicing, each prompt is a fresh render
        rollout = dialect_stack.new_rollout()
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
        client.responses.create(model="m", input=history, tools=tools, max_output_tokens=1, temperature=0.0)
    namespaced, flat = (request["prompt"] for request, _ in dialect_stack.tap.calls[first:])
    assert namespaced == flat  # tools and the carried-back call render exactly as their flat equivalents
    prompt = load_tokenizer(tiny_model_dir).decode(namespaced)
    assert '"name": "mcp__rollwire__write_file"' in prompt and '"name": "shell"' in prompt
    assert prompt.count("mcp__rollwire__write_file") == 2  # the tool, and the call in the history
    assert '"namespace"' not in prompt


def _ask(client: openai.OpenAI, items: list[Any], stream: bool) -> tuple[Any, list[Any]]:
    """The final response, and (streamed) every event the SDK parsed."""
    if not stream:
        return client.responses.create(model="m", input=items, tools=[SHELL, NAMESPACE]), []
    with client.responses.stream(model="m", input=items, tools=[SHELL, NAMESPACE]) as events:
        seen = list(events)
        return events.get_final_response(), seen


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_sampled_call_goes_back_with_namespace_and_name(
    openai_rollout: OpenAIRollout,
    scripted: tuple[str, Script],
    stream: bool,
) -> None:
    url, script = scripted
    script.text = CALL
    _, client, _ = openai_rollout(url)
    out, events = _ask(client, INPUT, stream)
    calls = [item for item in out.output if item.type == "function_call"]
    assert [(c.namespace, c.name, json.loads(c.arguments)) for c in calls] == [
        ("mcp__rollwire", "write_file", {"path": "a.txt"})
    ]
    if stream:
        added = [e.item for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert [(i.namespace, i.name) for i in added] == [("mcp__rollwire", "write_file")]
        assert [(d.name, json.loads(d.arguments)) for d in done] == [("write_file", {"path": "a.txt"})]
    script.text = '<tool_call>\n{"name": "shell", "arguments": {"path": "."}}\n</tool_call>'
    plain, _ = _ask(client, INPUT, stream)
    assert [(c.namespace, c.name) for c in plain.output if c.type == "function_call"] == [(None, "shell")]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_the_call_carried_back_splices_onto_the_exact_ids(
    openai_rollout: OpenAIRollout,
    scripted: tuple[str, Script],
    stream: bool,
) -> None:
    url, script = scripted
    script.text = CALL
    proxy, client, rollout = openai_rollout(url)
    out, _ = _ask(client, INPUT, stream)
    sampled = script.ids()
    # as Codex sends it: the call with its namespace, then the tool's output
    carried = [item.model_dump(exclude_none=True) for item in out.output]
    assert [item.get("namespace") for item in carried if item["type"] == "function_call"] == ["mcp__rollwire"]
    call_id = next(item["call_id"] for item in carried if item["type"] == "function_call")
    script.text = "Done."
    _ask(client, INPUT + carried + [{"type": "function_call_output", "call_id": call_id, "output": "ok"}], stream)
    first, second = script.prompts
    assert second[: len(first) + len(sampled)] == first + sampled
    trajectory = proxy.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()
    assert len(trajectory["segments"]) == 1
    segment = trajectory["segments"][0]
    assert segment["token_ids"][: len(second)] == second
    assert segment["loss_mask"][len(first) : len(first) + len(sampled)] == [1] * len(sampled)


def test_a_call_without_its_namespace_does_not_splice(
    openai_rollout: OpenAIRollout,
    scripted: tuple[str, Script],
) -> None:
    """The carried-back call must name the tool the model sampled: ``write_file`` alone is another tool."""
    url, script = scripted
    script.text = CALL
    proxy, client, rollout = openai_rollout(url)
    out, _ = _ask(client, INPUT, stream=False)
    carried = [item.model_dump(exclude_none=True) for item in out.output]
    for item in carried:
        item.pop("namespace", None)
    script.text = "Done."
    _ask(
        client,
        INPUT + carried + [{"type": "function_call_output", "call_id": carried[0]["call_id"], "output": "ok"}],
        False,
    )
    segments = proxy.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()["segments"]
    assert len(segments) == 2
