"""Every rendered manifest (and a built rollout Pod) validates strictly against the Kubernetes OpenAPI models."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from kubernetes import client

from rollwire.harness_adapters.base import Launch
from rollwire.orchestrator.manifests import render
from rollwire.orchestrator.runtimes.base import RolloutJob
from rollwire.orchestrator.runtimes.pod_spec import build_pod, build_secret, run_configmap
from rollwire.settings import KubernetesSettings

MODELS = {
    "Namespace": client.V1Namespace, "ServiceAccount": client.V1ServiceAccount, "Role": client.V1Role,
    "RoleBinding": client.V1RoleBinding, "Service": client.V1Service, "Deployment": client.V1Deployment,
    "StatefulSet": client.V1StatefulSet, "NetworkPolicy": client.V1NetworkPolicy, "Job": client.V1Job,
    "Pod": client.V1Pod, "Secret": client.V1Secret, "ConfigMap": client.V1ConfigMap,
}


def _validate(doc: dict) -> None:
    model = MODELS[doc["kind"]]
    model.model_validate(doc)  # extra="forbid": an unknown or misspelt key fails, as do missing required fields


def test_rendered_manifests_validate_strictly() -> None:
    docs = render(KubernetesSettings(namespace="rl", image="registry.local/rollwire:dev"))
    kinds = {doc["kind"] for doc in docs}
    assert kinds >= {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "StatefulSet", "NetworkPolicy", "Job"}
    for doc in docs:
        _validate(doc)
        assert doc["metadata"].get("namespace", "rl") == "rl" and (doc["kind"] != "Namespace" or doc["metadata"]["name"] == "rl")
    proxy = next(doc for doc in docs if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "proxy")
    assert proxy["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/rollwire:dev"


def test_unknown_key_is_rejected() -> None:
    doc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"selectr": {}}}
    with pytest.raises(ValueError, match="selectr"):
        _validate(doc)


def test_rollout_pod_and_secret_validate() -> None:
    owner = run_configmap("run-1", "rl")
    owner["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
    launch = Launch(argv=("codex", "exec"), env={"OPENAI_API_KEY": "tok-s3cr3t"}, files={".codex/config.toml": "x=1"})
    job = RolloutJob("run-1", "ro-abc", launch, 60.0)
    pod = build_pod(job, KubernetesSettings(namespace="rl"), owner)
    for doc in (pod, build_secret(job, "rl", owner), owner):
        _validate(doc)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] >= 60
    assert pod["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert "tok-s3cr3t" not in yaml.safe_dump(pod)  # the token travels by Secret reference only


def test_cli_render_prints_the_stream() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rollwire.cli.__main__", "k8s", "render", "--namespace", "rl"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    docs = [doc for doc in yaml.safe_load_all(out) if doc]
    assert len(docs) == len(render(KubernetesSettings(namespace="rl")))
