"""Must-show 1 (Codex): the real Codex CLI at its default configuration (only the proxy's URL, the key, the
gateway and, for the second case, a model name) solves a task with reward 1.0 through three tool turns, using
its own shell and the gateway's MCP tool, driven by a scripted policy upstream.

- Codex's default model: no top-level tools; every tool comes in an ``additional_tools`` input item, the main
  one the freeform ``exec`` (JavaScript that calls the other tools, the MCP server's among them). The policy's
  calls go back as ``custom_tool_call`` items and come back as ``custom_tool_call_output``.
- A custom model slug: classic function tools, the MCP server as a ``namespace`` tool, and the hosted
  ``web_search``, which the proxy leaves out of the prompt and names on each recorded call.

Either way every call is recorded and the agent's turns splice into one exact segment: each prompt the
upstream was really sent sits unchanged at the start of the segment, and only sampled tokens are trained on.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.mcp_servers.tasks.schema import Suite, ToolCall
from rollwire.proxy.audit import audit
from rollwire.reconstruct import reconstruct
from rollwire.store import decode_ids
from rollwire.store.db import open_engine
from rollwire.store.requests import whole_requests
from rollwire.store.schema import ModelCall, Rollout
from tests.harness_adapters.conftest import model_calls, needs_binary, run_one_task, scripted_policy_stack

pytestmark = [pytest.mark.slow, pytest.mark.needs_harness, needs_binary("codex", "@openai/codex")]
DEADLINE_S = 180.0
SCRIPTED_POLICY = "scripted-policy"
"""The name scripted_policy_stack's upstream serves."""
GATEWAY = "mcp__rollwire"
"""The namespace Codex gives the MCP server the adapter names ``rollwire``."""


def _script(steps: list[ToolCall]) -> Suite:
    """The tiny suite's write-cat task, solved by ``steps`` (the checker wants cat in answer.txt)."""
    suite = load_suite("tiny")
    task = next(t for t in suite.tasks if t.id == "write-cat")
    return suite.model_copy(update={"tasks": [task.model_copy(update={"reference_solution": steps})]})


def _js(source: str) -> ToolCall:
    """One call of Codex's freeform ``exec`` tool: JavaScript that calls its nested tools."""
    return ToolCall(server="", tool="exec", arguments={"input": source})


DEFAULT_MODEL_STEPS = [
    _js('const r = await tools.exec_command({cmd: "ls -a"});\ntext(r.output);'),  # Codex's own shell
    _js(f'text(JSON.stringify(await tools.{GATEWAY}__write_file({{path: "answer.txt", content: "cat"}})));'),
    _js('const r = await tools.exec_command({cmd: "echo written"});\ntext(r.output);'),
]
SLUG_STEPS = [
    ToolCall(server="", tool="exec_command", arguments={"cmd": "ls -a"}),
    ToolCall(server=GATEWAY, tool="write_file", arguments={"path": "answer.txt", "content": "cat"}),
    ToolCall(server="", tool="exec_command", arguments={"cmd": "echo written"}),
]


def _solve(model_dir: Path, folder: Path, steps: list[ToolCall], **options: Any) -> tuple[Any, Any, Rollout]:
    with pytest.MonkeyPatch.context() as env:  # read by the proxy process at its start
        # Codex asks for its own model's name (or the slug): the one served model answers to every name
        env.setenv("ROLLWIRE_PROXY__MODEL_ALIASES", json.dumps({"*": SCRIPTED_POLICY}))
        with scripted_policy_stack(model_dir, folder, [_script(steps)]) as (tap, info):
            env.delenv("ROLLWIRE_PROXY__MODEL_ALIASES")
            row = run_one_task(info, "codex", folder / "ws", deadline_s=DEADLINE_S, **options)
            return tap, info, row


def _assert_one_exact_segment(tap: Any, info: Any, row: Rollout, calls: list[ModelCall]) -> None:
    trajectory = reconstruct(open_engine(info.db_url), row.id)
    assert len(tap.calls) == len(calls) >= 4  # three tool turns and the answer, each recorded
    assert [len(s.call_ids) for s in trajectory.segments] == [len(calls)], [c.segment_break for c in calls]
    (segment,) = trajectory.segments
    for request, _ in tap.calls:  # what the upstream was really sent, in order, inside the one segment
        assert segment.token_ids[: len(request["prompt"])] == request["prompt"]
    assert sum(segment.loss_mask) == sum(len(decode_ids(c.completion_ids)) for c in calls)  # sampled only
    found = audit(open_engine(info.db_url), rollout_id=row.id)  # the audit tells the same, by Codex's own name
    (codex,) = found.harnesses()
    installed = subprocess.run(["codex", "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    assert (codex.harness, codex.version, codex.adapters) == ("codex_exec", installed, {"codex"}), codex
    assert (codex.total.spliced, codex.splice_rate(), found.breaks()) == (len(calls) - 1, 1.0, [])


def _items(body: str, side: str) -> list[dict[str, Any]]:
    """The ``input`` items of a whole request, or the ``output`` items of a response (JSON text)."""
    return list(json.loads(body)[side])


def test_codex_default_model_solves_with_freeform_exec(tiny_model_dir: Path, tmp_path: Path) -> None:
    tap, info, row = _solve(tiny_model_dir, tmp_path, DEFAULT_MODEL_STEPS)  # no model option: Codex's own
    assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
    assert row.reward == 1.0, (row.reward_breakdown, row.log_tail)
    calls = model_calls(info, row.id)
    requests = whole_requests(calls)
    first = json.loads(requests[0])
    assert not first.get("tools"), "Codex's default model sends its tools as input items"
    assert any(i.get("type") == "additional_tools" for i in first["input"])
    for call, step in zip(calls, DEFAULT_MODEL_STEPS, strict=False):
        (sent,) = [i for i in _items(call.response_json, "output") if i["type"] not in ("message", "reasoning")]
        assert (sent["type"], sent["name"], sent["input"]) == ("custom_tool_call", "exec", step.arguments["input"])
    carried = [i for i in _items(requests[-1], "input") if i.get("type") == "custom_tool_call_output"]
    assert len(carried) == len(DEFAULT_MODEL_STEPS)
    assert "wrote 3 bytes to answer.txt" in json.dumps(carried[1]["output"]), carried[1]  # the gateway, via exec
    assert "written" in json.dumps(carried[2]["output"]), carried[2]  # its own shell
    _assert_one_exact_segment(tap, info, row, calls)


def test_codex_custom_slug_solves_with_function_tools(tiny_model_dir: Path, tmp_path: Path) -> None:
    tap, info, row = _solve(tiny_model_dir, tmp_path, SLUG_STEPS, model="my-policy")
    assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
    assert row.reward == 1.0, (row.reward_breakdown, row.log_tail)
    calls = model_calls(info, row.id)
    requests = whole_requests(calls)
    for call, request in zip(calls, requests):  # the hosted web_search Codex sends by default: named on each call
        tools = json.loads(request)["tools"]
        hosted = [{"type": t["type"], "at": f"tools[{i}]"} for i, t in enumerate(tools) if t["type"] == "web_search"]
        assert hosted and json.loads(call.response_json)["left_out_tools"] == hosted
    sent = [[(i.get("namespace"), i["name"]) for i in _items(c.response_json, "output") if i["type"] == "function_call"]
            for c in calls]  # fmt: skip
    assert sent == [[(None, "exec_command")], [(GATEWAY, "write_file")], [(None, "exec_command")], []]
    outputs = [i for i in _items(requests[-1], "input") if i.get("type") == "function_call_output"]
    assert len(outputs) == 3 and "written" in json.dumps(outputs[2]["output"])
    _assert_one_exact_segment(tap, info, row, calls)
