"""A hostile harness inside real local sandboxes (cold, and warm-pool slots recycled between rollouts).

Each attack is one the policy under training could learn: read the task's answer from the shipped suites, leave a
file or an IPC object for the next rollout in the same slot, write to the warm pool's control channel, read the
host's paths from ``/proc``, trace its parent, make nested namespaces or keys, make the host read a symlink, a
FIFO or a huge file as its final answer, kill its launcher so that a hard task is retried instead of scored, or
fill the host's disk.
Every attack must fail while an honest rollout in the same run still scores.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scheduler import Endpoints, RunPlan, Scheduler, TaskSpec, live_rows
from rollwire.orchestrator.scoring import ExitCodeScorer
from rollwire.rollouts import RolloutBook
from rollwire.settings import OrchestratorSettings
from rollwire.store.db import open_engine
from rollwire.trajectory import failure_cause
from tests.adversary.attacks import (
    ANSWERS,
    DISK_MB,
    foreign_mount_sources,
    host_mounts,
    hostile_script,
    planted_secrets,
)
from tests.real_parts import needs_sandbox

ENDPOINTS = Endpoints(proxy_url="http://127.0.0.1:48111", gateway_url="http://127.0.0.1:48112")  # relayed, never called

class HostileAdapter:
    """``python -m harness`` (the form the warm pool forks) or ``python harness.py`` (always cold)."""

    name = "hostile"

    def __init__(self, targets: dict[str, object], module: bool) -> None:
        self.targets, self.module = targets, module

    def launch(self, ctx: RolloutContext) -> Launch:
        script = hostile_script(stack=False) if ctx.task_id == "hostile" else ANSWERS[ctx.task_id]
        answer_path = "out/answer.txt" if ctx.task_id == "linked-dir-answer" else "final_answer.txt"
        files = {"harness.py": script, "targets.json": json.dumps(self.targets)}
        argv = (sys.executable, "-m", "harness") if self.module else (sys.executable, "harness.py")
        return Launch(argv=argv, env={"ROLLWIRE_SAMPLE": str(ctx.sample_index)}, files=files,
                      final_answer_path=answer_path)  # fmt: skip


@pytest.fixture()
def secrets(tmp_path: Path) -> Iterator[dict[str, object]]:
    stack_file = tmp_path / "state" / "stack.json"
    stack_file.parent.mkdir()
    stack_file.write_text(json.dumps({"operator_key": "operator-key-never-leaks"}))
    with planted_secrets(tmp_path, stack_file) as targets:
        yield targets


def _run(book: RolloutBook, settings: OrchestratorSettings, plan: RunPlan, adapter: HostileAdapter, hidden: list[Path]) -> None:
    async def go() -> None:
        async with LocalRuntime(settings, host_env=dict(os.environ), hidden=hidden) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=adapter, scorer=ExitCodeScorer(), settings=settings,
                endpoints=ENDPOINTS,
            )  # fmt: skip
            await scheduler.run(plan)

    anyio.run(go)


def _settings(tmp_path: Path, pooled: bool, **limits: Any) -> OrchestratorSettings:
    """One warm slot kept ready (pooled), so consecutive rollouts share recycled sandboxes."""
    return OrchestratorSettings(
        workspace_root=str(tmp_path / "ws"), warm_pool=pooled, warm_preload=["json"], warm_spares=1, **limits
    )


def _plan(run_id: str, tasks: list[str], group: int) -> RunPlan:
    return RunPlan(run_id=run_id, tasks=[TaskSpec(t, t) for t in tasks], group_size=group, harness="hostile")


@needs_sandbox
@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "warm-pool"])
def test_hostile_rollouts_reach_nothing_and_leave_nothing(
    store_url: str, tmp_path: Path, secrets: dict[str, object], pooled: bool
) -> None:
    """Four hostile rollouts one after another (pooled: in recycled slots); none escapes, none sees another's."""
    book = RolloutBook(open_engine(store_url))
    settings = _settings(tmp_path, pooled, concurrency=1, deadline_s=120, max_attempts=1)  # a retry would hide a failure
    _run(book, settings, _plan("hostile", ["hostile"], 4), HostileAdapter(secrets, pooled), [tmp_path / "state"])
    rows = sorted(book.rollouts("hostile"), key=lambda row: row.sample_index)
    assert [row.status for row in rows] == ["finished"] * 4, [(row.error, row.log_tail) for row in rows]
    reports = [json.loads(row.final_answer or "{}") for row in rows]
    slots = [report["where"] for report in reports]
    assert not pooled or len(set(slots)) < len(slots), slots  # some slot served two rollouts: recycling was tested
    escaped = [",".join(sorted(report["escaped"])) for report in reports]
    assert escaped == [""] * 4, escaped
    assert [report["seen"] for report in reports] == [{}] * 4, reports
    for row, report in zip(rows, reports, strict=True):  # /proc names no host path the sandbox does not show
        own = [str(Path(report["where"]).parent), str(tmp_path / "ws" / f"rollwire-{row.id}")]
        assert foreign_mount_sources(report["mounts"], own, host_mounts()) == [], report["mounts"]
        assert foreign_mount_sources(report["mounts"], [], host_mounts()), "the probe read no mount of its own (/tmp)"
    attempts = [report["attempts"] for report in reports]
    assert min(attempts) >= 40, attempts  # the probe ran its attacks (cold: 44 a rollout; pooled, 58 with the server)
    print(f"hostile {'warm-pool' if pooled else 'cold'}: {sum(attempts)} attempts in 4 rollouts, 0 succeeded")


@needs_sandbox
@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "warm-pool"])
def test_answers_the_host_must_not_read_and_a_killed_launcher_are_the_policys_failures(
    store_url: str, tmp_path: Path, secrets: dict[str, object], pooled: bool
) -> None:
    book = RolloutBook(open_engine(store_url))
    settings = _settings(tmp_path, pooled, concurrency=2, deadline_s=60, max_attempts=3, max_disk_mb=DISK_MB)
    tasks = list(ANSWERS)
    _run(book, settings, _plan("answers", tasks, 1), HostileAdapter(secrets, pooled), [tmp_path / "state"])
    rows = book.rollouts("answers")
    assert len(rows) == len(tasks) == len(live_rows(rows)), [(r.task_id, r.error) for r in rows]  # nothing retried
    by_task = {row.task_id: row for row in rows}
    honest = by_task.pop("honest")
    assert honest.status == "finished" and honest.final_answer == "42", (honest.error, honest.log_tail)
    past_limit = by_task.pop("file-past-limit")  # the write failed; the rollout itself went on
    assert past_limit.final_answer == "EFBIG", (past_limit.status, past_limit.final_answer, past_limit.log_tail)
    for task, row in by_task.items():
        assert row.status == "failed" and failure_cause(row.status, row.error) == "policy", (task, row.error)
        assert "operator-key-never-leaks" not in (row.final_answer or "") + (row.error or "")
    assert "symbolic link" in (by_task["symlink-answer"].error or "")
    assert "FIFO" in (by_task["fifo-answer"].error or "")
    assert "larger than" in (by_task["huge-answer"].error or "")
    assert "symbolic link" in (by_task["linked-dir-answer"].error or "")
    assert f"used more than {DISK_MB} MiB of disk" in (by_task["fill-disk"].error or "")

