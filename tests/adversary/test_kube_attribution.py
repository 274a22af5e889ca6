"""A hostile rollout on Kubernetes tries to turn its own failure into an unscored infrastructure retry, and to reach
the stack's secrets.

Filling its disk (the workspace, /tmp, its logs) must end as the rollout's own failure, trained with the failure
reward, as must running out of memory; a node-pressure eviction caused by others stays infrastructure and is
retried. The verdict comes from what the kubelet writes (pod reason, message, conditions, a container's terminated
reason), never from the harness's termination message, which a rollout can write anything into. The fake kubelet
here evicts the way the real one does (``pkg/kubelet/eviction``): it checks a filled emptyDir against that
volume's ``sizeLimit``, then the pod's usage against its containers' ``ephemeral-storage`` limits, and only a pod
with neither limit fills the node. The rendered gateway and env-server pods carry no operator key; rollout pods
reference only their own Secret.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import yaml
from kubernetes import client
from kubernetes.utils import parse_quantity

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.harness_adapters.registry import BUILTIN
from rollwire.orchestrator.manifests import example_rollout, render
from rollwire.orchestrator.runtimes.base import EndKind, RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import (
    EVICTED_EXIT_CODE,
    HARNESS,
    IMAGE_SUITES,
    build_pod,
    pod_verdict,
    rollout_pod,
    run_configmap,
)
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from rollwire.orchestrator.runtimes.kubernetes.warm_pod import build_warm_pod
from rollwire.orchestrator.scheduler import Endpoints, Progress, RunPlan, Scheduler, TaskSpec
from rollwire.orchestrator.scoring import ExitCodeScorer
from rollwire.rollouts import RolloutBook
from rollwire.settings import KubernetesSettings, OrchestratorSettings
from rollwire.store.db import open_engine
from rollwire.trajectory import failure_cause
from tests.orchestrator import fake_cluster as fc

ENDPOINTS = Endpoints(proxy_url="http://proxy.test:8000", gateway_url="http://gateway.test:8001")
FILL = parse_quantity("64Gi")
"""What a hostile harness writes: past every limit a rollout pod has, and enough to fill a node without them."""
NODE_PRESSURE = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "
STACK_SECRETS = ("rollwire-operator", "rollwire-store", "rollwire-env")


def _settings(**overrides: Any) -> KubernetesSettings:
    return KubernetesSettings(namespace=fc.NAMESPACE, api_backoff_s=0.01, **overrides)


def _owner() -> dict[str, Any]:
    owner = run_configmap("run-1", "rl")
    owner["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
    return owner


def _job(image: str = "img/ok") -> RolloutJob:
    launch = Launch(argv=("harness",), env={"OPENAI_API_KEY": "tok"}, files={"task.txt": "x"}, image=image)
    return RolloutJob("run-1", "ro-1", launch, 60.0)


# -- the pod spec: every byte a rollout may write is bounded, and the scheduler reserves it ----------------------


def _pods() -> Iterator[tuple[str, dict[str, Any]]]:
    settings = KubernetesSettings(namespace="rl")
    yield "cold", build_pod(_job(), settings, _owner())
    yield "warm", build_warm_pod("rw-warm-1", "img/ok", settings, _owner(), 60.0)
    for harness in BUILTIN:
        yield harness, example_rollout(harness, settings, "http://proxy.rl:8000", "http://gateway.rl:8001")[-1]


@pytest.mark.parametrize(("which", "pod"), list(_pods()), ids=lambda value: value if isinstance(value, str) else None)
def test_rollout_pods_bound_every_emptydir_and_their_ephemeral_storage(which: str, pod: dict[str, Any]) -> None:
    client.V1Pod.model_validate(pod)
    spec = pod["spec"]
    empty = {v["name"]: v["emptyDir"] for v in spec["volumes"] if "emptyDir" in v}
    defaults = {"workspace": {"sizeLimit": "2Gi"}, "tmp": {"sizeLimit": "1Gi"}, "suites-cover": {"sizeLimit": "1Mi"}}
    assert empty == defaults, which
    mounts = spec["containers"][0]["volumeMounts"]
    covered = {m["mountPath"] for m in mounts if m["name"] == "suites-cover" and m["readOnly"]}
    assert covered == set(IMAGE_SUITES), which  # the task suites the stack image ships: never visible to a rollout
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        resources = container["resources"]
        assert resources["requests"] == resources["limits"], (which, container["name"])  # reserved = allowed
        assert resources["limits"]["ephemeral-storage"] == "4Gi", (which, container["name"])
    total = sum(parse_quantity(size["sizeLimit"]) for size in empty.values())
    assert total < parse_quantity(spec["containers"][0]["resources"]["limits"]["ephemeral-storage"])


def test_storage_limits_come_from_the_settings_and_zero_is_refused() -> None:
    settings = KubernetesSettings(namespace="rl", workspace_size="8Gi", tmp_size="512Mi", ephemeral_storage="10Gi")
    pod = build_pod(_job(), settings, _owner())
    assert [v["emptyDir"]["sizeLimit"] for v in pod["spec"]["volumes"] if "emptyDir" in v] == ["8Gi", "512Mi", "1Mi"]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["ephemeral-storage"] == "10Gi"
    for bad in ("0", "", "2GB", "-1Gi"):  # the kubelet reads a zero sizeLimit as none
        with pytest.raises(ValueError):
            KubernetesSettings(workspace_size=bad)


def test_a_rollout_pod_with_an_unbounded_emptydir_is_refused() -> None:
    with pytest.raises(ValueError, match="without a sizeLimit: scratch"):
        rollout_pod(
            KubernetesSettings(), _owner(), {"name": "rw-x"}, image="img/ok", command=["true"], env=[],
            volumes=[{"name": "scratch", "emptyDir": {}}], answer_path="a", lifetime_s=60,
        )  # fmt: skip


# -- the verdict: whose failure each ending is, from what the platform wrote ---------------------------------------


def _ended(phase: str = "Failed", reason: str = "", message: str = "", **extra: Any) -> dict[str, Any]:
    """A finished pod's status; ``terminated`` (the harness container's) and ``conditions`` / ``deleted`` as given."""
    status: dict[str, Any] = {"phase": phase, "reason": reason, "message": message}
    if "terminated" in extra:
        status["containerStatuses"] = [{"name": HARNESS, "state": {"terminated": extra["terminated"]}}]
    if "conditions" in extra:
        status["conditions"] = extra["conditions"]
    metadata: dict[str, Any] = {"name": "rw-1"}
    if extra.get("deleted"):
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": metadata, "status": status}


def _evicted(message: str, **extra: Any) -> dict[str, Any]:
    return _ended(reason="Evicted", message=message, **extra)


def _exited(code: int, reason: str = "Error", message: str | None = None) -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": code, "reason": reason}
    if message is not None:
        terminated["message"] = message
    return _ended(terminated=terminated)


KILLED = {"exitCode": 137, "reason": "Error"}
UNKNOWN = {
    "exitCode": 137, "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was terminated",
}  # fmt: skip
BY_KUBELET = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": "x"}]
PREEMPTED = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
EMPTYDIR_FULL = 'Usage of EmptyDir volume "workspace" exceeds the limit "2Gi". '
CONTAINER_FULL = 'Container harness exceeded its local ephemeral storage limit "4Gi". '
POD_FULL = "Pod ephemeral local storage usage exceeds the total limit of containers 4Gi. "
DISK_LOW = "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 1Gi. "

VERDICTS = {
    # the pod's own disk or memory, in the kubelet's words: the rollout's failure
    "emptydir-limit": (_evicted(EMPTYDIR_FULL, terminated=UNKNOWN), EndKind.EXITED),
    "container-limit": (_evicted(CONTAINER_FULL, terminated=KILLED), EndKind.EXITED),
    "pod-limit": (_evicted(POD_FULL), EndKind.EXITED),
    "disk-pressure-over-own-request": (
        _evicted(DISK_LOW + "Container harness was using 9Gi, request is 4Gi, has larger consumption of "
                 "ephemeral-storage. ", conditions=BY_KUBELET),
        EndKind.EXITED,
    ),
    "disk-pressure-over-own-request-older-kubelet": (
        _evicted("The node was low on resource: ephemeral-storage. Container harness was using 9Gi, which exceeds "
                 "its request of 4Gi. "),
        EndKind.EXITED,
    ),
    "oom-killed": (_exited(137, "OOMKilled"), EndKind.EXITED),
    "killed-its-own-init": (_exited(137), EndKind.EXITED),
    "exit-1": (_exited(1), EndKind.EXITED),
    "deadline": (
        _ended(reason="DeadlineExceeded", message="Pod was active on the node longer than the specified deadline"),
        EndKind.TIMED_OUT,
    ),
    # what the harness writes itself (its termination message) never makes its failure the platform's
    "forged-termination-message": (_exited(137, message=NODE_PRESSURE), EndKind.EXITED),
    "own-storage-words-after-node-pressure": (
        _evicted(NODE_PRESSURE + EMPTYDIR_FULL),
        EndKind.LOST,  # not the kubelet's own-storage message: the node's pressure, as it says first
    ),
    # others' doing: infrastructure, retried
    "memory-pressure": (_evicted(NODE_PRESSURE, terminated=KILLED, conditions=BY_KUBELET), EndKind.LOST),
    "memory-pressure-over-request": (
        _evicted("The node was low on resource: memory. Container harness was using 1Gi, request is 1Gi, has larger "
                 "consumption of memory. "),
        EndKind.LOST,  # memory past the request is impossible here (request = limit): the cgroup OOM-kills first
    ),
    "disk-pressure-others": (_evicted(DISK_LOW), EndKind.LOST),
    "disk-pressure-other-container": (
        _evicted(DISK_LOW + "Container sidecar was using 9Gi, request is 0, has larger consumption of "
                 "ephemeral-storage. "),
        EndKind.LOST,
    ),
    "node-condition": (_evicted("The node had condition: [DiskPressure]. "), EndKind.LOST),
    "kubelet-preemption": (
        _ended(reason="Preempting", message="Preempted in order to admit critical pod", terminated=KILLED),
        EndKind.LOST,
    ),
    "node-shutdown": (
        _ended(reason="Terminated", message="Pod was terminated in response to imminent node shutdown.",
               terminated=KILLED),
        EndKind.LOST,
    ),
    "scheduler-preemption": (
        _ended(terminated={"exitCode": 143, "reason": "Error"}, conditions=PREEMPTED), EndKind.LOST
    ),
    "deleted-by-a-drain": (_ended(terminated=KILLED, deleted=True), EndKind.LOST),
    "container-lost-by-the-node": (_ended(terminated=UNKNOWN), EndKind.LOST),
    # set-up: the harness never ran
    "start-error": (_exited(128, "StartError", 'exec: "harness": executable file not found in $PATH'), EndKind.FAILED),
}  # fmt: skip


@pytest.mark.parametrize("case", list(VERDICTS))
def test_pod_verdict_attributes_each_ending(case: str) -> None:
    pod, kind = VERDICTS[case]
    ended = pod_verdict(pod)
    assert ended is not None and ended.kind == kind, (case, ended)
    if kind == EndKind.EXITED:
        assert ended.exit_code not in (None, 0), ended
    if pod["status"]["reason"] == "Evicted" and kind == EndKind.EXITED:
        assert ended.exit_code == EVICTED_EXIT_CODE and ended.reason and ended.reason.startswith("evicted: ")


def test_a_completed_harness_is_scored_whatever_it_wrote() -> None:
    pod = _ended(phase="Succeeded", terminated={"exitCode": 0, "reason": "Completed", "message": NODE_PRESSURE})
    ended = pod_verdict(pod)
    assert ended is not None and ended.kind == EndKind.EXITED and ended.exit_code == 0


# -- end to end: the scheduler records each as the policy's failure or retries it ------------------------------


@dataclass
class _Adapter:
    """One image per task id (the fake kubelet acts by image)."""

    images: dict[str, str]
    name: str = "hostile"

    def launch(self, ctx: RolloutContext) -> Launch:
        env = {"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.token}
        return Launch(argv=("harness",), env=env, files={"task.txt": ctx.prompt}, image=self.images[ctx.task_id])


class _Kubelet(fc.FakeKubelet):
    """The fake kubelet plus what a hostile harness does: fill a volume or its logs with ``FILL`` bytes
    (``img/fill-<workspace|tmp|logs>``), run out of memory (``img/oom``), or run on a node that runs low on memory
    the first time (``img/pressure-once``); in a warm pod, once it is claimed. The eviction is decided from the
    pod's own spec, as the kubelet's ``localStorageEviction`` does: an emptyDir past its sizeLimit, then the pod
    past its containers' total limit; a pod with neither fills the node's disk, and the node evicts it for
    pressure."""

    pressured: set[str] = set()

    async def _act(self, pod: dict[str, Any]) -> None:
        image = pod["spec"]["containers"][0]["image"]
        if not image.startswith(("img/fill-", "img/oom", "img/pressure-once")):
            await super()._act(pod)
            return
        name = pod["metadata"]["name"]
        warm = fc.WARM_LABEL in pod["metadata"]["labels"]
        claimed = self._claimed.setdefault(name, asyncio.Event()) if warm else None
        await self._patch(name, {"phase": "Running", "containerStatuses": [fc._status(running={})]})
        if claimed is not None:  # a warm pod: its waiter runs until a rollout claims it
            await claimed.wait()
            self._claimed.pop(name, None)
            if name not in self.live:
                return
        self.started[name] = time.monotonic()
        if image == "img/oom":
            terminated = {"exitCode": 137, "reason": "OOMKilled", "message": "harness wrote this"}
            await self._patch(name, {"phase": "Failed", "containerStatuses": [fc._status(terminated=terminated)]})
        elif image == "img/pressure-once" and image not in self.pressured:
            self.pressured.add(image)
            await self._evict(name, NODE_PRESSURE, BY_KUBELET)
        elif image == "img/pressure-once":
            terminated = {"exitCode": 0, "reason": "Completed", "message": "42"}
            await self._patch(name, {"phase": "Succeeded", "containerStatuses": [fc._status(terminated=terminated)]})
        else:
            await self._evict(name, _storage_eviction(pod, image.removeprefix("img/fill-")), [])

    async def _evict(self, name: str, message: str, conditions: list[dict[str, Any]]) -> None:
        status = {"phase": "Failed", "reason": "Evicted", "message": message, "conditions": conditions}
        await self._patch(name, {**status, "containerStatuses": [fc._status(terminated=UNKNOWN)]})


def _storage_eviction(pod: dict[str, Any], where: str) -> str:
    """The kubelet's eviction message for a pod that wrote ``FILL`` bytes to ``where`` (a volume, or ``logs``)."""
    spec = pod["spec"]
    for volume in spec["volumes"]:
        limit = (volume.get("emptyDir") or {}).get("sizeLimit")
        if volume["name"] == where and limit and FILL > parse_quantity(limit):
            return f'Usage of EmptyDir volume "{where}" exceeds the limit "{limit}". '
    limits = [c.get("resources", {}).get("limits", {}).get("ephemeral-storage") for c in spec["containers"]]
    if all(limits) and FILL > sum(parse_quantity(limit) for limit in limits):
        return f"Pod ephemeral local storage usage exceeds the total limit of containers {limits[0]}. "
    return "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 0. "


async def _run(
    book: RolloutBook, monkeypatch: pytest.MonkeyPatch, run_id: str, images: dict[str, str], group: int, pool: int = 0
) -> Progress:
    monkeypatch.setattr(fc, "FakeKubelet", _Kubelet)
    monkeypatch.setattr(_Kubelet, "pressured", set())
    async with fc.fake_cluster() as (api, url, _kubelet):
        settings = _settings(warm_pool=pool)
        with anyio.fail_after(30):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                for image in set(images.values()) if pool else ():
                    await runtime.prewarm(run_id, image, 30.0)
                scheduler = Scheduler(
                    book=book, runtime=runtime, adapter=_Adapter(images), scorer=ExitCodeScorer(),
                    settings=OrchestratorSettings(deadline_s=30.0, max_attempts=3), endpoints=ENDPOINTS,
                )  # fmt: skip
                tasks = [TaskSpec(task, f"prompt {task}") for task in images]
                progress = await scheduler.run(RunPlan(run_id=run_id, tasks=tasks, group_size=group, harness="test"))
        assert fc.live_objects(api, "pods") == [] and fc.live_objects(api, "secrets") == []
    return progress


@pytest.fixture()
def book(store_url: str) -> RolloutBook:
    return RolloutBook(open_engine(store_url))


@pytest.mark.asyncio
async def test_filling_the_disk_or_memory_is_the_rollouts_own_failure(
    book: RolloutBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = {"ws": "img/fill-workspace", "tmp": "img/fill-tmp", "logs": "img/fill-logs", "oom": "img/oom"}
    progress = await _run(book, monkeypatch, "run-fill", images, group=2)
    rows = book.rollouts("run-fill")
    assert len(rows) == 8 and progress.retried == 0 and progress.failed == 8  # every one final, none retried
    for row in rows:
        assert row.status == "failed" and row.attempt == 0 and row.exit_code == 137, (row.task_id, row.error)
        assert failure_cause(row.status, row.error) == "policy", row.error  # trained, with the failure reward
    by_task = {row.task_id: row.error or "" for row in rows}
    assert 'evicted: Usage of EmptyDir volume "workspace" exceeds the limit "2Gi".' in by_task["ws"]
    assert 'evicted: Usage of EmptyDir volume "tmp" exceeds the limit "1Gi".' in by_task["tmp"]
    assert "evicted: Pod ephemeral local storage usage exceeds the total limit of containers 4Gi." in by_task["logs"]
    assert "(OOMKilled)" in by_task["oom"]


@pytest.mark.asyncio
async def test_filling_a_claimed_warm_pod_is_the_rollouts_own_failure(
    book: RolloutBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    progress = await _run(book, monkeypatch, "run-warm-fill", {"ws": "img/fill-workspace"}, group=2, pool=2)
    rows = book.rollouts("run-warm-fill")
    assert progress.retried == 0 and [(row.status, row.exit_code) for row in rows] == [("failed", 137)] * 2
    assert all(str(row.meta["runtime_ref"]).startswith("rw-warm-") for row in rows)  # claimed pool pods
    assert all(failure_cause(row.status, row.error) == "policy" for row in rows)
    assert all('Usage of EmptyDir volume "workspace" exceeds the limit "2Gi".' in (row.error or "") for row in rows)


@pytest.mark.asyncio
async def test_a_node_pressure_eviction_is_still_infrastructure_and_retried(
    book: RolloutBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    progress = await _run(book, monkeypatch, "run-pressure", {"t0": "img/pressure-once"}, group=1)
    rows = sorted(book.rollouts("run-pressure"), key=lambda row: row.attempt)
    assert [(row.attempt, row.status) for row in rows] == [(0, "failed"), (1, "finished")]
    assert failure_cause(rows[0].status, rows[0].error) == "infrastructure", rows[0].error
    assert "pod evicted: The node was low on resource: memory." in (rows[0].error or "")
    assert rows[1].meta["retry_of"] == rows[0].id and progress.retried == 1 and progress.finished == 1


def test_the_fake_kubelet_blames_the_node_for_a_pod_without_limits() -> None:
    """The model above is honest: without the sizeLimits and ephemeral-storage limits the same fill reads as node
    pressure, which would be retried: the limits are what make the eviction the rollout's own."""
    pod = build_pod(_job("img/fill-workspace"), KubernetesSettings(namespace="rl"), _owner())
    for volume in pod["spec"]["volumes"]:
        volume.get("emptyDir", {}).pop("sizeLimit", None)
    for container in pod["spec"]["containers"]:
        container["resources"] = {}
    message = _storage_eviction(pod, "workspace")
    ended = pod_verdict(_ended(reason="Evicted", message=message))
    assert ended is not None and ended.kind == EndKind.LOST


# -- secrets: only where they are used -------------------------------------------------------------------------------


def _secret_refs(pod_spec: dict[str, Any]) -> set[str]:
    """Every Secret a pod spec names: env ``secretKeyRef``, ``envFrom``, secret volumes (projected ones too)."""
    names: set[str] = set()
    for container in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        for env in container.get("env", []):
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
        names |= {source["secretRef"]["name"] for source in container.get("envFrom", []) if "secretRef" in source}
    for volume in pod_spec.get("volumes", []):
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
        for source in (volume.get("projected") or {}).get("sources", []):
            if "secret" in source:
                names.add(source["secret"]["name"])
    return names


def _env_names(pod_spec: dict[str, Any]) -> set[str]:
    containers = [*pod_spec.get("initContainers", []), *pod_spec["containers"]]
    return {env["name"] for container in containers for env in container.get("env", [])}


def test_only_the_proxy_and_the_trainer_get_the_operator_key() -> None:
    docs = yaml.safe_load_all(yaml.safe_dump_all(render(KubernetesSettings(namespace="rl")), sort_keys=False))
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if "template" in d.get("spec", {})}
    holders = {name for name, spec in pods.items() if "rollwire-operator" in _secret_refs(spec)}
    assert holders == {"proxy", "rollwire-trainer"}  # the proxy checks it, the trainer calls /admin with it
    for name in ("gateway", "mcp-envs"):
        assert not any("OPERATOR" in env for env in _env_names(pods[name])), name
    assert _secret_refs(pods["gateway"]) == {"rollwire-store", "rollwire-env"}  # the store and the env servers
    assert _secret_refs(pods["mcp-envs"]) == {"rollwire-env"}  # state in files: no store, no operator key
    assert {"ROLLWIRE_STORE__URL", "ROLLWIRE_MCP__GATEWAY__ENV_SECRET"} <= _env_names(pods["gateway"])
    assert "ROLLWIRE_MCP__ENV_SECRET" in _env_names(pods["mcp-envs"])


@pytest.mark.parametrize("harness", list(BUILTIN))
def test_rollout_pods_reference_only_their_own_secret(harness: str) -> None:
    _owner_map, secret, pod = example_rollout(harness, KubernetesSettings(namespace="rl"), "http://p:8", "http://g:8")
    assert _secret_refs(pod["spec"]) == {secret["metadata"]["name"]}
    assert not set(STACK_SECRETS) & _secret_refs(pod["spec"])
    names = [*_env_names(pod["spec"]), *secret["stringData"]]
    leaked = [key for key in names if any(word in key for word in ("OPERATOR", "ENV_SECRET", "STORE__URL"))]
    assert leaked == [], leaked
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_warm_pods_reference_only_their_claim() -> None:
    pod = build_warm_pod("rw-warm-1", "img/ok", KubernetesSettings(namespace="rl"), _owner(), 60.0)
    assert _secret_refs(pod["spec"]) == {"rw-warm-1-claim"}
