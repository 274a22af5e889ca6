"""``rollwire k8s render --mcp-config FILE``: one file, both runtimes. A shared server becomes a Deployment, Service
and NetworkPolicy only the gateway passes; a rollout-scoped one a native sidecar of every rollout pod, answering
initialize before the harness starts, its state in a volume of its own, its key in the rollout's Secret and never
in the harness's environment; the gateway reads the file and starts no server. Every object validates strictly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollwire.harness_adapters.base import Launch
from rollwire.mcp_servers.placement import sidecar_key
from rollwire.orchestrator.manifests import example_rollout, render_yaml
from rollwire.orchestrator.runtimes.base import RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import KEY_ENV, SIDECARS_LABEL, RolloutServers
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import (
    HARNESS,
    build_pod,
    build_secret,
    job_sidecars,
    run_configmap,
)
from rollwire.settings import KubernetesSettings
from tests.orchestrator.test_manifests_validate import _validate

SIDECAR_PORT = KubernetesSettings().mcp_sidecar_port
CONFIG = {
    "mcpServers": {
        "memory": {"command": "mcp-server-memory", "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}},
        "time": {"command": "mcp-server-time", "scope": "shared"},
        "search": {"url": "http://127.0.0.1:9000/mcp", "image": "reg.example/search:1.4", "port": 9000},
        "docs": {"url": "https://docs.example.com/mcp"},
    }
}


def _config(tmp_path: Path, config: dict[str, Any] = CONFIG) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    return str(path)


def _find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name)


def test_the_stack_with_one_server_of_each_scope(tmp_path: Path) -> None:
    settings = KubernetesSettings(namespace="rl", mcp_config=_config(tmp_path))
    docs = list(yaml.safe_load_all(render_yaml(settings, settings.mcp_config)))
    for doc in docs:
        _validate(doc)
    config_map = _find(docs, "ConfigMap", "rollwire-mcp-servers")
    assert json.loads(config_map["data"]["mcp.json"]) == CONFIG  # the file as written: the gateway parses it again
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for name in ("mcp-server-time", "mcp-server-search"):
        assert {("Deployment", name), ("Service", name), ("NetworkPolicy", name)} <= names
    assert not {n for k, n in names if n in ("mcp-server-memory", "mcp-server-docs")}  # per rollout / not ours

    time_pod = _find(docs, "Deployment", "mcp-server-time")["spec"]["template"]["spec"]
    bridge = time_pod["containers"][0]
    assert bridge["command"][:3] == ["rollwire", "mcp", "bridge"] and bridge["command"][-2:] == ["--", "mcp-server-time"]
    assert bridge["command"][bridge["command"].index("--shared") + 1] == "time"  # derives its own key, mixes nothing
    assert (
        bridge["image"] == "ghcr.io/rollwire/mcp-runner:0.1.0" and bridge["startupProbe"]["httpGet"]["path"] == "/ready"
    )
    assert {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": "rollwire-mcp-sidecar", "key": "key"}}} in bridge[
        "env"
    ]
    assert time_pod["automountServiceAccountToken"] is False
    search = _find(docs, "Deployment", "mcp-server-search")["spec"]["template"]["spec"]["containers"][0]
    assert "command" not in search and search["image"] == "reg.example/search:1.4"  # the image's own server
    assert search["ports"] == [{"containerPort": 9000, "name": "mcp"}] and "env" not in search  # no secret for it

    for name, port in (("mcp-server-time", 8000), ("mcp-server-search", 9000)):
        policy = _find(docs, "NetworkPolicy", name)["spec"]
        assert policy["ingress"] == [
            {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}}}],
             "ports": [{"protocol": "TCP", "port": port}]}
        ]  # fmt: skip
        assert policy["policyTypes"] == ["Ingress", "Egress"] and len(policy["egress"]) == 1  # DNS only
    sidecars = _find(docs, "NetworkPolicy", "rollwire-rollout-mcp-sidecars")["spec"]
    assert sidecars["podSelector"]["matchLabels"] == {"rollwire.dev/component": "rollout", SIDECARS_LABEL: "true"}
    assert sidecars["ingress"][0]["ports"] == [{"protocol": "TCP", "port": SIDECAR_PORT}]

    gateway = _find(docs, "Deployment", "gateway")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in gateway["containers"][0]["env"]}
    assert env["ROLLWIRE_MCP__GATEWAY__RUNTIME"] == "kubernetes"
    assert env["ROLLWIRE_MCP__GATEWAY__UPSTREAMS_FILE"] == "/etc/rollwire/mcp/mcp.json"
    assert gateway["serviceAccountName"] == "rollwire-gateway" and gateway["automountServiceAccountToken"] is False
    mount = {"name": "api-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}
    assert mount in gateway["containers"][0]["volumeMounts"]  # the token in the one container that reads pods
    (token,) = [v for v in gateway["volumes"] if v["name"] == "api-token"]
    assert token["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 3600
    role = _find(docs, "Role", "rollwire-gateway")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]  # addresses, nothing else


def test_without_rollout_scoped_servers_the_gateway_keeps_no_token(tmp_path: Path) -> None:
    config = {"mcpServers": {"docs": {"url": "https://docs.example.com/mcp"}}}
    settings = KubernetesSettings(mcp_config=_config(tmp_path, config))
    docs = list(yaml.safe_load_all(render_yaml(settings, settings.mcp_config)))
    gateway = _find(docs, "Deployment", "gateway")["spec"]["template"]["spec"]
    assert gateway["automountServiceAccountToken"] is False and "serviceAccountName" not in gateway
    assert not [v for v in gateway["volumes"] if v["name"] == "api-token"]
    assert not [
        d for d in docs if d["kind"] in ("ServiceAccount", "Role") and d["metadata"]["name"] == "rollwire-gateway"
    ]


def test_a_rollout_pod_runs_its_servers_as_native_sidecars(tmp_path: Path) -> None:
    settings = KubernetesSettings(namespace="rl", mcp_config=_config(tmp_path), mcp_sidecar_secret="deploy-secret")
    owner = run_configmap("run-1", "rl")
    owner["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
    job = RolloutJob("run-1", "ro-a", Launch(argv=("codex", "exec"), env={"OPENAI_API_KEY": "tok"}), 60.0)
    sidecars = job_sidecars(job, settings, RolloutServers.from_settings(settings))
    pod, secret = build_pod(job, settings, owner, sidecars), build_secret(job, "rl", owner, sidecars)
    _validate(pod)
    _validate(secret)
    spec = pod["spec"]
    (memory,) = spec["initContainers"]
    assert memory["name"] == "mcp-memory" and memory["restartPolicy"] == "Always"  # a native sidecar
    assert memory["startupProbe"]["httpGet"] == {"path": "/ready", "port": SIDECAR_PORT}
    assert memory["command"][-2:] == ["--", "mcp-server-memory"]
    assert {"name": "MEMORY_FILE_PATH", "value": "/mcp-state/graph.jsonl"} in memory["env"]  # {rollout_dir} filled
    assert pod["metadata"]["labels"][SIDECARS_LABEL] == "true"
    placed = json.loads(pod["metadata"]["annotations"]["rollwire.dev/mcp-sidecars"])
    assert placed == {"mcp-memory": {"server": "memory", "port": SIDECAR_PORT}}
    assert secret["stringData"]["mcp-key-memory"] == sidecar_key("deploy-secret", "rollout", "ro-a", "memory")
    key_ref = {"secretKeyRef": {"name": "rw-ro-a-env", "key": "mcp-key-memory"}}
    assert memory["env"][-1] == {"name": KEY_ENV, "valueFrom": key_ref}
    (harness,) = spec["containers"]
    assert harness["name"] == HARNESS
    harness_env = {e["name"] for e in harness["env"]}
    assert KEY_ENV not in harness_env and all("mcp-key-" not in json.dumps(e) for e in harness["env"])
    state = {m["name"] for m in memory["volumeMounts"]} - {"suites-cover"}
    assert state == {"mcp-memory-state", "mcp-memory-tmp"}
    assert not state & {m["name"] for m in harness["volumeMounts"]}  # the server's state is not the harness's
    assert all(v["emptyDir"].get("sizeLimit") for v in spec["volumes"] if "emptyDir" in v)


def test_example_rollout_pod_carries_the_sidecars(tmp_path: Path) -> None:
    settings = KubernetesSettings(mcp_config=_config(tmp_path))
    _owner, _secret, pod = example_rollout("reference", settings, "http://proxy:8000", "http://gateway:8001")
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["mcp-memory"]


def test_rollout_pods_without_a_file_are_unchanged() -> None:
    _owner, secret, pod = example_rollout("reference", KubernetesSettings(), "http://proxy:8000", "http://gateway:8001")
    assert "initContainers" not in pod["spec"] and not [k for k in secret["stringData"] if k.startswith("mcp-key-")]


def test_a_shared_server_with_per_rollout_placeholders_is_refused(tmp_path: Path) -> None:
    config = {"mcpServers": {"memory": {"command": "m", "scope": "shared", "args": ["{rollout_dir}/g.jsonl"]}}}
    with pytest.raises(Exception, match="a shared server serves every rollout"):
        render_yaml(KubernetesSettings(), _config(tmp_path, config))


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ("{not json", "cannot read MCP config"),
        (json.dumps({"mcpServers": {"m": {"command": "x", "scope": "all"}}}), "'scope' must be 'rollout' or 'shared'"),
        (json.dumps({"mcpServers": {"m": {"command": "x", "network": True}}}), '"network": true needs'),
    ],
)
def test_cli_bad_file_is_one_line(tmp_path: Path, config: str, says: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(config)
    result = subprocess.run(
        [sys.executable, "-m", "rollwire.app.cli", "k8s", "render", "--mcp-config", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0 and result.stdout == ""
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_cli_renders_the_file(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rollwire.app.cli", "k8s", "render", "--mcp-config", _config(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    kinds = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(result.stdout)]
    assert ("Deployment", "mcp-server-time") in kinds and ("ConfigMap", "rollwire-mcp-servers") in kinds
