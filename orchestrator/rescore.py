"""Scoring a recorded run again with other checkers (``rollwire replay RUN --rescore CHECKER``), running no model
and no harness.

A checker reads a rollout's final environment state (and its final answer), and that state is swept after a
while. So each recorded rollout's state is built again: a rescore rollout (a row of a run of its own, so the
gateway serves it and records what it does) gets the recorded task's initial state, and its recorded MCP tool
calls are made again in order, through the gateway, with the official ``mcp`` client. Then the checker suite's
task of the same id scores that state with the recorded final answer, in a limited child process, as any
rollout is scored (``SuiteScorer``). A rebuilt call whose result differs from the recorded one (an environment
that is not deterministic) is counted and reported, so a new score says how far it stands on the old state.

Only MCP calls rebuild state: a checker that reads what a harness's built-in tools did is not scored again.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from rollwire.errors import InvalidRequest
from rollwire.mcp_servers.gateway.features import SEP
from rollwire.mcp_servers.gateway.replay import answered_calls
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.orchestrator.replay_run import recorded_run
from rollwire.orchestrator.scoring import ScoringInput
from rollwire.orchestrator.suite_run import StackAddresses, suite_ref
from rollwire.orchestrator.suite_scorer import SuiteScorer
from rollwire.rollouts import RolloutBook
from rollwire.store import Rollout, RolloutStatus, ToolEvent
from rollwire.store.db import open_engine


@dataclass(frozen=True, slots=True)
class RescoreOutcome:
    """One recorded rollout scored again."""

    rollout_id: str
    """The rescore rollout (its rebuilt tool calls are recorded under it)."""
    recorded_id: str
    task_id: str
    reward: float
    recorded_reward: float | None
    breakdown: dict[str, Any]
    tool_calls: int
    differed: int
    """Rebuilt calls whose result was not the recorded one."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id, "recorded_id": self.recorded_id, "task_id": self.task_id,
            "reward": self.reward, "recorded_reward": self.recorded_reward, "breakdown": self.breakdown,
            "tool_calls": self.tool_calls, "results_differed": self.differed,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class RescoreResult:
    run_id: str
    outcomes: list[RescoreOutcome]


async def _rebuild(gateway_url: str, token: str, events: Sequence[ToolEvent]) -> int:
    """Make ``events``' calls again through the gateway; returns how many answered otherwise than recorded."""
    from mcp import Client

    differed = 0
    async with Client(f"{gateway_url.rstrip('/')}/r/{token}/mcp") as client:
        exposed = {tool.name for tool in (await client.list_tools()).tools}
        for event in events:
            name = f"{event.server}{SEP}{event.tool}" if f"{event.server}{SEP}{event.tool}" in exposed else event.tool
            result = await client.call_tool(name, json.loads(event.arguments_json or "{}"))
            again = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            differed += again != json.loads(event.result_json)
    return differed


async def rescore_run(
    stack: StackAddresses, *, recorded: str, checker: str, run_id: str | None = None,
    timeout_s: float = 30.0, max_memory_mb: int = 512,
) -> RescoreResult:  # fmt: skip
    """Score every ended rollout of run ``recorded`` with the checkers of suite ``checker`` (task by task id)."""
    engine = await anyio.to_thread.run_sync(open_engine, stack.db_url)
    found = await anyio.to_thread.run_sync(recorded_run, engine, recorded)
    checkers = load_suite(checker)
    missing = sorted({r.task_id or "" for r in found.rollouts} - {t.id for t in checkers.tasks})
    if missing:
        raise InvalidRequest(f"checker suite {checkers.name!r} has no task {', '.join(missing)} (run {recorded!r} has)")
    scorer = SuiteScorer(checker, Path(stack.state_root), timeout_s, max_memory_mb)
    book = RolloutBook(engine)
    run_id = run_id or f"rescore-{secrets.token_hex(6)}"
    config = {"rescore_of": recorded, "checker": suite_ref(checker), "suite": found.suite, "harness": "rescore"}
    await anyio.to_thread.run_sync(book.ensure_run, run_id, run_id, config)
    outcomes = []
    for row in found.rollouts:
        outcomes.append(await _rescore_one(stack, engine, book, scorer, run_id, found.suite, row))
    return RescoreResult(run_id, outcomes)


async def _rescore_one(
    stack: StackAddresses, engine: Any, book: RolloutBook, scorer: SuiteScorer, run_id: str, suite: str, row: Rollout
) -> RescoreOutcome:
    meta = {"suite": suite, "rescore_of": row.id}
    if row.meta.get("mcp_servers"):  # servers the rollout had beside its task's: its calls went to them too
        meta["mcp_servers"] = row.meta["mcp_servers"]
    template = {
        "task_id": row.task_id, "group_id": f"{run_id}:{row.group_id or row.task_id}",
        "sample_index_start": row.sample_index, "meta": meta,
    }  # fmt: skip
    ((fresh, token),) = await anyio.to_thread.run_sync(book.create, run_id, 1, template)
    events = await anyio.to_thread.run_sync(answered_calls, engine, row.id)
    try:
        differed = await _rebuild(stack.gateway_url, token, events)
        if events and not (Path(stack.state_root) / fresh.id).is_dir():
            raise InvalidRequest(
                f"the state the env servers rebuilt for {row.id} is not under {stack.state_root}: name their state "
                "folder (--state-dir, or the stack file of the stack they run in)"
            )
        item = ScoringInput(run_id, fresh.id, row.task_id or "", token, row.final_answer, row.exit_code, "")
        score = await scorer.score(item)
    except BaseException as exc:
        why = f"rescoring failed: {exc.__class__.__name__}: {exc}"[:500]
        await anyio.to_thread.run_sync(lambda: book.set_status(fresh.id, RolloutStatus.FAILED, error=why))
        raise
    await anyio.to_thread.run_sync(
        lambda: book.set_status(
            fresh.id, RolloutStatus.FINISHED, reward=score.reward, reward_breakdown=score.breakdown,
            final_answer=row.final_answer,
        )
    )  # fmt: skip
    return RescoreOutcome(
        fresh.id, row.id, row.task_id or "", score.reward, row.reward, dict(score.breakdown), len(events), differed
    )


def rescore_lines(outcomes: Sequence[RescoreOutcome]) -> list[str]:
    """The rescore as text: one line per rollout."""
    lines = []
    for o in outcomes:
        was = "-" if o.recorded_reward is None else f"{o.recorded_reward:g}"
        note = f"; {o.differed} rebuilt results differed from the recording" if o.differed else ""
        lines.append(f"{o.recorded_id}  {o.task_id}  reward {o.reward:g} (recorded {was})  from {o.tool_calls} tool calls{note}")
    return lines


__all__ = ["RescoreOutcome", "RescoreResult", "rescore_lines", "rescore_run"]
