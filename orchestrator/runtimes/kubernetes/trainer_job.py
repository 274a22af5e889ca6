"""The trainer of a ``rollwire rl`` run on Kubernetes: one batch Job beside the rollout pods.

The Job runs ``rollwire train`` under torchrun (DDP, or FSDP2 with ``strategy="fsdp"``) with the RL recipe
the sampler runs by: the run's train rollouts only, dynamic sampling by the same zero-variance rule, ``epochs``
passes per update, until the target version. It reads the run's trajectory stream from the proxy's admin
listener, pushes weights to the engine and publishes each version; the sampler follows that published version
to keep sampling within ``max_lag`` versions of training. Its checkpoints (cursor, buffer, consumed rollouts)
live on a claimed volume, so a Job that restarts, or a rerun that finds it gone, resumes where the last
checkpoint left off. The pod spec starts from the stack's own trainer Job (``k8s/base/trainer-job.yaml``):
the same image, security context, GPU placement and admin wiring.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from rollwire.errors import Conflict, NotFound
from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi
from rollwire.settings import KubernetesSettings

VOLUME = "/var/lib/rollwire"
"""Where the Job's claimed volume is mounted: the warm model it starts from and the run's checkpoints."""
RUN_LABEL = "rollwire.dev/run"


@dataclass(frozen=True, slots=True)
class TrainerRecipe:
    """What the Job's ``rollwire train`` is told: the run, the model, and the RL loop's recipe."""

    run_id: str
    model: str
    """A model name (``tiny``, ``smollm2-135m``) or a folder on the claimed volume (``/var/lib/rollwire/...``)."""
    until_version: int
    group_size: int
    groups_per_step: int
    epochs: int
    max_lag: int
    lr: float
    seed: int
    dynamic_sampling: bool = True
    """Must hold for a followed trainer: the sampler counts the groups it trains by the same rule."""
    failure_reward: float | None = 0.0
    strategy: str = "ddp"
    gpus: int = 1
    """Processes (and GPUs) of the one trainer pod: torchrun's ``--nproc-per-node``."""
    output_dir: str = ""
    """Checkpoints and metrics; empty: the run's folder on the Job's claimed volume."""

    def train_args(self) -> list[str]:
        """``rollwire train``'s arguments: the RL recipe, with TIS on when sampling may run ahead (K >= 1). No
        ``--max-policy-lag``: a slow group may lag more than K and still trains (the in-process trainer's rule),
        and the sampler counts every group with a reward spread as trained."""
        args = [
            "train", "--run-id", self.run_id, "--algo", "grpo", "--model", self.model,
            "--output-dir", self.output_dir or f"{VOLUME}/rl/{self.run_id}/checkpoints", "--purpose", "train",
            "--until-version", str(self.until_version), "--group-size", str(self.group_size),
            "--groups-per-step", str(self.groups_per_step), "--epochs", str(self.epochs),
            "--lr", repr(self.lr), "--seed", str(self.seed),
            "--strategy", self.strategy,
        ]  # fmt: skip
        if self.failure_reward is not None:
            args += ["--failure-reward", repr(self.failure_reward)]
        if self.dynamic_sampling:
            args.append("--dynamic-sampling")
        if self.max_lag >= 1:
            args += ["--is-correction", "tis"]
        return args

    def command(self) -> list[str]:
        """torchrun on one node (``--standalone``: its own rendezvous), the CLI as a module."""
        return ["torchrun", "--standalone", f"--nproc-per-node={self.gpus}", "-m", "rollwire.app.cli", *self.train_args()]


def job_name(run_id: str) -> str:
    """A DNS-1123 name per run, stable across reruns (a rerun finds its Job by it)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")[:30].strip("-") or "run"
    return f"rollwire-trainer-{slug}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def build_trainer_job(
    recipe: TrainerRecipe, settings: KubernetesSettings, template: dict[str, Any], owner: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run's trainer Job from the stack's trainer Job ``template``: its command, one GPU per process, the
    claimed volume at ``VOLUME``, and (``owner``: the run's ConfigMap) deleted with the run."""
    job = copy.deepcopy(template)
    meta = job["metadata"]
    meta["name"], meta["namespace"] = job_name(recipe.run_id), settings.namespace
    labels = {"app.kubernetes.io/name": "trainer", RUN_LABEL: _label(recipe.run_id)}
    meta["labels"] = {**meta.get("labels", {}), **labels}
    if owner is not None:
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
        meta["ownerReferences"] = [ref]
    pod = job["spec"]["template"]
    pod["metadata"]["labels"] = {**pod["metadata"].get("labels", {}), **labels}
    spec = pod["spec"]
    container = next((c for c in spec["containers"] if c["name"] == "trainer"), None)
    if container is None:
        raise NotFound("the trainer Job template has no container named trainer")
    container["command"] = recipe.command()
    resources = container.setdefault("resources", {})
    for key in ("limits", "requests"):
        if "nvidia.com/gpu" in resources.get(key, {}):
            resources[key]["nvidia.com/gpu"] = str(recipe.gpus)
    container["env"] = [*container.get("env", []), {"name": "HOME", "value": VOLUME}]
    container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": "state", "mountPath": VOLUME}]
    claim = {"persistentVolumeClaim": {"claimName": settings.trainer_volume_claim}}
    spec["volumes"] = [*spec.get("volumes", []), {"name": "state", **claim}]
    if recipe.gpus > 1:  # torchrun's processes share tensors through /dev/shm: the runtime's 64 MiB is too small
        spec["volumes"].append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}})
        container["volumeMounts"].append({"name": "shm", "mountPath": "/dev/shm"})
    return job


def _label(value: str) -> str:
    """A label value (63 characters, alphanumeric ends): the run id, shortened with its hash when it is long."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", value).strip("-_.")
    return clean if len(clean) <= 63 and clean == value else f"{clean[:50].strip('-_.')}-{hashlib.sha256(value.encode()).hexdigest()[:8]}"


def job_failure(job: dict[str, Any]) -> str | None:
    """Why the Job has failed for good (its ``Failed`` condition), or None while it runs or has succeeded."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            reason = condition.get("reason") or "Failed"
            message = condition.get("message") or ""
            return f"{reason}: {message}" if message else reason
    return None


class TrainerJob:
    """The run's trainer Job on the cluster: created once, found again by a rerun, and watched for failure."""

    def __init__(self, api: KubeApi, settings: KubernetesSettings, body: dict[str, Any]) -> None:
        self._api, self._namespace, self.body = api, settings.namespace, body
        self.name = str(body["metadata"]["name"])

    async def ensure(self) -> str:
        """Create the Job, or adopt the one a previous command of this run made; one that failed for good is
        replaced (its successor resumes from the checkpoints on the volume). Returns what was done."""
        try:
            found = await self._api.call("read_namespaced_job", self.name, self._namespace)
        except NotFound:
            try:
                await self._api.call("create_namespaced_job", self._namespace, self.body)
                return "created"
            except Conflict:  # another command of this run made it meanwhile
                found = await self._api.call("read_namespaced_job", self.name, self._namespace)
        if job_failure(found) is None:
            return "adopted"
        await self._api.call("delete_namespaced_job", self.name, self._namespace, propagation_policy="Background")
        await self._api.call("create_namespaced_job", self._namespace, self.body)
        return "replaced a failed one"

    async def failure(self) -> str | None:
        """One line naming the Job and why it failed for good, or None while it runs (or has succeeded)."""
        try:
            job = await self._api.call("read_namespaced_job", self.name, self._namespace)
        except NotFound:
            return f"the trainer Job {self.name} was deleted"
        reason = job_failure(job)
        return f"the trainer Job {self.name} failed ({reason})" if reason else None


__all__ = ["RUN_LABEL", "VOLUME", "TrainerJob", "TrainerRecipe", "build_trainer_job", "job_failure", "job_name"]
