"""Must-show 1: every adapter whose harness is installed runs it for real, through run_suite + the scheduler + the
local runtime, against proxy + bundled engine + gateway + env servers on loopback. The random tiny model
solves nothing; each rollout must end on its own (finished, or failed by the harness's own judgement, never
timed out) with at least one recorded model call, its exit status stored, and every file the harness wrote
for itself inside its workspace, none in the real home."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rollwire.app.stack import StackInfo
from rollwire.store.requests import whole_requests
from rollwire.store.schema import Rollout
from tests.harness_adapters.conftest import (
    model_calls,
    needs_binary,
    needs_module,
    run_one_task,
    workspace_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.needs_harness]
DEADLINE_S = 90.0


def _ended_by_itself(row: Rollout, stack: StackInfo) -> None:
    assert row.status in ("finished", "failed"), (row.status, row.error, row.log_tail)
    assert row.exit_code is not None, (row.error, row.log_tail)
    assert not (row.error or "").startswith("infrastructure"), row.error
    assert model_calls(stack, row.id), f"no model call recorded: {row.log_tail}"


def _written_since(folder: Path, since: float) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.stat().st_mtime >= since] if folder.is_dir() else []


@needs_binary("codex", "@openai/codex")
def test_codex_runs_a_task(engine_stack: StackInfo, tmp_path: Path) -> None:
    started = time.time()
    row = run_one_task(engine_stack, "codex", tmp_path, deadline_s=DEADLINE_S, mcp=False)  # its own tools only
    _ended_by_itself(row, engine_stack)
    home = workspace_of(tmp_path, row.id) / ".codex"
    assert (home / "config.toml").is_file()
    assert list((home / "sessions").rglob("*.jsonl")), "Codex kept no session transcript under its CODEX_HOME"
    assert not _written_since(Path.home() / ".codex" / "sessions", started)


@needs_binary("codex", "@openai/codex")
def test_codex_with_the_gateway_as_mcp_server(engine_stack: StackInfo, tmp_path: Path) -> None:
    """The default config has the gateway: Codex's default model gets every tool in an ``additional_tools``
    input item and the gateway's as a deferred namespace its ``exec`` tool can call; every model call of the
    rollout is accepted. (A scripted policy solving tasks this way: test_codex_defaults.py.)"""
    row = run_one_task(engine_stack, "codex", tmp_path, deadline_s=DEADLINE_S)
    _ended_by_itself(row, engine_stack)
    for text in whole_requests(model_calls(engine_stack, row.id)):
        request = json.loads(text)
        assert any(item.get("type") == "additional_tools" for item in request["input"])
        assert "mcp__rollwire" in text  # Codex listed the gateway's tools


@needs_binary("claude", "@anthropic-ai/claude-code")
def test_claude_code_runs_a_task(engine_stack: StackInfo, tmp_path: Path) -> None:
    started = time.time()
    # no built-in tools and a short system prompt keep the prompt inside the tiny model's context
    options: dict[str, Any] = {
        "max_turns": 2, "max_output_tokens": 24, "tools": "", "system_prompt": "You are a terse agent."
    }  # fmt: skip
    row = run_one_task(engine_stack, "claude-code", tmp_path, deadline_s=DEADLINE_S, **options)
    _ended_by_itself(row, engine_stack)
    if row.status == "failed":  # a random model runs into the output cap or the turn limit: Claude exits 1 saying so
        said = (row.log_tail or "").lower()
        assert "output token maximum" in said or "max turns" in said or "maximum number of turns" in said, row.log_tail
    workspace = workspace_of(tmp_path, row.id)
    assert (workspace / ".rollwire" / "claude-mcp.json").is_file()
    assert (workspace / ".claude").is_dir(), "Claude Code kept nothing under its CLAUDE_CONFIG_DIR"
    assert not _written_since(Path.home() / ".claude" / "projects", started)


@needs_module("agents", "openai-agents")
def test_openai_agents_sdk_runs_a_task(engine_stack: StackInfo, tmp_path: Path) -> None:
    row = run_one_task(engine_stack, "openai-agents", tmp_path, deadline_s=DEADLINE_S, max_turns=2, max_tokens=24)
    _ended_by_itself(row, engine_stack)
    assert row.status == "finished" and row.exit_code == 0, row.log_tail
    assert "openai-agents: " in (row.log_tail or "")


def test_mini_swe_agent_runs_a_task(mini_swe_python: str, engine_stack: StackInfo, tmp_path: Path) -> None:
    """With its own venv's Python (no rollwire there): the runner shipped into the workspace does the run."""
    options: dict[str, Any] = {"max_turns": 2, "max_tokens": 24, "python": mini_swe_python}
    row = run_one_task(engine_stack, "mini-swe-agent", tmp_path, deadline_s=DEADLINE_S, **options)
    _ended_by_itself(row, engine_stack)
    assert row.status == "finished" and row.exit_code == 0, row.log_tail
    assert "mini-swe-agent: " in (row.log_tail or ""), row.log_tail
    workspace = workspace_of(tmp_path, row.id)
    assert (workspace / "mini.traj.json").is_file() and (workspace / "mini-swe-agent.yaml").is_file()
    trajectory = json.loads((workspace / "mini.traj.json").read_text())
    assert trajectory["info"]["exit_status"], trajectory["info"]
    assert (workspace / "final_answer.txt").read_text() == (row.final_answer or "")
