"""A replay runs on the Kubernetes runtime as on the local one: one pod per recorded rollout, each row carrying the
recording its tool calls are answered from (``meta.replay``, read by the gateway wherever the pod runs). The
gateway's side of a replay is tested with real harnesses in tests/harness_adapters/test_mcp_replay.py."""

from __future__ import annotations

import pytest

from rollwire.mcp_servers.gateway.replay import ReplaySpec
from rollwire.orchestrator.replay_run import recorded_run, replay_plan
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from rollwire.orchestrator.scheduler import RunPlan, TaskSpec
from rollwire.rollouts import PlannedRollout
from rollwire.store import RolloutStatus
from tests.orchestrator.fake_cluster import creates, fake_cluster
from tests.orchestrator.runs import ImageAdapter, k8s_settings, orchestrator_settings, run_with


@pytest.mark.asyncio
async def test_a_replay_runs_one_pod_per_recorded_rollout(book) -> None:
    book.ensure_run("recorded", "recorded", {"suite": "tiny", "harness": "image"})
    planned = [
        PlannedRollout(task, f"recorded:{task}", i, {"suite": "tiny"})
        for task in ("write-cat", "write-dog")
        for i in range(2)
    ]
    for rollout_id in book.plan("recorded", planned):
        for status in (RolloutStatus.STARTING, RolloutStatus.RUNNING, RolloutStatus.FINISHED):
            book.set_status(rollout_id, status, reward=1.0)
    found = recorded_run(book._engine, "recorded")  # noqa: SLF001 - the store the book writes
    rows = replay_plan(found, lambda of: ReplaySpec(of, "stop"), "replayed")
    tasks = [TaskSpec(task, f"prompt {task}", {"suite": "tiny"}) for task in ("write-cat", "write-dog")]
    settings = k8s_settings()
    async with fake_cluster() as (api, url, _kubelet):
        async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
            plan = RunPlan("replayed", tasks, 1, "image", config={"replay_of": "recorded"}, rollouts=rows)
            progress = await run_with(runtime, book, plan, orchestrator_settings(), ImageAdapter())
    replayed = book.rollouts("replayed")
    assert progress.finished == 4 and [r.status for r in replayed] == ["finished"] * 4
    assert len(creates(api, "pods")) == 4
    assert sorted(r.meta["replay"]["of"] for r in replayed) == sorted(r.id for r in found.rollouts)
    assert {r.meta["replay"]["on_divergence"] for r in replayed} == {"stop"}
    assert sorted((r.task_id, r.sample_index) for r in replayed) == sorted(
        (r.task_id, r.sample_index) for r in found.rollouts
    )


def test_a_replayed_rollout_keeps_the_servers_its_recording_had(book) -> None:
    book.ensure_run("with-extra", "with-extra", {"suite": "tiny", "harness": "image"})
    (rollout_id,) = book.plan(
        "with-extra", [PlannedRollout("write-cat", "g", 3, {"suite": "tiny", "mcp_servers": ["notes"]})]
    )
    for status in (RolloutStatus.STARTING, RolloutStatus.RUNNING, RolloutStatus.FAILED):
        book.set_status(rollout_id, status)
    (planned,) = replay_plan(recorded_run(book._engine, "with-extra"), lambda of: ReplaySpec(of), "again")  # noqa: SLF001
    assert (planned.task_id, planned.group_id, planned.sample_index) == ("write-cat", "again:g", 3)
    assert planned.meta == {
        "suite": "tiny",
        "mcp_servers": ["notes"],
        "replay": {"of": rollout_id, "on_divergence": "live"},
    }
