"""checkov on what a deployer applies, the stack (``rollwire k8s render``) and one example rollout Pod per adapter
(``rollwire k8s render --rollout-pod``), scanned together as one namespace: zero failures outside ``ALLOWED``. The
stack is rendered with an mcpServers file holding a server of each scope (a shared stdio server, a shared image
that serves HTTP, a rollout-scoped server: a sidecar in every example rollout pod), under the same allow-list.

The allow-list is short and each entry says why; docs/kubernetes.md ("Security scan") repeats it for users.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from rollwire.harness_adapters.registry import BUILTIN
from rollwire.orchestrator.manifests import example_rollout, render_yaml
from rollwire.settings import KubernetesSettings
from tests.deploy.tools import checkov

ALLOWED: dict[str, tuple[str, str]] = {
    # check id: (which objects it is allowed for: "*" every one, "Pod" rollout pods only; why)
    "CKV_K8S_43": ("*", "images by digest: the deployer pins the digests of the images they pushed"),
    "CKV_K8S_35": (
        "*",
        "rollwire's settings and each harness's key are environment variables; their values come from Secrets "
        "by reference (never inline in an object), the Postgres password as a file",
    ),
    "CKV_K8S_15": (
        "Pod",
        "rollout pods pull IfNotPresent (a setting): pulling per pod at tens of pods a second meets registry rate "
        "limits, and the tag names the harness version",
    ),
    "CKV_K8S_8": ("Pod", "a rollout pod serves nothing and runs to completion: no port to probe"),
    "CKV_K8S_9": ("Pod", "a rollout pod serves nothing and runs to completion: no port to probe"),
}


def _scan(folder: Path) -> dict[str, Any]:
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}  # offline: no API
    result = subprocess.run(
        [checkov(), "-d", str(folder), "--framework", "kubernetes", "-o", "json"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert result.stdout.strip(), result.stderr[-2000:]
    report = json.loads(result.stdout)
    return report[0] if isinstance(report, list) else report


MCP_CONFIG = {
    "mcpServers": {
        "memory": {"command": "mcp-server-memory", "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}},
        "time": {"command": "mcp-server-time", "scope": "shared"},
        "search": {"url": "http://127.0.0.1:9000/mcp", "image": "reg.example/search:1.4", "port": 9000},
    }
}


def _write(folder: Path, config: Path) -> None:
    config.write_text(json.dumps(MCP_CONFIG))
    settings = KubernetesSettings(namespace="rollwire", mcp_config=str(config))
    (folder / "stack.yaml").write_text(render_yaml(settings, settings.mcp_config))
    for harness in BUILTIN:
        docs = example_rollout(harness, settings, "http://proxy.rollwire:8000", "http://gateway.rollwire:8001")
        (folder / f"rollout-{harness}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _unexpected(report: dict[str, Any]) -> list[str]:
    out = []
    for check in report["results"]["failed_checks"]:
        scope = ALLOWED.get(check["check_id"], (None, ""))[0]
        kind = check["resource"].split(".")[0]
        if scope != "*" and not (scope == "Pod" and kind == "Pod"):
            out.append(f"{check['check_id']} {check['check_name']}: {check['file_path']} {check['resource']}")
    return out


def test_stack_and_rollout_pods_pass_checkov(tmp_path) -> None:
    scanned_dir = tmp_path / "scan"
    scanned_dir.mkdir()
    _write(scanned_dir, tmp_path / "mcp.json")
    report = _scan(scanned_dir)
    assert report["summary"]["passed"] > 500, report["summary"]
    assert _unexpected(report) == []
    scanned = {check["file_path"].lstrip("/") for check in report["results"]["passed_checks"]}
    assert scanned == {"stack.yaml", *(f"rollout-{harness}.yaml" for harness in BUILTIN)}
    resources = {check["resource"] for check in report["results"]["passed_checks"]}
    assert {
        "Deployment.rollwire.mcp-server-time",
        "Deployment.rollwire.mcp-server-search",
    } <= resources  # the file's servers were scanned


def test_checkov_fails_an_unhardened_pod(tmp_path) -> None:
    """The scan and the allow-list filter catch what they are there for: a root pod with no security context."""
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "rollwire"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "1"]}]},
    }  # fmt: skip
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(pod))
    failed = {line.split()[0] for line in _unexpected(_scan(tmp_path))}
    assert {"CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_38", "CKV_K8S_11", "CKV_K8S_13"} <= failed, failed
