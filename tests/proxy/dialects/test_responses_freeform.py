"""Must-show 3: what Codex's default configuration sends, through the official openai client.

- ``custom`` (freeform) tools: the template sees a function with one string parameter ``input``; a sampled
  call goes back as a ``custom_tool_call`` (streamed with ``response.custom_tool_call_input.delta/done``);
  carried back with its ``custom_tool_call_output`` (a string or a list of text parts) it renders as it was
  sampled, so the next call splices onto the exact ids.
- ``additional_tools`` input items (namespaces of functions and freeform tools): the same prompt as the same
  tools sent in ``tools``.
- Hosted tools (``web_search``, ``file_search``, ...): left out of the prompt and named on the recorded call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlmodel import select

from rollwire.store import ModelCall, open_engine, session_scope
from rollwire.tokenizers import load_tokenizer
from tests.proxy import test_tool_call_stream as upstream
from tests.proxy.conftest import OpenAIRollout
from tests.proxy.dialects.conftest import Stack
from tests.proxy.test_tool_call_stream import Script

GRAMMAR = {"type": "grammar", "syntax": "lark", "definition": "start: /[\\s\\S]+/"}
EXEC: Any = {"type": "custom", "name": "exec", "description": "Run JavaScript.", "format": GRAMMAR}
WAIT: Any = {"type": "function", "name": "wait", "parameters": {"type": "object", "properties": {}}}
SLEEP: Any = {"type": "function", "name": "sleep", "parameters": {"type": "object", "properties": {}}}
# as Codex's default model sends them: "functions" is the API's default namespace, "clock" is not
ADDITIONAL: Any = {
    "type": "additional_tools",
    "role": "developer",
    "tools": [
        {"type": "namespace", "name": "functions", "description": "", "tools": [EXEC, WAIT]},
        {"type": "namespace", "name": "clock", "description": "", "tools": [SLEEP]},
    ],
}
SAME_AS_TOP_LEVEL: Any = [EXEC, WAIT, {**SLEEP, "name": "clock__sleep"}]
HOSTED: Any = [
    {"type": "web_search", "external_web_access": False},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "image_generation"},
]
SOURCE = 'const r = await tools.exec_command({cmd: "ls"});\ntext(r.output);'
CALL = "<tool_call>\n" + json.dumps({"name": "exec", "arguments": {"input": SOURCE}}) + "\n</tool_call>"
INPUT: list[Any] = [{"role": "user", "content": "List the files."}]
scripted = upstream.scripted
"""An upstream that samples scripted ids: the tiny random model rarely emits a tool call."""


def _prompts(stack: Stack, requests: list[dict[str, Any]]) -> list[list[int]]:
    """Each request in a rollout of its own (no splicing): the prompts the engine was sent."""
    first = len(stack.tap.calls)
    for request in requests:
        rollout = stack.new_rollout()
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
        client.responses.create(model="gpt-6.2-sol", max_output_tokens=1, temperature=0.0, **request)
    return [request["prompt"] for request, _ in stack.tap.calls[first:]]


def test_additional_tools_render_as_the_same_tools_at_the_top_level(dialect_stack: Stack, tiny_model_dir: Path) -> None:
    items, top = _prompts(
        dialect_stack, [{"input": [ADDITIONAL, *INPUT]}, {"input": INPUT, "tools": SAME_AS_TOP_LEVEL}]
    )
    assert items == top
    prompt = load_tokenizer(tiny_model_dir).decode(items)
    for name in ("exec", "wait", "clock__sleep"):  # the default namespace adds no prefix
        assert f'"name": "{name}"' in prompt
    # the freeform tool: one string parameter, its grammar quoted
    assert '"input": {"type": "string"' in prompt and "lark grammar" in prompt and "start: /" in prompt


def test_hosted_tools_are_left_out_and_recorded(dialect_stack: Stack) -> None:
    with_hosted, without = _prompts(
        dialect_stack, [{"input": INPUT, "tools": [WAIT, *HOSTED]}, {"input": INPUT, "tools": [WAIT]}]
    )
    assert with_hosted == without
    with session_scope(open_engine(dialect_stack.store_url)) as session:
        rows = session.exec(select(ModelCall).order_by(ModelCall.id.desc()).limit(2)).all()  # type: ignore[union-attr]
        left_out = [json.loads(r.response_json)["left_out_tools"] for r in rows]
    assert left_out == [[], [{"type": t["type"], "at": f"tools[{i + 1}]"} for i, t in enumerate(HOSTED)]]


def _ask(client: openai.OpenAI, items: list[Any], stream: bool) -> tuple[Any, list[Any]]:
    """The final response, and (streamed) every event the SDK parsed."""
    body: Any = {"model": "m", "input": [ADDITIONAL, *items], "parallel_tool_calls": False}
    if not stream:
        return client.responses.create(**body), []
    with client.responses.stream(**body) as events:
        seen = list(events)
        return events.get_final_response(), seen


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_sampled_freeform_call_goes_back_as_custom_tool_call(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script], stream: bool
) -> None:
    url, script = scripted
    script.text = CALL
    _, client, _ = openai_rollout(url)
    out, events = _ask(client, INPUT, stream)
    calls = [item for item in out.output if item.type == "custom_tool_call"]
    assert [(c.name, c.namespace, c.input) for c in calls] == [("exec", None, SOURCE)]
    if stream:
        kinds = [e.type for e in events]
        deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
        (done,) = [e for e in events if e.type == "response.custom_tool_call_input.done"]
        assert "".join(deltas) == done.input == SOURCE
        assert kinds.index("response.custom_tool_call_input.done") < kinds.index("response.completed")
    script.text = '<tool_call>\n{"name": "clock__sleep", "arguments": {}}\n</tool_call>'
    namespaced, _ = _ask(client, INPUT, stream)
    assert [(c.type, c.namespace, c.name) for c in namespaced.output] == [("function_call", "clock", "sleep")]


@pytest.mark.parametrize(
    "output",
    ["file_a\nfile_b", [{"type": "input_text", "text": "file_a\n"}, {"type": "input_text", "text": "file_b"}]],
    ids=["string", "array"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_the_freeform_call_carried_back_splices_onto_the_exact_ids(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script], stream: bool, output: Any
) -> None:
    url, script = scripted
    script.text = CALL
    proxy, client, rollout = openai_rollout(url)
    out, _ = _ask(client, INPUT, stream)
    sampled = script.ids()
    carried = [item.model_dump(exclude_none=True) for item in out.output]  # as Codex carries them back
    (call_id,) = [item["call_id"] for item in carried if item["type"] == "custom_tool_call"]
    script.text = "Done."
    result = {"type": "custom_tool_call_output", "call_id": call_id, "output": output}
    _ask(client, INPUT + carried + [result], stream)
    first, second = script.prompts
    assert second[: len(first) + len(sampled)] == first + sampled
    segments = proxy.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()["segments"]
    assert len(segments) == 1
    assert segments[0]["token_ids"][: len(second)] == second
    assert segments[0]["loss_mask"][len(first) : len(first) + len(sampled)] == [1] * len(sampled)
    tail = script.tokenizer.decode(second[len(first) + len(sampled) :])
    assert "<tool_response>\nfile_a\nfile_b\n</tool_response>" in tail  # both shapes render the same text


def test_a_freeform_tool_in_another_namespace_goes_back_with_it() -> None:
    """Namespaced freeform tools keep both mappings: the call is a ``custom_tool_call`` with its namespace, and
    carried back it is the flat name the model sampled, with the input as its one argument."""
    from rollwire.proxy.conversation import ToolCall as Call
    from rollwire.proxy.dialects.responses import ResponsesDialect

    patch = {"type": "custom", "name": "apply_patch", "format": {"type": "text"}}
    body: Any = {"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "edit", "tools": [patch]}]}
    dialect = ResponsesDialect().for_request(body)
    item = dialect.call_item("s", 0, Call("call_1", "edit__apply_patch", json.dumps({"input": "*** Begin Patch"})))
    assert (item["type"], item["namespace"], item["name"], item["input"]) == (
        "custom_tool_call", "edit", "apply_patch", "*** Begin Patch"
    )  # fmt: skip
    carried = ResponsesDialect().parse_request({**body, "input": [item]}).messages[0].tool_calls[0]
    assert (carried.name, json.loads(carried.arguments)) == ("edit__apply_patch", {"input": "*** Begin Patch"})
