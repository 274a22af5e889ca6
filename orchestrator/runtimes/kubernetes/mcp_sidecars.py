"""A rollout pod's MCP servers: each ``"scope": "rollout"`` server of the mcpServers file as a native sidecar.

Native sidecars (init containers with ``restartPolicy: Always``) start in order before the harness, and the
kubelet starts the next container only once a sidecar's startup probe passes: the probe is the bridge's
``/ready``, which answers only after the server answered ``initialize``. So the harness never starts before its
servers do, and the sidecars stop with the pod once the harness has ended.

Each server keeps its state in a volume of its own (``{rollout_dir}``), which no other container mounts. The
harness shares the pod's loopback, so each bridge answers only its own key (``placement.sidecar_key`` of the
rollout and the server), which reaches that sidecar alone through the rollout's Secret; the harness's environment
names only the launch's keys. A sidecar that cannot start (its probe fails, it exits, its image cannot be pulled)
fails the rollout as set-up, naming the server (``pod_spec.sidecar_failure``), with its log read by the runtime.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollwire.harness_adapters.images import in_registry
from rollwire.mcp_servers.placement import Scope, container_name, require_secret, sidecar_key, sidecar_ports
from rollwire.mcp_servers.server_config import RolloutVars, UpstreamSpec, load_upstreams
from rollwire.settings import KubernetesSettings

STATE = "/mcp-state"
"""Where a sidecar's own volume is mounted: its working folder, ``HOME`` and ``{rollout_dir}``."""
KEY_ENV = "ROLLWIRE_MCP_SIDECAR_KEY"
"""The variable the bridge reads its key from (``rollwire mcp bridge --key-env``)."""
SIDECARS_LABEL = "rollwire.dev/mcp-sidecars"
"""Set on rollout pods with MCP sidecars: the NetworkPolicy that lets the gateway reach their ports selects it."""
SERVERS_ANNOTATION = "rollwire.dev/mcp-sidecars"
"""``{container: {"server": name, "port": port}}`` as JSON, on the pod: the orchestrator writes it, and a rollout pod
has no API rights, so the gateway and the verdict read which server listens where from the platform's word."""


@dataclass(frozen=True)
class RolloutServers:
    """The rollout-scoped servers of the deployment's mcpServers file, and their ports in a rollout pod: every
    rollout pod runs all of them (the file is the deployment's list of servers its tasks use)."""

    specs: dict[str, UpstreamSpec] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    secret: str = ""

    @classmethod
    def from_settings(cls, settings: KubernetesSettings) -> RolloutServers:
        """Read (and check) the file named in settings; a bad file or a missing secret is one readable line."""
        every = load_upstreams(settings.mcp_config)
        for name, spec in every.items():
            spec.cluster.check(name, spec.command)
        ours = {name: spec for name, spec in every.items() if spec.cluster.scope == Scope.ROLLOUT}
        if ours:
            require_secret(settings.mcp_sidecar_secret)  # before any pod is made
        ports = sidecar_ports({name: spec.cluster for name, spec in every.items()}, settings.mcp_sidecar_port)
        return cls(ours, ports, settings.mcp_sidecar_secret)


@dataclass(frozen=True)
class Sidecars:
    """What the servers add to one rollout's pod and Secret."""

    containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    secret_data: dict[str, str]
    annotation: str
    """``SERVERS_ANNOTATION``'s value."""


def key_entry(server: str) -> str:
    """The rollout Secret's entry holding one server's key (Secret keys allow the server name's characters)."""
    return f"mcp-key-{server}"


def build_sidecars(
    servers: RolloutServers, rollout_id: str, settings: KubernetesSettings, *, secret: str, security: dict[str, Any],
    covers: list[dict[str, Any]],
) -> Sidecars:  # fmt: skip
    """The sidecar containers, their volumes and keys (no servers: nothing to add). ``secret``: the rollout's
    Secret; ``security``: every rollout container's securityContext; ``covers``: the mounts that hide the task
    suites from every container of a rollout pod."""
    containers: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    keys: dict[str, str] = {}
    placed: dict[str, dict[str, Any]] = {}
    for name in sorted(servers.specs):
        spec = servers.specs[name]
        filled, resources = spec.for_rollout(RolloutVars(rollout_id, STATE)), dict(spec.cluster.resources)
        cname, port = container_name(name), servers.ports[name]
        for volume in (f"{cname}-state", f"{cname}-tmp"):
            volumes.append({"name": volume, "emptyDir": {"sizeLimit": resources["ephemeral-storage"]}})
        keys[key_entry(name)] = sidecar_key(servers.secret, "rollout", rollout_id, name)
        bridge = ["rollwire", "mcp", "bridge", "--host", "0.0.0.0", "--port", str(port), "--path", "/mcp",
                  "--key-env", KEY_ENV, "--cwd", STATE, "--startup-timeout", str(settings.mcp_startup_timeout_s)]  # fmt: skip
        key_ref = {"secretKeyRef": {"name": secret, "key": key_entry(name)}}
        containers.append(
            {
                "name": cname,
                "image": in_registry(spec.cluster.image or settings.mcp_runner_image, settings.image_registry),
                "imagePullPolicy": settings.image_pull_policy,
                "restartPolicy": "Always",
                "command": [*bridge, "--", filled.command, *filled.args],
                "workingDir": STATE,
                "env": [
                    {"name": "HOME", "value": STATE},
                    *({"name": key, "value": value} for key, value in filled.env),
                    {"name": KEY_ENV, "valueFrom": key_ref},
                ],
                "ports": [{"containerPort": port, "name": f"mcp-{port}"}],
                **probes({"httpGet": {"path": "/ready", "port": port}}, settings.mcp_startup_timeout_s),
                "resources": {"requests": resources, "limits": dict(resources)},
                "volumeMounts": [
                    {"name": f"{cname}-state", "mountPath": STATE},
                    {"name": f"{cname}-tmp", "mountPath": "/tmp"},
                    *covers,
                ],
                "securityContext": security,
            }
        )
        placed[cname] = {"server": name, "port": port}
    annotation = json.dumps(placed, sort_keys=True) if placed else ""
    return Sidecars(containers, volumes, keys, annotation)


def probes(check: dict[str, Any], startup_s: int) -> dict[str, Any]:
    """Startup (the server answered initialize: ``/ready``, polled each second), readiness and liveness, each its own
    copy of ``check``."""
    return {
        "startupProbe": {**copy.deepcopy(check), "periodSeconds": 1, "failureThreshold": startup_s},
        "readinessProbe": {**copy.deepcopy(check), "periodSeconds": 10},
        "livenessProbe": {**copy.deepcopy(check), "periodSeconds": 20, "failureThreshold": 3},
    }


def annotated(pod: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """container -> (server, port) as the orchestrator annotated the pod; {} for a pod without sidecars (or a
    malformed annotation, which the orchestrator never writes)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SERVERS_ANNOTATION) or "{}"
    try:
        placed = json.loads(raw)
        return {str(c): (str(v["server"]), int(v["port"])) for c, v in placed.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


__all__ = [
    "KEY_ENV",
    "RolloutServers",
    "SERVERS_ANNOTATION",
    "SIDECARS_LABEL",
    "STATE",
    "Sidecars",
    "annotated",
    "build_sidecars",
    "key_entry",
    "probes",
]
