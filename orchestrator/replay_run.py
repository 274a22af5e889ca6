"""Replaying a recorded run (``rollwire replay``): every rollout of it run again, same task, harness and sample
index, with its tool calls answered from its recording while they match it (``mcp_servers.gateway.replay``).

The replay is a run of its own (``config.replay_of`` names the recorded run), so its rollouts, trajectories and
rewards sit beside the recorded ones and compare row by row: ``replay_report`` pairs them and says, per rollout,
how many tool calls were answered from the recording and where (tool call, model turn, expected call, actual call)
the replay left it. What policy answers is whatever upstream the stack's proxy has: the recorded one at
temperature 0 gives the recorded trajectory again; another checkpoint is compared on identical tool results.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from rollwire.errors import InvalidRequest, NotFound
from rollwire.harness_adapters.base import Adapter
from rollwire.mcp_servers.gateway.replay import ACTIONS, ReplaySpec
from rollwire.orchestrator.scheduler import Progress, RunPlan
from rollwire.orchestrator.suite_run import StackAddresses, SuiteRunResult, open_suite, select_tasks
from rollwire.rollouts import PlannedRollout
from rollwire.rollouts.book import live_rows
from rollwire.settings import Settings
from rollwire.store import ReplayDivergence, Rollout, RolloutStatus, Run, ToolEvent, session_scope
from rollwire.store.db import open_engine


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """What a replay of a run needs from the store: its suite, harness and final rollouts."""

    run: Run
    suite: str
    harness: str
    rollouts: list[Rollout]


def recorded_run(engine: Engine, run_id: str) -> RecordedRun:
    """The run to replay: a ``NotFound`` for an unknown one, an ``InvalidRequest`` for one that cannot be replayed
    (no suite or harness on record, or no rollout that ended)."""
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r} in the store")
        rows = list(session.exec(select(Rollout).where(col(Rollout.run_id) == run_id)).all())
    config = dict(run.config or {})
    suite, harness = config.get("suite"), config.get("harness")
    if not isinstance(suite, str) or not isinstance(harness, str):
        raise InvalidRequest(f"run {run_id!r} has no suite and harness on record: only suite runs can be replayed")
    ended = [r for r in live_rows(rows) if RolloutStatus(r.status).is_final and r.task_id]
    if not ended:
        raise InvalidRequest(f"run {run_id!r} has no rollout that ended: nothing to replay")
    ended.sort(key=lambda r: (r.created_ns, r.id))
    return RecordedRun(run, suite, harness, ended)


def replay_plan(recorded: RecordedRun, spec_of: Callable[[str], ReplaySpec], run_id: str) -> list[PlannedRollout]:
    """One pending row per recorded rollout: its task, group (under the replay's run) and sample index, the task's
    meta and the servers it had, and the recording it follows (``meta.replay``)."""
    tasks = {t.id: t for t in select_tasks(recorded.suite)}
    missing = sorted({r.task_id or "" for r in recorded.rollouts} - set(tasks))
    if missing:
        raise InvalidRequest(f"run {recorded.run.id!r} has tasks its suite no longer has: {', '.join(missing)}")
    return [
        PlannedRollout(
            row.task_id or "", f"{run_id}:{row.group_id or row.task_id}", row.sample_index,
            {**tasks[row.task_id or ""].meta, **_servers(row), **spec_of(row.id).to_meta()},
        )  # fmt: skip
        for row in recorded.rollouts
    ]


def _servers(row: Rollout) -> dict[str, Any]:
    """The MCP servers the recorded rollout had beside its task's (``meta.mcp_servers``): the replay has them too."""
    return {"mcp_servers": row.meta["mcp_servers"]} if row.meta.get("mcp_servers") else {}


async def replay_run(
    stack: StackAddresses,
    *,
    recorded: str,
    on_divergence: str = "live",
    harness: str | Adapter | None = None,
    runtime: str = "local",
    concurrency: int = 4,
    deadline_s: float | None = None,
    run_id: str | None = None,
    run_name: str = "",
    policy_version: int | None = None,
    harness_options: Mapping[str, object] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    settings: Settings | None = None,
    host_env: Mapping[str, str] | None = None,
) -> SuiteRunResult:
    """Replay run ``recorded`` as a new run (``run_id``; an existing replay's id resumes it) and drive every rollout
    to a final state. ``harness`` defaults to the recorded run's; the other arguments are ``open_suite``'s."""
    if on_divergence not in ACTIONS:
        raise InvalidRequest(f"on_divergence must be one of {', '.join(ACTIONS)}", param="on_divergence")
    engine = await anyio.to_thread.run_sync(open_engine, stack.db_url)
    found = await anyio.to_thread.run_sync(recorded_run, engine, recorded)
    run_id = run_id or f"replay-{secrets.token_hex(6)}"
    if run_id == recorded:
        raise InvalidRequest("a replay is a run of its own: give it another --run-id than the recorded run's")
    planned = replay_plan(found, lambda rollout_id: ReplaySpec(rollout_id, on_divergence), run_id)  # type: ignore[arg-type]
    async with open_suite(
        stack, suite=found.suite, harness=harness or found.harness, runtime=runtime, concurrency=concurrency,
        deadline_s=deadline_s, harness_options=harness_options, on_progress=on_progress, settings=settings,
        host_env=host_env,
    ) as session:  # fmt: skip
        existing = await anyio.to_thread.run_sync(session.book.find_run, run_id)
        if existing is not None and (existing.config or {}).get("replay_of") != recorded:
            raise InvalidRequest(f"run {run_id!r} exists and is not a replay of {recorded!r}", param="run_id")
        meta = {**session.run_config, "replay_of": recorded, "on_divergence": on_divergence}
        tasks = select_tasks(found.suite, task_ids=sorted({p.task_id for p in planned}))
        plan = RunPlan(run_id, tasks, 1, session.harness, run_name, policy_version, meta, planned)
        progress = await session.scheduler.run(plan)
        rows = await anyio.to_thread.run_sync(session.book.rollouts, run_id)
    return SuiteRunResult(run_id, progress, live_rows(rows))


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """One replayed rollout beside the one it replayed."""

    rollout_id: str
    recorded_id: str
    task_id: str
    status: str
    reward: float | None
    recorded_reward: float | None
    tool_calls: int
    replayed: int
    """Tool calls answered from the recording."""
    divergence: ReplayDivergence | None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rollout_id": self.rollout_id, "recorded_id": self.recorded_id, "task_id": self.task_id,
            "status": self.status, "reward": self.reward, "recorded_reward": self.recorded_reward,
            "tool_calls": self.tool_calls, "replayed": self.replayed, "divergence": None,
        }  # fmt: skip
        if (d := self.divergence) is not None:
            out["divergence"] = {
                "tool_call": d.tool_call, "turn": d.turn, "server": d.server, "action": d.action,
                "expected": json.loads(d.expected_json) if d.expected_json else None,
                "actual": json.loads(d.actual_json),
            }  # fmt: skip
        return out


def replay_report(engine: Engine, run_id: str) -> list[ReplayOutcome]:
    """Every rollout of replay run ``run_id`` beside its recording (a ``NotFound`` for a run that is no replay)."""
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        if run is None or not (run.config or {}).get("replay_of"):
            raise NotFound(f"no replay run {run_id!r} in the store")
        rows = live_rows(list(session.exec(select(Rollout).where(col(Rollout.run_id) == run_id)).all()))
        ids = [r.id for r in rows]
        events = session.exec(select(ToolEvent).where(col(ToolEvent.rollout_id).in_(ids))).all()
        divergences = session.exec(select(ReplayDivergence).where(col(ReplayDivergence.rollout_id).in_(ids))).all()
        recorded_ids = [str((r.meta.get("replay") or {}).get("of", "")) for r in rows]
        originals = {r.id: r for r in session.exec(select(Rollout).where(col(Rollout.id).in_(recorded_ids))).all()}
    calls: dict[str, list[ToolEvent]] = {}
    for event in events:
        calls.setdefault(event.rollout_id, []).append(event)
    diverged = {d.rollout_id: d for d in divergences}
    out = []
    for row, of in sorted(zip(rows, recorded_ids), key=lambda pair: (pair[0].created_ns, pair[0].id)):
        made = calls.get(row.id, [])
        original = originals.get(of)
        out.append(
            ReplayOutcome(
                row.id, of, row.task_id or "", str(RolloutStatus(row.status).value), row.reward,
                original.reward if original is not None else None, len(made),
                sum(1 for e in made if e.replayed_from is not None), diverged.get(row.id),
            )  # fmt: skip
        )
    return out


def report_lines(outcomes: Sequence[ReplayOutcome]) -> list[str]:
    """The report as text: one line per rollout, and one more for each divergence."""
    lines = []
    for o in outcomes:
        reward = "-" if o.reward is None else f"{o.reward:g}"
        was = "-" if o.recorded_reward is None else f"{o.recorded_reward:g}"
        lines.append(
            f"{o.rollout_id}  {o.task_id}  {o.status}  reward {reward} (recorded {was})  "
            f"tool calls replayed {o.replayed}/{o.tool_calls}  replaying {o.recorded_id}"
        )
        if (d := o.divergence) is not None:
            expected = d.expected_json or "no further call on that server"
            then = "live tools from there" if d.action == "live" else "every later tool call refused"
            lines.append(f"  diverged at tool call {d.tool_call} (model turn {d.turn}, server {d.server}); {then}")
            lines.append(f"    expected {expected}")
            lines.append(f"    actual   {d.actual_json}")
    return lines


__all__ = [
    "RecordedRun", "ReplayOutcome", "recorded_run", "replay_plan", "replay_report", "replay_run", "report_lines",
]  # fmt: skip
