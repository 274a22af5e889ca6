"""An RL run's figures from its store alone: what ``rollwire report`` draws and the trace viewer's run page shows.

Train reward per policy version comes from the train groups (``meta.purpose = train``) by the version they were
drawn at; held-out pass@k per version from the evaluation groups (``meta.purpose = eval``, not discarded) by the
version they sampled; the curriculum's draws from each train group's ``meta.draw``; the faults the run met from
every attempt the platform failed (``infrastructure`` errors, retried rows included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollwire.errors import NotFound
from rollwire.pass_rates import suite_pass_rates
from rollwire.rollouts import RolloutBook
from rollwire.rollouts.book import live_rows
from rollwire.store.schema import Rollout, RolloutStatus
from rollwire.trajectory import INFRASTRUCTURE, failure_cause


def reward_of(row: Rollout) -> float:
    """A rollout that did not finish scores 0, as every mean in rollwire counts it."""
    return float(row.reward or 0.0) if row.status == RolloutStatus.FINISHED else 0.0


@dataclass(slots=True)
class Fault:
    """Attempts the platform failed for one reason: how many, how many were retried, and when it was first met."""

    attempts: int = 0
    retried: int = 0
    first_ns: int = 0


def _fault_reason(error: str) -> str:
    """``"infrastructure (no retry left): X"`` and ``"infrastructure: X"`` are the one reason X."""
    return error.removeprefix(INFRASTRUCTURE).lstrip().removeprefix("(no retry left)").lstrip(" :")


@dataclass(slots=True)
class RunFigures:
    run_id: str
    suite: str
    harness: str
    train_by_version: dict[int, list[float]] = field(default_factory=dict)
    evals: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    """version -> held-out task -> rewards."""
    train_by_task: dict[str, list[float]] = field(default_factory=dict)
    draws: list[dict[str, Any]] = field(default_factory=list)
    faults: dict[str, Fault] = field(default_factory=dict)
    """reason -> the attempts the platform failed for it (the scheduler's own classing, never the harness's)."""

    def eval_rates(self) -> dict[int, dict[str, float]]:
        return {v: suite_pass_rates(tasks) for v, tasks in sorted(self.evals.items())}


def figures(book: RolloutBook, run_id: str) -> RunFigures:
    run = book.find_run(run_id)
    if run is None:
        raise NotFound(f"the store has no run {run_id!r}")
    config = dict(run.config or {})
    out = RunFigures(run_id, str(config.get("suite", "")), str(config.get("harness", "")))
    draws: dict[str, dict[str, Any]] = {}
    rows = book.rollouts(run_id)
    retried = {row.meta.get("retry_of") for row in rows}
    for row in rows:
        if failure_cause(row.status, row.error) == INFRASTRUCTURE:
            fault = out.faults.setdefault(_fault_reason(row.error or ""), Fault(first_ns=row.finished_ns or 0))
            fault.attempts += 1
            fault.retried += row.id in retried
            fault.first_ns = min(fault.first_ns, row.finished_ns or fault.first_ns)
    for row in live_rows(rows):
        if row.status == RolloutStatus.CANCELLED:
            continue  # ended by the run, not by the policy
        meta = row.meta or {}
        purpose = meta.get("purpose")
        if purpose == "train":
            version = int(meta.get("drawn_at_version", 0))
            out.train_by_version.setdefault(version, []).append(reward_of(row))
            out.train_by_task.setdefault(row.task_id or "", []).append(reward_of(row))
            if "draw" in meta and row.group_id:
                draws[row.group_id] = dict(meta["draw"])
        elif purpose == "eval" and "eval_discarded" not in meta:  # one with tokens of another version is no result
            version = int(meta.get("policy_version", 0))
            out.evals.setdefault(version, {}).setdefault(row.task_id or "", []).append(reward_of(row))
    out.draws = sorted(draws.values(), key=lambda d: int(d["index"]))
    return out


def harness_table(book: RolloutBook, runs: Sequence[str], suite: str) -> list[tuple[str, str, int, dict[str, float]]]:
    """(harness, run, version, pass rates) of every run of ``suite`` with an evaluation, at its newest one."""
    rows = []
    for run_id in runs:
        found = figures(book, run_id)
        if found.suite != suite or not found.evals:
            continue
        version = max(found.evals)
        rows.append((found.harness, run_id, version, suite_pass_rates(found.evals[version])))
    return sorted(rows)



__all__ = ["Fault", "RunFigures", "figures", "harness_table", "reward_of"]
