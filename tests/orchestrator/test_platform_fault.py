"""A part of the stack that is down when a rollout ends makes that rollout the platform's failure, whatever its
harness did: the scheduler asks the stack (``platform_fault``), not the harness. The same harness exit with the
stack up is the policy's."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scheduler import Endpoints, Scheduler
from rollwire.orchestrator.scoring import ExitCodeScorer
from rollwire.rollouts import RolloutBook
from rollwire.store.db import open_engine
from rollwire.store.schema import Rollout, RolloutStatus
from rollwire.trajectory import failure_cause
from tests.orchestrator.runs import ScriptAdapter, orchestrator_settings, plan
from tests.real_parts import needs_sandbox

EXIT_1 = 'print("the model call failed: connection refused"); raise SystemExit(1)'


@needs_sandbox
def test_a_rollout_ending_while_a_part_is_down_is_retried_as_infrastructure(tmp_path: Path) -> None:
    book = RolloutBook(open_engine(f"sqlite:///{tmp_path / 'store.db'}"))
    settings = orchestrator_settings(workspace_root=str(tmp_path / "ws"))
    down = ["the proxy exited with status -9"]  # down for the first settle, up after it

    def platform_fault() -> str | None:
        return down.pop() if down else None

    async def run() -> None:
        async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=ScriptAdapter(EXIT_1), scorer=ExitCodeScorer(), settings=settings,
                endpoints=Endpoints("http://127.0.0.1:9", "http://127.0.0.1:9"), platform_fault=platform_fault,
            )  # fmt: skip
            await scheduler.run(plan("platform-fault", 1, 1))

    anyio.run(run)
    first, retry = sorted(book.rollouts("platform-fault"), key=lambda row: row.attempt)
    assert failure_cause(first.status, first.error) == "infrastructure", first.error
    assert "the platform failed during the rollout: the proxy exited with status -9" in (first.error or "")
    assert first.exit_code == 1  # what the harness did is kept, and did not decide the class
    assert retry.meta.get("retry_of") == first.id
    assert failure_cause(retry.status, retry.error) == "policy" and retry.error == "harness exited with status 1"


class StopOnFinal(RolloutBook):
    """A book that stops the command (cancels its scope) the moment a row's final state is written: the stop
    lands between that write and whatever the scheduler would write next."""

    scope: anyio.CancelScope | None = None

    def _finalize(
        self, rollout_id: str, source: RolloutStatus, values: dict[str, Any], also: Callable[[], Rollout] | None = None
    ) -> bool:
        moved = super()._finalize(rollout_id, source, values, also)
        if moved and self.scope is not None:
            anyio.from_thread.run_sync(self.scope.cancel)
            self.scope = None
        return moved


@needs_sandbox
def test_a_stop_as_the_loss_is_recorded_leaves_its_retry_for_the_rerun(tmp_path: Path) -> None:
    """The command stops the moment the lost row's failure is written: the failure and its retry are one write, so
    the store never holds an infrastructure failure with no next attempt, and a rerun drives that attempt."""
    book = StopOnFinal(open_engine(f"sqlite:///{tmp_path / 'store.db'}"))
    settings = orchestrator_settings(workspace_root=str(tmp_path / "ws"))
    down = ["the proxy exited with status -9"]  # down for the first settle, up after it

    async def run(stop: bool) -> None:
        async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=ScriptAdapter(EXIT_1), scorer=ExitCodeScorer(), settings=settings,
                endpoints=Endpoints("http://127.0.0.1:9", "http://127.0.0.1:9"),
                platform_fault=lambda: down.pop() if down else None,
            )  # fmt: skip
            with anyio.CancelScope() as scope:
                book.scope = scope if stop else None
                await scheduler.run(plan("stopped-at-loss", 1, 1))
            assert scope.cancelled_caught == stop

    anyio.run(run, True)
    first, retry = sorted(book.rollouts("stopped-at-loss"), key=lambda row: row.attempt)
    assert failure_cause(first.status, first.error) == "infrastructure", first.error
    assert retry.meta.get("retry_of") == first.id and retry.status == RolloutStatus.PENDING
    anyio.run(run, False)
    rows = sorted(book.rollouts("stopped-at-loss"), key=lambda row: row.attempt)
    assert [row.id for row in rows] == [first.id, retry.id]
    assert rows[1].error == "harness exited with status 1"
