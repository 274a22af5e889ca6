"""The orchestrator's Prometheus metrics, served over HTTP and read back with the Prometheus client's parser after a
real local run: rollouts by status and rewards match the store; running / queued gauges follow the scheduler; a
resumed run does not count again the rollouts it finds already final."""

from __future__ import annotations

import os
from collections import Counter

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollwire.metrics import MetricsServer
from rollwire.orchestrator.metrics import OrchestratorMetrics
from rollwire.orchestrator.runtimes.base import Handle, RolloutJob
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scheduler import Progress, Scheduler
from rollwire.orchestrator.scoring import ExpectedAnswerScorer
from tests.orchestrator.runs import ENDPOINTS, ScriptAdapter, orchestrator_settings, plan

HARNESS = """
import os, pathlib, sys
sample = int(os.environ["ROLLWIRE_SAMPLE"])
if sample == 2:
    sys.exit(3)
pathlib.Path("final_answer.txt").write_text(pathlib.Path("task/prompt.txt").read_text().split()[-1] if sample == 0 else "no")
"""


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.asyncio
async def test_orchestrator_metrics_match_the_store(book, tmp_path) -> None:
    settings = orchestrator_settings(concurrency=1, workspace_root=str(tmp_path / "ws"))
    scorer = ExpectedAnswerScorer({"t0": "0", "t1": "1"})
    metrics = OrchestratorMetrics()
    gauges: list[tuple[float | None, float | None, int, int]] = []

    def seen(progress: Progress) -> None:
        running = metrics.registry.get_sample_value("rollwire_orchestrator_rollouts_running")
        queued = metrics.registry.get_sample_value("rollwire_orchestrator_rollouts_queued")
        gauges.append((running, queued, progress.running, progress.planned - progress.done - progress.running))

    served = MetricsServer(metrics.registry, "127.0.0.1", 0)
    try:
        with anyio.fail_after(60):
            async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
                scrapes = []
                for _ in range(2):  # the second time resumes the finished run
                    scheduler = Scheduler(
                        book=book, runtime=runtime, adapter=ScriptAdapter(HARNESS), scorer=scorer, settings=settings,
                        endpoints=ENDPOINTS, on_progress=metrics.observe(seen),
                    )  # fmt: skip
                    await scheduler.run(plan("run-m", tasks=2, group=3))
                    scrapes.append(scrape(served.url))
                first, again = scrapes
    finally:
        served.stop()
    rows = book.rollouts("run-m")
    by_status = Counter(str(r.status) for r in rows)
    assert by_status == {"finished": 4, "failed": 2}
    for status, count in by_status.items():
        assert first[("rollwire_orchestrator_rollouts_total", (("status", status),))] == count
    assert first[("rollwire_orchestrator_rollouts_total", (("status", "timed_out"),))] == 0
    rewards = [r.reward for r in rows if r.status == "finished"]
    assert first[("rollwire_orchestrator_rollout_reward_count", ())] == len(rewards)
    assert first[("rollwire_orchestrator_rollout_reward_sum", ())] == pytest.approx(sum(rewards))
    assert first[("rollwire_orchestrator_rollouts_running", ())] == 0
    assert first[("rollwire_orchestrator_rollouts_queued", ())] == 0
    assert all(g[0] == g[2] and g[1] == g[3] for g in gauges)  # the gauges are the scheduler's counts when it reports
    assert max(g[1] or 0 for g in gauges) >= 4  # one slot: the rest waited in the queue
    assert {k: v for k, v in again.items() if "_created" not in k[0]} == {
        k: v for k, v in first.items() if "_created" not in k[0]
    }  # resumed: nothing new ran, nothing counted twice


@pytest.mark.asyncio
async def test_a_slot_is_reported_held_while_its_rollout_starts(book, tmp_path) -> None:
    """``Progress.occupied`` is what the RL loop's slot meter integrates: a rollout's start (claim, workspace,
    process) must count as busy, so the scheduler reports the slot held before the runtime starts the workload."""
    settings = orchestrator_settings(concurrency=1, workspace_root=str(tmp_path / "ws"))
    held = anyio.Event()
    reported_before_start: list[bool] = []

    class WatchedStart(LocalRuntime):
        async def start(self, job: RolloutJob) -> Handle:
            with anyio.move_on_after(10):  # a bound for the failure case only: the report comes first when it works
                await held.wait()
            reported_before_start.append(held.is_set())
            return await super().start(job)

    def seen(progress: Progress) -> None:
        if progress.occupied == 1 and progress.running == 0:
            held.set()

    with anyio.fail_after(60):
        async with WatchedStart(settings, host_env=dict(os.environ)) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=ScriptAdapter(HARNESS), scorer=ExpectedAnswerScorer({"t0": "0"}),
                settings=settings, endpoints=ENDPOINTS, on_progress=seen,
            )  # fmt: skip
            await scheduler.run(plan("run-held", tasks=1, group=1))
    assert reported_before_start == [True]
    assert [row.status for row in book.rollouts("run-held")] == ["finished"]
