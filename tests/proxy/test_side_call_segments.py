"""Each call the proxy records, and so each segment, says whether it is the agent's main line or a side call (a
title, a compaction summary), by rules a rollout (from its harness adapter) can replace; the trajectory stream
carries it, an old store gains the column, and GRPO trains on the main line only. The rules themselves:
``tests/core/test_side_calls.py``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anthropic
import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)
from sqlmodel import Session, select

from rollwire.side_calls import MAIN
from rollwire.store import ModelCall, open_engine
from rollwire.trainer.grpo import GRPOConfig, prepare_grpo
from rollwire.trajectory import Segment, Trajectory
from tests.proxy.conftest import Proxy

# What the pinned harnesses send for their side calls (the texts the default rules look for).
CLAUDE_TITLE = "Generate a concise, sentence-case title (3-7 words) that captures the main topic or goal of this"
CLAUDE_COMPACT = "You are a helpful AI assistant tasked with summarizing conversations."
CODEX_COMPACT = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM"
CODEX_MEMORY = "You are a Memory Writing Agent."


TOOLS: list[ChatCompletionFunctionToolParam] = [
    {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}
]
TASK: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "List the files."},
]


def _lines(proxy: Proxy, rollout_id: str) -> list[tuple[str, str]]:
    with Session(open_engine(proxy.store_url)) as session:
        calls = session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout_id)).all()
        return [(c.dialect, c.line) for c in sorted(calls, key=lambda c: c.id or 0)]


def _agent_with_a_title_call(rollout: dict[str, Any], model: str) -> None:
    """A main turn with tools, Claude Code's title call, then the main line continues."""
    chat = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    first = chat.chat.completions.create(model=model, messages=TASK, tools=TOOLS, max_tokens=4, seed=1)
    claude = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
    claude.messages.create(
        model="claude-haiku-4-5", max_tokens=4, system=CLAUDE_TITLE, messages=[{"role": "user", "content": "hi"}]
    )
    turn: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": first.choices[0].message.content or ""}
    again: list[ChatCompletionMessageParam] = [*TASK, turn, {"role": "user", "content": "Go on."}]
    chat.chat.completions.create(model=model, messages=again, tools=TOOLS, max_tokens=4, seed=2)


def test_side_calls_are_recorded_and_streamed_as_their_own_segments(proxy: Proxy, served_model: str) -> None:
    rollout = proxy.new_rollout()
    _agent_with_a_title_call(rollout, served_model)
    assert _lines(proxy, rollout["id"]) == [("chat", MAIN), ("messages", "side:title"), ("chat", MAIN)]
    proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 1.0}).raise_for_status()
    streamed = proxy.admin.get("/admin/v1/trajectories/stream", params={"run": rollout["run"], "wait": 0}).text
    trajectory = Trajectory.from_dict(next(json.loads(line) for line in streamed.splitlines() if line))
    lines = [s.line for s in trajectory.segments]
    assert lines.count("side:title") == 1 and MAIN in lines
    side = next(s for s in trajectory.segments if s.line != MAIN)
    assert side.break_reason is not None and len(side.call_ids) == 1
    main_calls = [c for s in trajectory.segments if s.line == MAIN for c in s.call_ids]
    assert len(main_calls) == 2


def test_a_rollout_can_replace_the_rules(proxy: Proxy, served_model: str) -> None:
    """As the orchestrator does with an adapter's ``side_call_rules``: the defaults no longer apply."""
    rules = [{"name": "helper", "text": "^HELPER"}]
    rollout = proxy.new_rollout(meta={"side_call_rules": rules})
    _agent_with_a_title_call(rollout, served_model)
    claude = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
    claude.messages.create(
        model="m", max_tokens=4, system="HELPER: say hi", messages=[{"role": "user", "content": "hi"}]
    )
    # the title call no longer a side call: a conversation of its own (other system text, no tools), a sub-agent's
    assert [line for _, line in _lines(proxy, rollout["id"])] == [MAIN, "agent:1", MAIN, "side:helper"]
    bad = proxy.admin.post(f"/admin/v1/runs/{rollout['run']}/rollouts", json={"meta": {"side_call_rules": [{}]}})
    assert bad.status_code == 400 and "side_call_rules[0]" in bad.json()["error"]["message"]


def test_an_older_store_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the table as an earlier version created it (no line column)
        db.execute("CREATE TABLE modelcall (id INTEGER PRIMARY KEY, rollout_id VARCHAR NOT NULL)")
        db.execute("INSERT INTO modelcall (rollout_id) VALUES ('ro-1')")
    open_engine(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT rollout_id, line FROM modelcall").fetchall() == [("ro-1", MAIN)]


def _trajectory(rollout: str, reward: float) -> Trajectory:
    main = Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.5], [-1, 0, 0])
    side = Segment([7, 8, 9], [0, 1, 1], [0.0, -0.5, -0.5], [-1, 0, 0], "a side call (side:title)", line="side:title")
    return Trajectory(rollout, "run", "t", "g", reward, "finished", [main, side])


def test_grpo_trains_on_the_main_line_by_default() -> None:
    group = [[_trajectory("a", 1.0), _trajectory("b", 0.0)]]
    default = prepare_grpo(group, GRPOConfig(), current_version=0)
    assert [s.token_ids for s in default.samples] == [[1, 2, 3], [1, 2, 3]]
    both = prepare_grpo(group, GRPOConfig(side_calls=True), current_version=0)
    assert sorted(s.token_ids[0] for s in both.samples) == [1, 1, 7, 7]
    assert Segment.from_dict(_trajectory("a", 1.0).segments[1].to_dict()).line == "side:title"
    older = {"token_ids": [1], "loss_mask": [0], "logprobs": [0.0], "policy_versions": [-1]}  # written before lines
    assert Segment.from_dict(older).line == MAIN
