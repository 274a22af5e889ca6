"""The trainer of a ``rollwire rl`` run on Kubernetes is a batch Job beside the rollout pods: built from the stack's
own trainer Job, it runs ``rollwire train`` under torchrun with the RL recipe (parsed here by the real CLI
parser), and the sampler creates it, finds it again on a rerun, replaces it when it failed, and sees it fail,
all against kmock's API server over HTTP."""

from __future__ import annotations

import argparse
import dataclasses

import aiohttp
import anyio
import pytest

from rollwire.app.cli import train as train_cli
from rollwire.orchestrator.manifests import trainer_template
from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi, api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.trainer_job import (
    VOLUME,
    TrainerJob,
    TrainerRecipe,
    build_trainer_job,
    job_name,
)
from rollwire.settings import Settings
from tests.orchestrator.fake_cluster import NAMESPACE, creates, fake_cluster, live_objects
from tests.orchestrator.runs import k8s_settings

RECIPE = TrainerRecipe(run_id="rl-Kube_1", model=f"{VOLUME}/warm", until_version=12, group_size=8, groups_per_step=4,
                       epochs=4, max_lag=1, lr=3e-4, seed=7, strategy="fsdp", gpus=2)  # fmt: skip


def _parsed(args: list[str]) -> argparse.Namespace:
    """``rollwire train``'s own parser on the Job's arguments, as the container's CLI reads them."""
    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    assert args[0] == "train"
    return parser.parse_args(args[1:])


def test_the_job_runs_rollwire_train_under_torchrun_with_the_rl_recipe() -> None:
    settings = k8s_settings(trainer_volume_claim="rl-state")
    owner = {"metadata": {"name": "rollwire-run-x", "uid": "u-1"}}
    job = build_trainer_job(RECIPE, settings, trainer_template(settings), owner)
    assert job["kind"] == "Job" and job["metadata"]["name"] == job_name(RECIPE.run_id)
    assert job["metadata"]["namespace"] == NAMESPACE and job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    command = container["command"]
    assert command[:6] == ["torchrun", "--standalone", "--nproc-per-node=2", "-m", "rollwire.app.cli", "train"]
    cfg = train_cli.trainer_settings(_parsed(command[5:]), Settings())
    assert (cfg.run, cfg.algo, cfg.model, cfg.strategy) == ("rl-Kube_1", "grpo", f"{VOLUME}/warm", "fsdp")
    assert (cfg.purpose, cfg.until_version, cfg.epochs, cfg.dynamic_sampling) == ("train", 12, 4, True)
    assert (cfg.group_size, cfg.groups_per_step, cfg.seed) == (8, 4, 7)
    assert cfg.max_policy_lag is None  # a slow group lagging more than K still trains, as the sampler counts it
    assert cfg.is_correction == "tis" and cfg.lr == pytest.approx(3e-4) and cfg.failure_reward == 0.0
    assert cfg.output_dir == f"{VOLUME}/rl/rl-Kube_1/checkpoints"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"  # one GPU per torchrun process
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "rl-state"}} in pod["volumes"]
    assert {"name": "state", "mountPath": VOLUME} in container["volumeMounts"]
    assert any(m["mountPath"] == "/dev/shm" for m in container["volumeMounts"])  # NCCL/gloo between 2 processes
    # the stack's trainer wiring and hardening are kept: the label its NetworkPolicy (rollwire-trainer: serves
    # nothing) and the proxy's admin policy select, admin listener, operator key, non-root, read-only root
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "trainer"
    env = {e["name"]: e for e in container["env"]}
    assert env["ROLLWIRE_TRAINER__ADMIN_URL"]["value"].startswith("http://proxy")
    assert env["ROLLWIRE_PROXY__OPERATOR_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "rollwire-operator"
    assert container["securityContext"]["readOnlyRootFilesystem"] and pod["securityContext"]["runAsNonRoot"]
    lockstep = build_trainer_job(dataclasses.replace(RECIPE, max_lag=0, gpus=1), settings, trainer_template(settings))
    args = lockstep["spec"]["template"]["spec"]["containers"][0]["command"][5:]
    assert "--is-correction" not in args  # lockstep: the trainer's own "auto" rule decides
    assert not any(m["mountPath"] == "/dev/shm" for m in lockstep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"])


@pytest.mark.asyncio
async def test_the_sampler_creates_adopts_replaces_and_watches_its_trainer_job() -> None:
    settings = k8s_settings()
    body = build_trainer_job(RECIPE, settings, trainer_template(settings))
    async with fake_cluster() as (server, url, _kubelet):
        api = KubeApi(api_client_from_settings(settings, host=url), settings)
        try:
            with anyio.fail_after(30):
                job = TrainerJob(api, settings, body)
                assert await job.ensure() == "created"
                assert live_objects(server, "jobs") == [job.name]
                assert await job.failure() is None  # running: nothing to say
                assert await job.ensure() == "adopted"  # a rerun of the command finds it and creates nothing
                assert creates(server, "jobs")[job.name] == 1
                status = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                          "message": "Job has reached the specified backoff limit"}]}  # fmt: skip
                path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job.name}/status"
                async with aiohttp.ClientSession(base_url=url) as http, http.patch(path, json={"status": status}) as response:
                    assert response.status == 200, await response.text()
                said = await job.failure()
                assert said == (f"the trainer Job {job.name} failed (BackoffLimitExceeded: Job has reached the "
                                "specified backoff limit)")  # fmt: skip
                assert await job.ensure() == "replaced a failed one"
                assert creates(server, "jobs")[job.name] == 2 and await job.failure() is None
                await api.call("delete_namespaced_job", job.name, NAMESPACE)
                assert await job.failure() == f"the trainer Job {job.name} was deleted"
        finally:
            await api.aclose()

