"""Pure translations between a rollout and Kubernetes objects: job -> Pod + Secret, run -> owner ConfigMap, Pod status -> Ended.

No client and no I/O here, so every field can be unit-tested without a cluster. The adapter's env and
files go into a per-rollout Secret (the token never sits in the Pod object); the files are copied into
the ``/workspace`` emptyDir by an init container; the final answer comes back as the container's
termination message. Pods and Secrets are owned by the run's ConfigMap: deleting it collects them.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from rollwire.harness_adapters.images import in_registry
from rollwire.orchestrator.runtimes.base import Ended, EndKind, RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import (
    SERVERS_ANNOTATION,
    SIDECARS_LABEL,
    RolloutServers,
    Sidecars,
    annotated,
    build_sidecars,
)
from rollwire.settings import KubernetesSettings

WORKSPACE = "/workspace"
FILES_MOUNT = "/rollwire/files"
HARNESS = "harness"
MANAGED = {"app.kubernetes.io/managed-by": "rollwire", "rollwire.dev/component": "rollout"}
RUN_LABEL = "rollwire.dev/run"
ROLLOUT_LABEL = "rollwire.dev/rollout"
ROLLOUT_ID_ANNOTATION = "rollwire.dev/rollout-id"
"""The rollout a pod runs, whole (a label value is cut to 63 characters)."""
DEADLINE_BACKSTOP_S = 30
"""activeDeadlineSeconds = deadline + this: the orchestrator stops pods itself; the kubelet covers a dead orchestrator."""
RUN_AS = 10001
"""The uid/gid every rollwire image runs as (``containers/``): non-root, above the host's system range."""
IN_IMAGE_PYTHON = "python"
"""What a host interpreter path in a launch becomes in the pod: each rollout image puts its harness's Python first."""
IMAGE_SUITES = ("/opt/rollwire/lib/python3.11/site-packages/rollwire/mcp_servers/tasks/suites",)
"""Where the stack image keeps the shipped task suites (``containers/rollwire.Containerfile``'s venv). A suite's
checker arguments are the task's answers; the rollout images hold none, and every rollout pod covers this folder
with an empty read-only volume as well, for an image built on the stack image (in an image without it the cover
is an empty folder)."""

EVICTED_EXIT_CODE = 137
"""The exit status recorded for a rollout the kubelet evicted for storage the pod itself used past its limits:
SIGKILL's (128 + 9), the signal the eviction ends the harness with."""

IMAGE_PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff"})
"""A pull that failed (registry down, rate limit, credentials, a node's network): infrastructure, retried."""
IMAGE_NAME_ERRORS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
"""An image that cannot be pulled as configured: retrying will not help."""
CONFIG_ERRORS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
START_ERRORS = frozenset({"StartError", "ContainerCannotRun"})
"""A container the runtime could not start (no such command, exec format): set-up, the policy never ran."""
INFRA_REASONS = frozenset(
    {"Evicted", "NodeLost", "Shutdown", "Terminated", "UnexpectedAdmissionError", "NodeAffinity", "Preempting"}
)
"""Pod-level reasons the platform writes when it ends a pod for reasons of its own (node pressure, a node lost or
shut down, the kubelet preempting it for a critical pod): retried, except the own-storage evictions below."""
CONTAINER_LOST = "ContainerStatusUnknown"
"""The kubelet's placeholder (exit 137) for a container it could no longer find: the node lost it, not the harness."""

OWN_STORAGE_EVICTIONS = (
    re.compile(r'Usage of EmptyDir volume "[^"]+" exceeds the limit "[^"]+"\.\s*'),
    re.compile(r'Container \S+ exceeded its local ephemeral storage limit "[^"]+"\.\s*'),
    re.compile(r"Pod ephemeral local storage usage exceeds the total limit of containers \S+\.\s*"),
)
"""The kubelet's messages (``pkg/kubelet/eviction/helpers.go``: ``emptyDirMessageFmt``,
``containerEphemeralStorageMessageFmt``, ``podEphemeralStorageMessageFmt``) for a pod past its own emptyDir
sizeLimit, a container's ephemeral-storage limit, or the pod's total: storage the rollout itself wrote."""
_NODE_LOW = re.compile(r"The node was low on resource: (?P<resource>[\w./-]+)\.(?: |$)")
_OVER_REQUEST = re.compile(
    r"Container (?P<container>\S+) was using \S+, "
    r"(?:request is \S+, has larger consumption of (?P<resource>[\w./-]+)|which exceeds its request of \S+)\.(?: |$)"
)
"""A node-pressure eviction that names a container using more than it requested (``containerMessageFmt``, in its
current and its older form)."""

_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]")


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    return _LABEL_VALUE.sub("-", text)[:63].strip("-._") or "x"


def pod_name(rollout_id: str) -> str:
    return f"rw-{rollout_id.lower()}"[:63].rstrip("-")


def secret_name(rollout_id: str) -> str:
    return f"{pod_name(rollout_id)}-env"


def run_configmap_name(run_id: str) -> str:
    return f"rollwire-run-{label_value(run_id).lower()}"[:63].rstrip("-.")


def selector(run_id: str | None = None) -> str:
    labels = dict(MANAGED)
    if run_id is not None:
        labels[RUN_LABEL] = label_value(run_id)
    return ",".join(f"{key}={value}" for key, value in labels.items())


def run_configmap(run_id: str, namespace: str) -> dict[str, Any]:
    """The run's anchor object: every rollout Pod and Secret names it as owner."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": run_configmap_name(run_id),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "rollwire", RUN_LABEL: label_value(run_id)},
        },
        "data": {"run_id": run_id},
    }


def owner_reference(configmap: Mapping[str, Any]) -> dict[str, Any]:
    meta = configmap["metadata"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"], "controller": False}


def _labels(job: RolloutJob) -> dict[str, str]:
    return {**MANAGED, RUN_LABEL: label_value(job.run_id), ROLLOUT_LABEL: label_value(job.rollout_id)}


def _file_keys(job: RolloutJob) -> dict[str, str]:
    """Secret key -> workspace path (keys must be [-._a-zA-Z0-9]; paths may nest)."""
    return {f"file-{index}": path for index, path in enumerate(sorted(job.launch.files))}


def build_secret(
    job: RolloutJob, namespace: str, owner: Mapping[str, Any], sidecars: Sidecars | None = None
) -> dict[str, Any]:
    """The rollout's env and files, and its MCP sidecars' key (read by the sidecars only)."""
    files = {key: job.launch.files[path] for key, path in _file_keys(job).items()}
    keys = sidecars.secret_data if sidecars is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(job.rollout_id),
            "namespace": namespace,
            "labels": _labels(job),
            "ownerReferences": [owner_reference(owner)],
        },
        "stringData": {**dict(job.launch.env), **files, **keys},
    }


def pod_image(image: str | None, settings: KubernetesSettings) -> str:
    """The adapter's image (else the default), moved to ``settings.image_registry`` when it is one of ours."""
    return in_registry(image or settings.image, settings.image_registry)


def pod_argv(argv: Sequence[str]) -> list[str]:
    """The launch's command as the image runs it: an absolute path to a Python interpreter on the orchestrator's
    machine (``sys.executable``, a harness venv's python) means "the harness's Python", which is ``python`` on
    the image's PATH; every other command is kept as is."""
    first = argv[0]
    if first == sys.executable or (os.path.isabs(first) and os.path.basename(first).startswith("python")):
        return [IN_IMAGE_PYTHON, *argv[1:]]
    return list(argv)


def pod_security() -> dict[str, Any]:
    """Pod-level security: a non-root uid/gid, the workspace volume group-owned by it, the runtime's seccomp profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """Every rollout container: no privilege, no escalation, no capabilities, a read-only root (it writes to volumes)."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "capabilities": {"drop": ["ALL"]},
    }


def container_resources(settings: KubernetesSettings) -> dict[str, Any]:
    """Requests = limits for every rollout container: Guaranteed QoS (the node's OOM killer takes it last), and the
    scheduler reserves all the disk a rollout may fill, so one that fills it cannot push its node into disk
    pressure and have its neighbours (or itself) evicted as an infrastructure failure."""
    amounts = {"cpu": settings.cpu, "memory": settings.memory, "ephemeral-storage": settings.ephemeral_storage}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def scratch_volumes(settings: KubernetesSettings) -> list[dict[str, Any]]:
    """The workspace and /tmp emptyDirs, each with a sizeLimit: past it the kubelet evicts the pod, with a message
    that names the volume (``OWN_STORAGE_EVICTIONS``), so a rollout that fills its disk fails as itself."""
    return [
        {"name": "workspace", "emptyDir": {"sizeLimit": settings.workspace_size}},
        {"name": "tmp", "emptyDir": {"sizeLimit": settings.tmp_size}},
    ]


def suite_covers() -> list[dict[str, Any]]:
    """The read-only mounts every container of a rollout pod gets over the image's task suites."""
    return [{"name": "suites-cover", "mountPath": path, "readOnly": True} for path in IMAGE_SUITES]


def job_sidecars(job: RolloutJob, settings: KubernetesSettings, servers: RolloutServers) -> Sidecars:
    """The MCP sidecars of the job's pod (``mcp_sidecars``), hardened like its harness."""
    secret = secret_name(job.rollout_id)
    return build_sidecars(
        servers, job.rollout_id, settings, secret=secret, security=container_security(), covers=suite_covers()
    )


def build_pod(
    job: RolloutJob, settings: KubernetesSettings, owner: Mapping[str, Any], sidecars: Sidecars | None = None
) -> dict[str, Any]:
    """One rollout Pod: the adapter's image, env (by Secret reference) and command, fenced by resources and a
    deadline; ``sidecars``: its MCP servers, started (and answering) before the harness."""
    launch = job.launch
    image = pod_image(launch.image, settings)
    secret = secret_name(job.rollout_id)
    env: list[dict[str, Any]] = [
        {"name": "ROLLWIRE_WORKSPACE", "value": WORKSPACE},
        {"name": "HOME", "value": WORKSPACE},
    ]
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}} for key in sorted(launch.env)]
    volumes = scratch_volumes(settings)
    init: list[dict[str, Any]] = []
    if launch.files:
        items = [{"key": key, "path": path} for key, path in _file_keys(job).items()]
        volumes.append({"name": "files", "secret": {"secretName": secret, "items": items}})
        init.append(
            {
                "name": "workspace-files",
                "image": image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": ["sh", "-c", f"cp -RL {FILES_MOUNT}/. {WORKSPACE}/"],
                "volumeMounts": [
                    {"name": "workspace", "mountPath": WORKSPACE},
                    {"name": "files", "mountPath": FILES_MOUNT, "readOnly": True},
                ],
                "resources": container_resources(settings),
                "securityContext": container_security(),
            }
        )
    deadline = launch.deadline_s if launch.deadline_s is not None else job.deadline_s
    labels = _labels(job)
    annotations = {ROLLOUT_ID_ANNOTATION: job.rollout_id, "rollwire.dev/run-id": job.run_id}
    lifetime_s = max(1, math.ceil(deadline)) + DEADLINE_BACKSTOP_S
    if sidecars is not None and sidecars.containers:
        init += sidecars.containers
        volumes += sidecars.volumes
        labels[SIDECARS_LABEL] = "true"
        annotations[SERVERS_ANNOTATION] = sidecars.annotation
        lifetime_s += settings.mcp_startup_timeout_s  # the kubelet's backstop also covers its servers' start
    metadata = {"name": pod_name(job.rollout_id), "labels": labels, "annotations": annotations}
    return rollout_pod(
        settings, owner, metadata, image=image, command=pod_argv(launch.argv), env=env, volumes=volumes,
        answer_path=launch.final_answer_path, lifetime_s=lifetime_s, init=init,
    )  # fmt: skip


def rollout_pod(
    settings: KubernetesSettings,
    owner: Mapping[str, Any],
    metadata: dict[str, Any],
    *,
    image: str,
    command: list[str],
    env: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    answer_path: str,
    lifetime_s: int,
    mounts: Sequence[dict[str, Any]] = (),
    init: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The Pod every rollout runs in (a cold one or a warm pool's): one harness container with the workspace and
    /tmp, hardened (no token, non-root, no escalation), fenced by resources and ``lifetime_s``; ``mounts`` are
    added to the harness container's workspace and /tmp. Every emptyDir must carry a sizeLimit (``scratch_volumes``)."""
    volumes = [*volumes, {"name": "suites-cover", "emptyDir": {"sizeLimit": "1Mi"}}]
    unbounded = [v["name"] for v in volumes if "emptyDir" in v and not (v["emptyDir"] or {}).get("sizeLimit")]
    if unbounded:
        raise ValueError(f"rollout pod emptyDir volumes without a sizeLimit: {', '.join(unbounded)}")
    covers = suite_covers()
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": lifetime_s,
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": pod_security(),
        "volumes": volumes,
        "containers": [
            {
                "name": HARNESS,
                "image": image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": command,
                "workingDir": WORKSPACE,
                "env": env,
                "resources": container_resources(settings),
                "volumeMounts": [
                    {"name": "workspace", "mountPath": WORKSPACE},
                    {"name": "tmp", "mountPath": "/tmp"},
                    *mounts,
                    *covers,
                ],
                "terminationMessagePath": f"{WORKSPACE}/{answer_path}",
                "terminationMessagePolicy": "File",
                "securityContext": container_security(),
            }
        ],
    }
    if init:
        spec["initContainers"] = list(init)
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    meta = {"name": metadata["name"], "namespace": settings.namespace}
    meta |= {k: v for k, v in metadata.items() if k != "name"} | {"ownerReferences": [owner_reference(owner)]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _waiting_failure(statuses: list[dict[str, Any]], where: str) -> Ended | None:
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        message = waiting.get("message") or ""
        if reason in IMAGE_NAME_ERRORS:
            return Ended(EndKind.FAILED, reason=f"image pull failed ({reason}): {message}".rstrip(": "))
        if reason in IMAGE_PULL_ERRORS:  # the registry or the node: another attempt may succeed
            return Ended(EndKind.LOST, reason=f"image pull failed ({reason}): {message}".rstrip(": "))
        if reason in CONFIG_ERRORS:
            return Ended(EndKind.FAILED, reason=f"{where} could not start ({reason}): {message}".rstrip(": "))
    return None


def _terminated(pod: Mapping[str, Any], name: str = HARNESS) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return dict((status.get("state") or {}).get("terminated") or {})
    return {}


def pod_is_running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def own_storage_eviction(status: Mapping[str, Any]) -> bool:
    """Whether the kubelet evicted the pod for disk the pod itself filled, read from the pod's status alone (the
    reason and message the kubelet writes; a rollout pod has no token and no API rights, so it cannot write them).

    Past a limit of its own (an emptyDir's sizeLimit, its ephemeral-storage limit), or named by a node-pressure
    eviction as using more ephemeral storage than it requested: requests equal limits (``container_resources``),
    so that too is storage past its own limit. The container's termination message is the harness's own text and is
    never read here."""
    if status.get("reason") != "Evicted":
        return False
    message = status.get("message") or ""
    if any(pattern.fullmatch(message) for pattern in OWN_STORAGE_EVICTIONS):
        return True
    low = _NODE_LOW.match(message)
    if low is None:
        return False
    return any(
        over["container"] == HARNESS and (over["resource"] or low["resource"]) == "ephemeral-storage"
        for over in _OVER_REQUEST.finditer(message, low.end())
    )


def _disruption(pod: Mapping[str, Any]) -> str:
    """Why the platform is taking the pod away (a drain, a scheduler's preemption, a taint, a node-pressure
    eviction): its DisruptionTarget condition or its deletion; '' when nothing is. The orchestrator deletes a pod
    only once its verdict is in, so a deletion seen before that is someone else's."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return f"{condition.get('reason') or 'disrupted'}: {condition.get('message') or ''}".rstrip(": ")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "deleted by another client"
    return ""


def pod_verdict(pod: Mapping[str, Any]) -> Ended | None:
    """How a Pod ended, from its status alone; None while it is still pending or running normally.

    Whose failure it is decides training: EXITED (non-zero) and TIMED_OUT are the policy's and train with the
    failure reward; LOST (the platform's) is retried and never scored; FAILED (set-up) is neither. Only what the
    platform writes decides it (phase, pod reason and message, conditions, a container's terminated reason and
    exit code), never the termination message, which the harness writes."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    message = status.get("message") or ""
    if phase in ("Pending", "Running"):
        sidecar = sidecar_failure(pod)
        if sidecar is not None:
            return sidecar[1]
        return _waiting_failure(status.get("initContainerStatuses") or [], "workspace-files") or _waiting_failure(
            status.get("containerStatuses") or [], HARNESS
        )
    terminated = _terminated(pod)
    code = terminated.get("exitCode")
    answer = terminated.get("message")
    if phase == "Succeeded":
        return Ended(EndKind.EXITED, exit_code=int(code or 0), final_answer=answer)
    if reason == "DeadlineExceeded":
        return Ended(EndKind.TIMED_OUT, exit_code=code, reason="activeDeadlineSeconds exceeded", final_answer=answer)
    if own_storage_eviction(status):
        why = f"evicted: {message.strip()}"
        return Ended(EndKind.EXITED, exit_code=EVICTED_EXIT_CODE, reason=why, final_answer=answer)
    if reason in INFRA_REASONS:
        return Ended(EndKind.LOST, reason=f"pod {reason.lower()}: {message}".rstrip(": "))
    disruption = _disruption(pod)
    if disruption:
        return Ended(EndKind.LOST, reason=f"pod disrupted ({disruption})")
    detail = terminated.get("reason")
    if detail == CONTAINER_LOST:
        return Ended(EndKind.LOST, reason=f"the node lost the harness container ({CONTAINER_LOST})")
    if detail in START_ERRORS:
        why = str(terminated.get("message") or "")[:500]  # the runtime's start error: the harness never ran
        return Ended(EndKind.FAILED, reason=f"{HARNESS} could not start ({detail}): {why}".rstrip(": "))
    if code is not None:
        return Ended(EndKind.EXITED, exit_code=int(code), reason=detail, final_answer=answer)
    init_failed = _terminated_init(pod)
    if init_failed:
        return Ended(EndKind.FAILED, reason=f"workspace files could not be copied: {init_failed}")
    return Ended(EndKind.LOST, reason=f"pod failed without an exit status: {reason or message or phase}")


def _harness_started(status: Mapping[str, Any]) -> bool:
    return any({"running", "terminated"} & set(c.get("state") or {}) for c in status.get("containerStatuses") or [])


def sidecar_failure(pod: Mapping[str, Any]) -> tuple[str, Ended] | None:
    """(container, verdict) for an MCP sidecar that could not start, from the kubelet's status and the servers the
    orchestrator annotated; None while none has failed. Before the harness runs only: its servers' set-up is the
    platform's, and a sidecar that stops later shows to the harness as tool calls that fail. A pull that failed is
    retried like any image's; anything else (it exited, its startup probe failed, its config is wrong) is set-up."""
    placed = annotated(pod)
    status = pod.get("status") or {}
    if not placed or _harness_started(status):
        return None
    for container in status.get("initContainerStatuses") or []:
        name = str(container.get("name") or "")
        if name not in placed:
            continue
        where = f"MCP server {placed[name][0]!r} ({name})"
        waiting = _waiting_failure([container], where)
        if waiting is not None:  # a config error names its container already; a failed pull does not
            named = (waiting.reason or "").startswith(where)
            return name, waiting if named else replace(waiting, reason=f"{where}: {waiting.reason}")
        state = container.get("state") or {}
        ended = (container.get("lastState") or {}).get("terminated") or state.get("terminated") or {}
        crashing = ((state.get("waiting") or {}).get("reason") or "") == "CrashLoopBackOff"
        if int(container.get("restartCount") or 0) > 0 or ended.get("exitCode") or crashing:
            how = f"exit {ended.get('exitCode')} ({ended.get('reason') or 'Error'})" if ended else "restarted"
            return name, Ended(EndKind.FAILED, reason=f"{where} did not start: {how}")
    return None


def sidecars_pending(pod: Mapping[str, Any]) -> list[str]:
    """The MCP servers of a pod whose harness has not started yet (they have not all answered initialize)."""
    placed = annotated(pod)
    if _harness_started(pod.get("status") or {}):
        return []
    return sorted(server for server, _port in placed.values())


def _terminated_init(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return f"exit {terminated['exitCode']} {terminated.get('message') or ''}".strip()
    return ""


__all__ = [
    "EVICTED_EXIT_CODE",
    "HARNESS",
    "MANAGED",
    "ROLLOUT_ID_ANNOTATION",
    "build_pod",
    "build_secret",
    "job_sidecars",
    "suite_covers",
    "container_resources",
    "label_value",
    "own_storage_eviction",
    "owner_reference",
    "pod_is_running",
    "pod_name",
    "pod_verdict",
    "rollout_pod",
    "run_configmap",
    "run_configmap_name",
    "scratch_volumes",
    "sidecar_failure",
    "sidecars_pending",
    "IMAGE_SUITES",
    "secret_name",
    "selector",
]
