"""The Kubernetes warm pool against the emulated API: rollouts claim ready pods (their Secret first: the fake
kubelet fails a pod claimed without it), a harness failure in a claimed pod is recorded like a cold one, an
image whose pool pods never run still gets its rollouts started cold, nothing is left behind; and the claim's
``launch.sh`` really runs a launch (files, env with awkward values, exit status, answer) under ``sh``."""

from __future__ import annotations

import shutil
import subprocess

import anyio
import pytest

from rollwire.errors import UpstreamError
from rollwire.harness_adapters.base import Launch
from rollwire.orchestrator.runtimes.base import RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import WORKSPACE
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from rollwire.orchestrator.runtimes.kubernetes.warm_pod import ANSWER, CLAIM_MOUNT, build_claim, launch_script
from tests.orchestrator.fake_cluster import fake_cluster, live_objects
from tests.orchestrator.runs import ImageAdapter, k8s_settings, orchestrator_settings, plan, run_with, statuses


async def _run(book, run_id: str, image: str, rollouts: int, pool: int, prewarm: bool = True):
    async with fake_cluster() as (api, url, kubelet):
        settings = k8s_settings(warm_pool=pool)
        with anyio.fail_after(60):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                if prewarm:
                    await runtime.prewarm(run_id, image, 30.0)
                    assert len(kubelet.running) == 0 and len(kubelet.live) == pool  # ready, waiting for a claim
                progress = await run_with(
                    runtime, book, plan(run_id, 1, rollouts), orchestrator_settings(concurrency=pool), ImageAdapter(image)
                )
        assert live_objects(api, "pods") == [] and live_objects(api, "secrets") == []  # claimed, idle and cold
        return book.rollouts(run_id), progress, kubelet


@pytest.mark.asyncio
async def test_rollouts_claim_ready_pods(book) -> None:
    rows, progress, kubelet = await _run(book, "run-warm", "img/ok", rollouts=12, pool=4)
    assert statuses(rows) == ["finished"] * 12 and progress.mean_reward == 1.0
    assert all(row.final_answer == "42" and row.exit_code == 0 for row in rows)
    refs = [str(row.meta["runtime_ref"]) for row in rows]
    assert all(ref.startswith("rw-warm-") for ref in refs), refs  # each pool pod was replaced before it was needed
    assert len(set(refs)) == 12 and set(refs) <= set(kubelet.started)  # one pod per rollout, never reused


@pytest.mark.asyncio
async def test_a_failing_harness_in_a_claimed_pod_is_recorded(book) -> None:
    rows, _progress, _kubelet = await _run(book, "run-warm-fail", "img/fail", rollouts=2, pool=2)
    assert [(row.status, row.exit_code) for row in rows] == [("failed", 3), ("failed", 3)]  # as a cold pod's
    assert all("exited with status 3" in (row.error or "") for row in rows)
    assert all(str(row.meta["runtime_ref"]).startswith("rw-warm-") for row in rows)


@pytest.mark.asyncio
async def test_pool_pods_that_never_run_leave_rollouts_to_cold_pods(book) -> None:
    rows, _progress, _kubelet = await _run(book, "run-warm-pull", "img/missing", rollouts=2, pool=2, prewarm=False)
    assert all(row.status == "failed" and "image pull failed" in (row.error or "") for row in rows)
    assert all(not str(row.meta["runtime_ref"]).startswith("rw-warm-") for row in rows)


@pytest.mark.asyncio
async def test_prewarm_says_why_when_pool_pods_cannot_start() -> None:
    async with fake_cluster() as (api, url, _kubelet):
        settings = k8s_settings(warm_pool=2)
        with anyio.fail_after(30):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                with pytest.raises(UpstreamError, match="img/missing.*ErrImagePull"):
                    await runtime.prewarm("run-x", "img/missing", 30.0)
        assert live_objects(api, "pods") == []


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX sh")
def test_launch_script_runs_the_launch(tmp_path) -> None:
    workspace, claim = tmp_path / "ws", tmp_path / "claim"
    workspace.mkdir()
    claim.mkdir()
    launch = Launch(
        argv=("sh", "-c", 'printf "%s|%s" "$KEY" "$(cat cfg/a.toml)" > out.txt; exit 5', "arg with 'quote'"),
        env={"KEY": "it's $HOME; `x`"}, files={"cfg/a.toml": "x = 1"}, final_answer_path="out.txt",
    )  # fmt: skip
    job = RolloutJob("run", "ro-1", launch, 10.0)
    owner = {"metadata": {"name": "run-cm", "uid": "u"}}
    secret = build_claim(job, "rw-warm-x", "ns", owner)
    for key, value in secret["stringData"].items():
        (claim / key).write_text(value)
    assert secret["stringData"]["launch.sh"] == launch_script(job)
    script = (claim / "launch.sh").read_text().replace(CLAIM_MOUNT, str(claim)).replace(WORKSPACE, str(workspace))
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 5, result.stderr
    assert (workspace / "out.txt").read_text() == "it's $HOME; `x`|x = 1"
    assert (workspace / ANSWER).read_text() == (workspace / "out.txt").read_text()  # the termination message
