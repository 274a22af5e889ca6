"""The cluster objects an mcpServers file adds to the stack (``rollwire k8s render --mcp-config FILE``).

- The file itself, as the ConfigMap the gateway reads it from; the gateway then runs on its ``kubernetes``
  runtime: it starts no server, and reaches each where its scope puts it (``gateway.cluster_routes``).
- Per shared server: a Deployment, a Service and a NetworkPolicy that lets only the gateway in (and, unless the
  entry says ``"network": true``, lets the server out to DNS only). A bridged one runs ``rollwire mcp bridge
  --shared NAME``: it derives its own key from the deployment's secret, and relays nothing of one rollout's
  session to another's (a stdio server cannot tell rollouts apart: it must keep no state of theirs).
- With rollout-scoped servers: the NetworkPolicy that lets the gateway reach the sidecar ports of rollout pods,
  and the gateway's own account, which may read pods (their addresses) and nothing else. The sidecars themselves
  are made per rollout by the orchestrator (``runtimes.kubernetes.mcp_sidecars``) from the same file.
"""

from __future__ import annotations

from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.harness_adapters.images import in_registry
from rollwire.mcp_servers.placement import SHARED_PORT, Scope, object_name, sidecar_ports
from rollwire.mcp_servers.server_config import PLACEHOLDERS, UpstreamSpec
from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import KEY_ENV, SIDECARS_LABEL, STATE, probes
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import MANAGED, container_security, pod_security
from rollwire.settings import KubernetesSettings

CONFIG_MAP = "rollwire-mcp-servers"
CONFIG_DIR = "/etc/rollwire/mcp"
CONFIG_FILE = "mcp.json"
SIDECAR_SECRET = "rollwire-mcp-sidecar"
"""The Secret (key ``key``) the gateway, the orchestrator and the bridges share; the deployer creates it."""
GATEWAY_ACCOUNT = "rollwire-gateway"
COMPONENT = "mcp-server"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the Kubernetes client's in-cluster configuration reads the account's token, CA and namespace."""
_TOKEN_SOURCES = [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {
        "downwardAPI": {
            "items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]
        }
    },
]
"""What automounting would project, projected by hand into the one container that calls the API (a short-lived
token the kubelet renews)."""
_GATEWAY = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}}}
_DNS = {
    "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def _meta(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "rollwire", **(labels or {})}}


def _secret_env(name: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": SIDECAR_SECRET, "key": "key"}}}


def _shared_container(name: str, spec: UpstreamSpec, settings: KubernetesSettings) -> tuple[dict[str, Any], int]:
    """The one container of a shared server's pods, and the port it serves MCP on."""
    placement = spec.cluster
    for text in (*spec.args, *(value for _key, value in spec.env)):
        if any("{" + p + "}" in text for p in PLACEHOLDERS):
            raise InvalidRequest(
                f"MCP server {name!r}: a shared server serves every rollout, so {text!r} has no value to fill; key its "
                'state on the rollout header, or make it "scope": "rollout"'
            )
    resources = dict(placement.resources)
    container: dict[str, Any] = {
        "name": "server",
        "image": in_registry(placement.image or settings.mcp_runner_image, settings.image_registry),
        "imagePullPolicy": "Always",
        "resources": {"requests": resources, "limits": dict(resources)},
        "securityContext": container_security(),
        "volumeMounts": [{"name": "state", "mountPath": STATE}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    if placement.bridged:
        port = SHARED_PORT
        container["command"] = [
            "rollwire", "mcp", "bridge", "--host", "0.0.0.0", "--port", str(port), "--path", "/mcp",
            "--key-env", KEY_ENV, "--shared", name, "--cwd", STATE,
            "--startup-timeout", str(settings.mcp_startup_timeout_s), "--", spec.command, *spec.args,
        ]  # fmt: skip
        container["workingDir"] = STATE
        container["env"] = [
            {"name": "HOME", "value": STATE},
            *({"name": k, "value": v} for k, v in spec.env),
            _secret_env(KEY_ENV),
        ]
        probe: dict[str, Any] = {"httpGet": {"path": "/ready", "port": port}}
    else:
        port = placement.port
        probe = {"tcpSocket": {"port": port}}
    container["ports"] = [{"containerPort": port, "name": "mcp"}]
    container.update(probes(probe, settings.mcp_startup_timeout_s))
    return container, port


def shared_server(name: str, spec: UpstreamSpec, settings: KubernetesSettings) -> list[dict[str, Any]]:
    """Deployment + Service + NetworkPolicy of one shared server."""
    namespace, object_ = settings.namespace, object_name(name)
    labels = {"app.kubernetes.io/name": object_, "rollwire.dev/component": COMPONENT}
    container, port = _shared_container(name, spec, settings)
    size = dict(spec.cluster.resources)["ephemeral-storage"]
    pod = {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security(),
            "containers": [container],
            "volumes": [
                {"name": "state", "emptyDir": {"sizeLimit": size}},
                {"name": "tmp", "emptyDir": {"sizeLimit": size}},
            ],
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(object_, namespace, labels),
        "spec": {"replicas": spec.cluster.replicas, "selector": {"matchLabels": dict(labels)}, "template": pod},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(object_, namespace, labels),
        "spec": {"selector": dict(labels), "ports": [{"name": "mcp", "port": port, "targetPort": port}]},
    }
    policy: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(object_, namespace),
        "spec": {
            "podSelector": {"matchLabels": dict(labels)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [_GATEWAY], "ports": [{"protocol": "TCP", "port": port}]}],
            "egress": [_DNS],
        },
    }
    if spec.cluster.network:  # its entry lets it reach beyond the cluster's rollwire services
        policy["spec"]["policyTypes"] = ["Ingress"]
        del policy["spec"]["egress"]
    return [deployment, service, policy]


def _gateway_account(namespace: str) -> list[dict[str, Any]]:
    """The gateway's account: get pods (a rollout pod's address), nothing else."""
    role = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(GATEWAY_ACCOUNT, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(GATEWAY_ACCOUNT, namespace),
         "rules": [role]},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(GATEWAY_ACCOUNT, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GATEWAY_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": GATEWAY_ACCOUNT, "namespace": namespace}],
        },
    ]  # fmt: skip


def _sidecar_policy(namespace: str, ports: list[int]) -> dict[str, Any]:
    """The gateway may reach a rollout pod's MCP sidecars (and nothing else of it: the harness serves nothing)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("rollwire-rollout-mcp-sidecars", namespace),
        "spec": {
            "podSelector": {
                "matchLabels": {"rollwire.dev/component": MANAGED["rollwire.dev/component"], SIDECARS_LABEL: "true"}
            },
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [_GATEWAY], "ports": [{"protocol": "TCP", "port": port} for port in ports]}],
        },
    }


def _configure_gateway(gateway: dict[str, Any], namespace: str, secret: bool, account: bool) -> None:
    """The gateway reads the file from its ConfigMap and runs on its kubernetes runtime."""
    pod = gateway["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["env"] = [
        *container.get("env", []),
        {"name": "ROLLWIRE_MCP__GATEWAY__UPSTREAMS_FILE", "value": f"{CONFIG_DIR}/{CONFIG_FILE}"},
        {"name": "ROLLWIRE_MCP__GATEWAY__RUNTIME", "value": "kubernetes"},
        {"name": "ROLLWIRE_ORCHESTRATOR__KUBERNETES__NAMESPACE", "value": namespace},
        *([_secret_env("ROLLWIRE_MCP__GATEWAY__SIDECAR_SECRET")] if secret else []),
    ]
    mounts = [{"name": "mcp-config", "mountPath": CONFIG_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "mcp-config", "configMap": {"name": CONFIG_MAP}}]
    if account:  # the token in the gateway container only, where the client looks for it (automount stays off)
        pod["serviceAccountName"] = GATEWAY_ACCOUNT
        mounts.append({"name": "api-token", "mountPath": TOKEN_DIR, "readOnly": True})
        volumes.append({"name": "api-token", "projected": {"sources": _TOKEN_SOURCES}})
    container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]
    pod["volumes"] = [*pod.get("volumes", []), *volumes]


def mcp_objects(
    specs: dict[str, UpstreamSpec], raw: str, settings: KubernetesSettings, stack: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The objects the file adds, with the stack's gateway Deployment (in ``stack``) set to use them."""
    namespace = settings.namespace
    for name, spec in specs.items():
        spec.cluster.check(name, spec.command)
    config_map = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(CONFIG_MAP, namespace),
        "data": {CONFIG_FILE: raw},
    }  # fmt: skip
    objects: list[dict[str, Any]] = [config_map]
    for name in sorted(specs):
        if specs[name].cluster.scope == Scope.SHARED:
            objects += shared_server(name, specs[name], settings)
    ports = sidecar_ports({name: spec.cluster for name, spec in specs.items()}, settings.mcp_sidecar_port)
    if ports:
        objects += [*_gateway_account(namespace), _sidecar_policy(namespace, sorted(ports.values()))]
    keyed = bool(ports) or any(s.cluster.scope == Scope.SHARED and s.cluster.bridged for s in specs.values())
    gateways = [d for d in stack if d["kind"] == "Deployment" and d["metadata"]["name"] == "gateway"]
    if not gateways:
        raise InvalidRequest("the stack has no gateway Deployment to give the MCP config to")
    _configure_gateway(gateways[0], namespace, keyed, bool(ports))
    return objects


__all__ = ["CONFIG_MAP", "SIDECAR_SECRET", "mcp_objects", "shared_server"]
