"""The rendered stack, fitted to a small test cluster, plus the two pods the end-to-end suite runs in it.

What changes from ``rollwire k8s render`` (and why): vLLM becomes the bundled CPU engine serving the tiny
model from the stack image (no GPU needed), the GPU trainer Job is left out, every workload gets one replica and
small requests, Postgres a 1 GiB volume, and the env servers a volume for their per-rollout state that the
orchestrator Job mounts too (the suite's checkers read it; the same node, so a ReadWriteOnce volume serves).
Security contexts, probes and NetworkPolicies stay exactly as rendered: they are what the suite checks.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

from rollwire.harness_adapters.images import STACK_IMAGE, in_registry
from rollwire.orchestrator.manifests import render
from rollwire.settings import KubernetesSettings

STATE = "/var/lib/rollwire/mcp_state"
SMALL = {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}}


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["template"]["spec"])


def stack(namespace: str, registry: str) -> list[dict[str, Any]]:
    """Every object to apply, in order: the rendered stack fitted as the module docstring says, plus the state PVC."""
    docs = []
    for doc in render(KubernetesSettings(namespace=namespace, image_registry=registry)):
        name = doc["metadata"]["name"]
        if doc["kind"] == "Job":  # the GPU trainer
            continue
        if doc["kind"] in ("Deployment", "StatefulSet"):
            doc["spec"]["replicas"] = 1
            pod = doc["spec"]["template"]["spec"]
            for container in pod["containers"]:
                container["resources"] = copy.deepcopy(SMALL)
            if name == "vllm":
                pod.pop("nodeSelector", None)
                pod.pop("tolerations", None)
                engine = pod["containers"][0]
                engine["image"] = in_registry(STACK_IMAGE, registry)
                engine.pop("args", None)
                engine["command"] = ["rollwire", "engine", "--host", "0.0.0.0", "--port", "8100"]
                engine["env"] = [{"name": "HOME", "value": "/home/vllm"}]
            if name == "mcp-envs":
                pod["containers"][0]["env"].append({"name": "ROLLWIRE_MCP__STATE_DIR", "value": STATE})
                pod["containers"][0]["volumeMounts"].append({"name": "state", "mountPath": STATE})
                pod["volumes"].append({"name": "state", "persistentVolumeClaim": {"claimName": "mcp-state"}})
        if doc["kind"] == "StatefulSet":
            doc["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "1Gi"
        docs.append(doc)
    docs.append(
        {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "mcp-state", "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    )  # fmt: skip
    return docs


def secrets_for(namespace: str) -> list[dict[str, Any]]:
    """The three Secrets docs/kubernetes.md has a user create, with random values."""
    password = secrets.token_hex(16)
    url = f"postgresql+psycopg://rollwire:{password}@postgres:5432/rollwire"
    values = {
        "rollwire-store": {"password": password, "url": url},
        "rollwire-operator": {"key": secrets.token_hex(24)},
        "rollwire-env": {"secret": secrets.token_hex(24)},
    }
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "stringData": data}
        for name, data in values.items()
    ]


def orchestrator_job(namespace: str, registry: str, suite: str, group_size: int) -> dict[str, Any]:
    """``rollwire rollouts --runtime kubernetes`` in the cluster, as the orchestrator account, beside the env state."""
    proxy_deployment = (doc for doc in render(KubernetesSettings(namespace=namespace)) if doc["kind"] == "Deployment")
    pod = _pod(next(doc for doc in proxy_deployment if doc["metadata"]["name"] == "proxy"))
    container = pod["containers"][0]
    proxy, gateway = f"http://proxy.{namespace}:8000", f"http://gateway.{namespace}:8001"
    container.update(
        name="orchestrator",
        image=in_registry(STACK_IMAGE, registry),
        command=[
            "rollwire", "rollouts", "--runtime", "kubernetes", "--suite", suite, "--harness", "reference",
            "--group-size", str(group_size), "--concurrency", "2", "--deadline", "300",
            "--proxy-url", proxy, "--gateway-url", gateway, "--state-dir", STATE,
        ],
        resources=copy.deepcopy(SMALL),
    )  # fmt: skip
    for probe in ("readinessProbe", "livenessProbe"):
        container.pop(probe, None)
    container.pop("ports", None)
    container["env"] = [
        *(env for env in container["env"] if env["name"] == "ROLLWIRE_STORE__URL"),
        {"name": "ROLLWIRE_ORCHESTRATOR__KUBERNETES__NAMESPACE", "value": namespace},
        {"name": "ROLLWIRE_ORCHESTRATOR__KUBERNETES__IMAGE_REGISTRY", "value": registry},
    ]
    container["volumeMounts"].append({"name": "state", "mountPath": STATE, "readOnly": True})
    pod["volumes"].append({"name": "state", "persistentVolumeClaim": {"claimName": "mcp-state", "readOnly": True}})
    pod.update(serviceAccountName="rollwire-orchestrator", automountServiceAccountToken=True, restartPolicy="Never")
    pod["affinity"] = {  # the state volume is ReadWriteOnce: beside the env server that writes it
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "mcp-envs"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rollouts", "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app.kubernetes.io/name": "orchestrator"}}, "spec": pod}},
    }  # fmt: skip


PROBE = """
try() { if wget -q -T 5 -O /dev/null "$2" 2>/dev/null; then echo "$1=reached"; else echo "$1=refused"; fi; }
try proxy http://proxy:8000/health
try proxy-admin http://proxy:8090/health
try envs http://mcp-envs:8002/health
try engine http://vllm:8100/health
try internet "$INTERNET_URL"
"""


def probe_pod(namespace: str, internet_url: str) -> dict[str, Any]:
    """A pod labelled as a rollout (so the rollout NetworkPolicy applies) that tries each address once and says how."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "egress-probe", "namespace": namespace,
            "labels": {"rollwire.dev/component": "rollout", "rollwire.dev/probe": "egress"},
        },
        "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False, "serviceAccountName": "rollwire-rollout",
            "containers": [{
                "name": "probe", "image": "busybox:1.36", "command": ["sh", "-c", PROBE],
                "env": [{"name": "INTERNET_URL", "value": internet_url}],
                "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 10001,
                                    "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True},
            }],
        },
    }  # fmt: skip


__all__ = ["orchestrator_job", "probe_pod", "secrets_for", "stack"]
