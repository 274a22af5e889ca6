"""Pure translations for the Kubernetes warm pool: a ready pod that waits for its rollout, the claim that hands it one.

A warm pod is a rollout pod started before its rollout exists: same image, resources (storage limits included)
and security as ``build_pod``, but its command is a POSIX-shell waiter that watches a Secret volume
(``optional``, so the pod starts without it). Claiming it is two API calls, as a cold start is: create the
claim Secret (the rollout's env, files and command as a ``launch.sh``), then patch the pod's labels and
annotations (the rollout's, which also makes the kubelet sync the pod and so project the Secret at once rather
than at its next resync) and shorten its ``activeDeadlineSeconds`` to the rollout's deadline. The waiter then
copies the files into the workspace, runs the command there, and leaves the final answer where the termination
message is read. No I/O here; ``pool`` does the calls.
"""

from __future__ import annotations

import math
import shlex
import uuid
from collections.abc import Mapping
from typing import Any

from rollwire.orchestrator.runtimes.base import RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import (
    DEADLINE_BACKSTOP_S,
    MANAGED,
    ROLLOUT_ID_ANNOTATION,
    ROLLOUT_LABEL,
    RUN_LABEL,
    WORKSPACE,
    label_value,
    owner_reference,
    pod_argv,
    pod_image,
    rollout_pod,
    scratch_volumes,
)
from rollwire.settings import KubernetesSettings

WARM_LABEL = "rollwire.dev/warm"
"""On every pool pod: ``idle`` until claimed, then ``claimed``."""
CLAIM_MOUNT = "/rollwire/claim"
ANSWER = ".rollwire-final-answer"
"""Workspace-relative termination message file of a warm pod (its rollout's answer path is not known at start)."""
WAITER = f'until [ -f {CLAIM_MOUNT}/launch.sh ]; do sleep 0.05; done; exec sh {CLAIM_MOUNT}/launch.sh'
"""A file test on a mounted volume every 50 ms: the pod needs no API access and no tool beyond ``sh``."""


def warm_pod_name() -> str:
    return f"rw-warm-{uuid.uuid4().hex[:12]}"


def claim_secret_name(pod: str) -> str:
    return f"{pod}-claim"


def build_warm_pod(
    name: str, image: str, settings: KubernetesSettings, owner: Mapping[str, Any], deadline_s: float
) -> dict[str, Any]:
    """A pool pod for ``image``: it lives at most ``warm_pool_idle_s`` unclaimed plus one rollout's deadline."""
    lifetime = settings.warm_pool_idle_s + max(1, math.ceil(deadline_s)) + DEADLINE_BACKSTOP_S
    volumes = [
        *scratch_volumes(settings),
        {"name": "claim", "secret": {"secretName": claim_secret_name(name), "optional": True}},
    ]
    return rollout_pod(
        settings, owner, {"name": name, "labels": {**MANAGED, WARM_LABEL: "idle"}},
        image=pod_image(image, settings), command=["sh", "-c", WAITER],
        env=[{"name": "ROLLWIRE_WORKSPACE", "value": WORKSPACE}, {"name": "HOME", "value": WORKSPACE}],
        volumes=volumes, mounts=[{"name": "claim", "mountPath": CLAIM_MOUNT, "readOnly": True}],
        answer_path=ANSWER, lifetime_s=lifetime,
    )  # fmt: skip


def launch_script(job: RolloutJob) -> str:
    """What the waiter runs: the files into the workspace, the env, the command; then the answer for the kubelet."""
    launch = job.launch
    lines = ["set -e", f"cd {WORKSPACE}"]
    for index, path in enumerate(sorted(launch.files)):
        target = shlex.quote(f"{WORKSPACE}/{path}")
        lines.append(f'mkdir -p "$(dirname {target})" && cp {CLAIM_MOUNT}/file-{index} {target}')
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(launch.env.items())]
    lines += [
        "set +e",
        shlex.join(pod_argv(launch.argv)),
        "code=$?",
        f"[ -f {shlex.quote(launch.final_answer_path)} ] && cp {shlex.quote(launch.final_answer_path)} {ANSWER}",
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"


def build_claim(job: RolloutJob, pod: str, namespace: str, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The claim Secret: ``launch.sh`` (env and command) and the files as ``file-<n>``, owned by the run."""
    files = {f"file-{index}": job.launch.files[path] for index, path in enumerate(sorted(job.launch.files))}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": claim_secret_name(pod),
            "namespace": namespace,
            "labels": {**MANAGED, RUN_LABEL: label_value(job.run_id), ROLLOUT_LABEL: label_value(job.rollout_id)},
            "ownerReferences": [owner_reference(owner)],
        },
        "stringData": {"launch.sh": launch_script(job), **files},
    }


def claim_patch(job: RolloutJob, pod_age_s: float) -> dict[str, Any]:
    """The merge patch that gives the pod its rollout: labels, annotations, the rollout's deadline (only shortened)."""
    deadline = job.launch.deadline_s if job.launch.deadline_s is not None else job.deadline_s
    return {
        "metadata": {
            "labels": {WARM_LABEL: "claimed", RUN_LABEL: label_value(job.run_id), ROLLOUT_LABEL: label_value(job.rollout_id)},
            "annotations": {ROLLOUT_ID_ANNOTATION: job.rollout_id, "rollwire.dev/run-id": job.run_id},
        },
        "spec": {"activeDeadlineSeconds": math.ceil(pod_age_s) + max(1, math.ceil(deadline)) + DEADLINE_BACKSTOP_S},
    }


__all__ = [
    "ANSWER",
    "WARM_LABEL",
    "build_claim",
    "build_warm_pod",
    "claim_patch",
    "claim_secret_name",
    "launch_script",
    "warm_pod_name",
]
