"""Must-show 1 (Claude Code): the real ``claude -p`` at its defaults (only base URL, key and the MCP config
set; the adapter's one print-mode permission setting is explained in its docstring), driven by a scripted
policy through three tool turns (two of its own Bash calls, one call of the gateway's tool), solves a task
with reward 1.0. Every request is answered, every call recorded, and the agent's turns splice into one
exact segment. The policy reports a 64k context, as ``rollwire up`` serves, so Claude Code's output cap
(``max_tokens`` 32000 or 64000, by model name) is clamped to what its ~45k-token prompt leaves."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.mcp_servers.tasks.schema import ToolCall
from rollwire.proxy.audit import audit
from rollwire.reconstruct import reconstruct
from rollwire.store import decode_ids
from rollwire.store.db import open_engine
from rollwire.store.prompts import whole_prompts
from rollwire.store.requests import whole_requests
from tests.harness_adapters.conftest import model_calls, needs_binary, run_one_task, scripted_policy_stack, workspace_of

pytestmark = [pytest.mark.slow, pytest.mark.needs_harness]
DEADLINE_S = 240.0
CONTEXT = 65536
"""What ``rollwire up`` serves the tiny model with."""
STEPS = [
    ToolCall(server="", tool="Bash", arguments={"command": "printf cat > draft.txt", "description": "Draft it"}),
    ToolCall(server="", tool="Bash", arguments={"command": "cat draft.txt", "description": "Check the draft"}),
    ToolCall(server="mcp__rollwire", tool="write_file", arguments={"path": "answer.txt", "content": "cat"}),
]
"""Claude Code's own tool twice, then the gateway's (Claude Code names it mcp__<server>__<tool>)."""


@needs_binary("claude", "@anthropic-ai/claude-code")
def test_claude_code_at_its_defaults_solves_a_task(tiny_model_dir: Path, tmp_path: Path) -> None:
    suite = load_suite("tiny")
    task = next(t for t in suite.tasks if t.id == "write-cat").model_copy(update={"reference_solution": STEPS})
    script = suite.model_copy(update={"tasks": [task]})
    with scripted_policy_stack(tiny_model_dir, tmp_path, [script], max_model_len=CONTEXT) as (tap, info):
        # the served name: a proxy in front of an upstream maps no other names (Claude Code's own is claude-opus-*)
        row = run_one_task(info, "claude-code", tmp_path / "ws", deadline_s=DEADLINE_S, model=info.model)
        calls = model_calls(info, row.id)
        trajectory = reconstruct(open_engine(info.db_url), row.id)
        found = audit(open_engine(info.db_url), rollout_id=row.id)
    assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
    assert row.reward == 1.0, (row.reward_breakdown, row.log_tail)
    assert (workspace_of(tmp_path / "ws", row.id) / "draft.txt").read_text() == "cat"  # Bash really ran
    used = [b["name"] for c in calls for b in json.loads(c.response_json)["content"] if b["type"] == "tool_use"]
    assert used == ["Bash", "Bash", "mcp__rollwire__write_file"], used
    requests = [json.loads(r) for r in whole_requests(calls)]
    results = [r["messages"][-1]["content"] for r in requests[1:]]
    assert all(r[0]["type"] == "tool_result" and not r[0].get("is_error") for r in results), results
    assert any(m["role"] == "system" for m in requests[0]["messages"])  # its reminders, inside messages
    for call, prompt, request in zip(calls, whole_prompts(calls), requests):  # its default cap (32000), clamped
        prompt_len = len(decode_ids(prompt))
        asked = request["max_tokens"]
        assert (call.max_tokens_requested, call.max_tokens_granted) == (asked, CONTEXT - prompt_len)
        assert CONTEXT - prompt_len < asked and prompt_len > 30_000  # its whole default prompt
    assert len(tap.calls) == len(calls) >= 4  # three tool turns and the answer, every one recorded
    assert [len(s.call_ids) for s in trajectory.segments] == [len(calls)]  # the agent's turns: one segment
    (segment,) = trajectory.segments
    for request, _ in tap.calls:  # what the upstream was really sent, in order, inside the one segment
        assert segment.token_ids[: len(request["prompt"])] == request["prompt"]
    assert sum(segment.loss_mask) == sum(len(decode_ids(c.completion_ids)) for c in calls)
    (claude,) = found.harnesses()  # the audit tells the same, by Claude Code's own name and version
    installed = subprocess.run(["claude", "--version"], capture_output=True, text=True, check=True).stdout.split()[0]
    assert (claude.harness, claude.version, claude.adapters) == ("claude-cli", installed, {"claude-code"}), claude
    assert (claude.total.spliced, claude.splice_rate(), found.breaks()) == (len(calls) - 1, 1.0, [])
