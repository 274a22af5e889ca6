"""An orchestrator stopped mid-run resumes from the store: running pods are re-attached, none is created twice."""

from __future__ import annotations

import anyio
import pytest

from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from rollwire.orchestrator.scheduler import Progress
from tests.orchestrator.fake_cluster import creates, fake_cluster, live_objects
from tests.orchestrator.runs import ImageAdapter, k8s_settings, orchestrator_settings, plan, run_with


@pytest.mark.asyncio
async def test_restart_mid_run_resumes_without_duplicate_pods(book) -> None:
    run = plan("run-resume", tasks=3, group=4)
    adapter = ImageAdapter("img/hold", images={"t0": "img/ok"})  # t0 finishes at once, the rest hold
    settings = k8s_settings()
    orch = orchestrator_settings(concurrency=4)
    held = anyio.Event()

    def counted(progress: Progress) -> None:
        """The first wave (t0) finished and the next four are past STARTING -> RUNNING in the store: a pod the
        kubelet runs is not yet a row the orchestrator has moved, so the kubelet alone is the wrong signal."""
        if progress.finished >= 4 and progress.running >= 4:
            held.set()

    async with fake_cluster() as (api, url, kubelet):
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                async def first() -> None:
                    async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                        await run_with(runtime, book, run, orch, adapter, on_progress=counted)

                group.start_soon(first)
                await kubelet.wait_for(lambda: len(kubelet.running) >= 4 and len(kubelet.live) == 4 and len(kubelet.seen) > 4)
                await held.wait()
                group.cancel_scope.cancel()  # the orchestrator dies; its pods keep running
            before = {row.id: row.status for row in book.rollouts("run-resume")}
            assert "running" in before.values() and "pending" in before.values()
            kubelet.release.set()
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                progress = await run_with(runtime, book, run, orch, adapter)
        rows = book.rollouts("run-resume")
        assert [row.status for row in rows] == ["finished"] * 12 and len(rows) == 12  # no retry rows
        assert progress.finished == 12
        assert set(creates(api, "pods").values()) == {1} and len(creates(api, "pods")) == 12
        assert set(kubelet.seen.values()) == {1}
        assert live_objects(api, "pods") == []
