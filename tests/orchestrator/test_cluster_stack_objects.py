"""What the real-cluster suite applies validates strictly against the Kubernetes models, without a cluster: the
fitted stack, its Secrets, the orchestrator Job and the egress probe (so a typo there fails here, not on a cluster)."""

from __future__ import annotations

from kubernetes import client
from pydantic import BaseModel

from rollwire.app.cli.__main__ import build_parser
from tests.orchestrator.cluster_stack import orchestrator_job, probe_pod, secrets_for, stack

MODELS: dict[str, type[BaseModel]] = {
    "Namespace": client.V1Namespace, "ServiceAccount": client.V1ServiceAccount, "Role": client.V1Role,
    "RoleBinding": client.V1RoleBinding, "Service": client.V1Service, "Deployment": client.V1Deployment,
    "StatefulSet": client.V1StatefulSet, "NetworkPolicy": client.V1NetworkPolicy, "Job": client.V1Job,
    "Pod": client.V1Pod, "Secret": client.V1Secret, "PersistentVolumeClaim": client.V1PersistentVolumeClaim,
}  # fmt: skip


def test_real_cluster_objects_validate() -> None:
    docs = [*stack("e2e", "reg.local/rw"), *secrets_for("e2e"), orchestrator_job("e2e", "reg.local/rw", "tiny", 2)]
    docs.append(probe_pod("e2e", "http://192.0.2.1"))
    for doc in docs:
        MODELS[doc["kind"]].model_validate(doc)
    kinds = [doc["kind"] for doc in docs]
    policies = sorted(doc["metadata"]["name"] for doc in docs if doc["kind"] == "NetworkPolicy")
    assert "Job" in kinds and policies == [
        "rollwire-backends", "rollwire-gateway", "rollwire-mcp-envs", "rollwire-proxy", "rollwire-rollouts",
        "rollwire-trainer",
    ]  # fmt: skip
    images = {c["image"] for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]}
    assert "reg.local/rw/rollwire:0.1.0" in images and not any("vllm-openai" in image for image in images)


def test_orchestrator_job_runs_a_cli_command() -> None:
    job = orchestrator_job("e2e", "", "tiny", 2)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    args = build_parser().parse_args(command[1:])
    assert (args.command, args.runtime, args.suite, args.group_size) == ("rollouts", "kubernetes", "tiny", 2)
