"""Every rendered manifest (and a built rollout Pod) validates strictly against the Kubernetes OpenAPI models."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from kubernetes import client
from pydantic import BaseModel

from rollwire.harness_adapters.base import Launch
from rollwire.orchestrator.manifests import render
from rollwire.orchestrator.runtimes.base import RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import build_pod, build_secret, run_configmap
from rollwire.settings import KubernetesSettings

MODELS: dict[str, type[BaseModel]] = {
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
        [sys.executable, "-m", "rollwire.app.cli.__main__", "k8s", "render", "--namespace", "rl"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    docs = [doc for doc in yaml.safe_load_all(out) if doc]
    assert len(docs) == len(render(KubernetesSettings(namespace="rl")))


def _admin_port(docs: list[dict]) -> int:
    """The proxy's admin port as its container is told it, checked against its Service and scrape annotation."""
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "proxy")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    port = int(command[command.index("--admin-port") + 1])
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "proxy")
    assert {"name": "admin", "port": port, "targetPort": port} in service["spec"]["ports"]
    assert int(deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]) == port  # /metrics
    return port


def test_rollout_pods_reach_the_proxy_rollout_port_and_the_gateway_only() -> None:
    docs = render(KubernetesSettings(namespace="rl"))
    admin = _admin_port(docs)
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    reached = set()
    for rule in policies["rollwire-rollouts"]["egress"]:
        ports = {p["port"] for p in rule["ports"]}
        for peer in rule["to"]:
            name = peer["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name")
            reached |= {(name, port) for port in ports} if name else set()
            assert name or peer.get("namespaceSelector") == {} and ports == {53}, rule  # else DNS only
    assert reached == {("proxy", 8000), ("gateway", 8001)} and admin not in {port for _, port in reached}

    # the proxy's own policy: its rollout port from anyone, its admin port from the trainer and operators only
    proxy = policies["rollwire-proxy"]
    assert proxy["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "proxy"}}
    open_rules = [r for r in proxy["ingress"] if "from" not in r]
    assert [p["port"] for r in open_rules for p in r["ports"]] == [8000]
    (admin_rule,) = [r for r in proxy["ingress"] if "from" in r]
    assert [p["port"] for p in admin_rule["ports"]] == [admin]
    peers = [next(iter(peer.values()))["matchLabels"] for peer in admin_rule["from"]]
    assert peers == [{"app.kubernetes.io/name": "trainer"}, {"rollwire.dev/operator": "true"},
                     {"rollwire.dev/operator": "true"}]  # fmt: skip
    assert all("rollout" not in str(peer) for peer in admin_rule["from"])
    for name, spec in policies.items():  # no other policy admits anyone to the proxy's admin port
        if name != "rollwire-proxy":
            selected = str(spec["podSelector"])
            assert "proxy" not in selected or all(
                admin not in {p["port"] for p in r.get("ports", [])} for r in spec.get("ingress", [])
            ), name

    trainer = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "rollwire-trainer")
    env = {e["name"]: e.get("value") for e in trainer["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ROLLWIRE_TRAINER__ADMIN_URL"] == f"http://proxy:{admin}"
