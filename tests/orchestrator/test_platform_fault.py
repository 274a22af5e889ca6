"""A part of the stack that is down when a rollout ends makes that rollout the platform's failure, whatever its
harness did: the scheduler asks the stack (``platform_fault``), not the harness. The same harness exit with the
stack up is the policy's."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scheduler import Endpoints, Scheduler
from rollwire.orchestrator.scoring import ExitCodeScorer
from rollwire.rollouts import RolloutBook
from rollwire.store.db import open_engine
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
