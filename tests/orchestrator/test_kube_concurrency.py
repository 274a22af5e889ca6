"""50 rollouts at concurrency 8 against the emulated API: all finish, at most 8 pods at once, every pod deleted."""

from __future__ import annotations

import anyio
import pytest

from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import run_configmap_name
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from tests.orchestrator.fake_cluster import creates, fake_cluster, live_objects
from tests.orchestrator.runs import ImageAdapter, k8s_settings, orchestrator_settings, plan, run_with, statuses


@pytest.mark.asyncio
async def test_fifty_rollouts_at_concurrency_eight(book) -> None:
    async with fake_cluster() as (api, url, kubelet):
        settings = k8s_settings()
        with anyio.fail_after(60):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                progress = await run_with(
                    runtime, book, plan("run-c", tasks=10, group=5), orchestrator_settings(concurrency=8), ImageAdapter()
                )
        rows = book.rollouts("run-c")
        assert statuses(rows) == ["finished"] * 50
        assert progress.finished == 50 and progress.mean_reward == 1.0
        assert all(row.final_answer == "42" and row.exit_code == 0 for row in rows)
        assert all("last line of rw-" in (row.log_tail or "") for row in rows)
        assert sorted(row.finished_seq for row in rows) == list(range(1, 51))
        assert kubelet.peak == 8, kubelet.peak  # the limit was reached, never passed
        assert len(kubelet.seen) == 50 and set(kubelet.seen.values()) == {1}
        assert set(creates(api, "pods").values()) == {1}
        assert live_objects(api, "pods") == [] and live_objects(api, "secrets") == []
        owner = next(obj for (res, _ns, name), obj in api.objects.items() if name == run_configmap_name("run-c"))
        assert api.owners["pods"] == api.owners["secrets"] == {owner["metadata"]["uid"]}
