"""The same lifecycle against a real cluster (kubeconfig present): rollouts finish, image-pull failure, deadline, cleanup."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from rollwire.settings import KubernetesSettings
from tests.orchestrator.real_cluster import CLUSTER_MARKS, KUBECONFIG, NAMESPACE
from tests.orchestrator.runs import orchestrator_settings, plan, run_with

pytestmark = CLUSTER_MARKS


@dataclass
class BusyboxAdapter:
    image: str = "busybox:1.36"
    script: str = "echo working; echo -n 42 > final_answer.txt"
    name: str = "busybox"

    def launch(self, ctx: RolloutContext) -> Launch:
        return Launch(argv=("sh", "-c", self.script), env={"OPENAI_BASE_URL": ctx.base_url}, image=self.image)


async def _run(book, run_id: str, adapter: BusyboxAdapter, tasks: int, group: int, **orch: object):
    settings = KubernetesSettings(namespace=NAMESPACE, kubeconfig=KUBECONFIG, service_account="default")
    with anyio.fail_after(600):
        async with KubernetesRuntime(settings, api_client_from_settings(settings)) as runtime:
            progress = await run_with(runtime, book, plan(run_id, tasks, group), orchestrator_settings(**orch), adapter)
            await runtime.delete_run(run_id)
    return book.rollouts(run_id), progress


@pytest.mark.asyncio
async def test_real_cluster_rollouts_finish(book) -> None:
    rows, progress = await _run(book, "rc-ok", BusyboxAdapter(), tasks=4, group=2, concurrency=4)
    assert [row.status for row in rows] == ["finished"] * 8
    assert all(row.final_answer == "42" and "working" in (row.log_tail or "") for row in rows)


@pytest.mark.asyncio
async def test_real_cluster_image_pull_failure_and_deadline(book) -> None:
    rows, _ = await _run(book, "rc-pull", BusyboxAdapter(image="rollwire.invalid/missing:0"), 1, 1)
    assert rows[0].status == "failed" and "image pull failed" in (rows[0].error or "")
    rows, _ = await _run(book, "rc-dl", BusyboxAdapter(script="sleep 600"), 1, 1, deadline_s=10.0)
    assert rows[0].status == "timed_out"
