"""A rollout pod's MCP servers: each ``"scope": "rollout"`` server of the mcpServers file as a native sidecar.

Native sidecars (init containers with ``restartPolicy: Always``) start in order before the harness, and the
kubelet starts the next container only once a sidecar's startup probe passes: the probe is the bridge's
``/ready``, which answers only after the server answered ``initialize``. So the harness never starts before its
servers do, and the sidecars stop with the pod once the harness has ended.

Each server keeps its state in a volume of its own (``{rollout_dir}``), which no other container mounts. The
harness shares the pod's loopback, so the bridge answers only the rollout's key (``placement.sidecar_key``),
which reaches the sidecar containers through the rollout's Secret; the harness's environment names only the
launch's keys. A sidecar that cannot start (its probe fails, it exits, its image cannot be pulled) fails the
rollout as set-up, naming the server (``sidecar_failure``), with its log read by the runtime.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollwire.harness_adapters.images import in_registry
from rollwire.mcp_servers.placement import Scope, container_name, sidecar_key, sidecar_ports
from rollwire.mcp_servers.server_config import RolloutVars, UpstreamSpec, load_upstreams
from rollwire.settings import KubernetesSettings

STATE = "/mcp-state"
"""Where a sidecar's own volume is mounted: its working folder, ``HOME`` and ``{rollout_dir}``."""
KEY_ENV = "ROLLWIRE_MCP_SIDECAR_KEY"
"""The variable the bridge reads its key from (``rollwire mcp bridge --key-env``)."""
KEY_SECRET_KEY = "mcp-sidecar-key"
"""The rollout Secret's entry holding the rollout's sidecar key."""
SIDECARS_LABEL = "rollwire.dev/mcp-sidecars"
"""Set on rollout pods with MCP sidecars: the NetworkPolicy that lets the gateway reach their ports selects it."""
SERVERS_ANNOTATION = "rollwire.dev/mcp-sidecars"
"""container name -> server name, as JSON, on the pod (the orchestrator writes it; a rollout pod has no API rights)."""


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
            sidecar_key(settings.mcp_sidecar_secret, "check")  # refuses an empty secret before any pod is made
        return cls(
            ours,
            sidecar_ports({n: s.cluster for n, s in every.items()}, settings.mcp_sidecar_port),
            settings.mcp_sidecar_secret,
        )


@dataclass(frozen=True)
class Sidecars:
    """What the servers add to one rollout's pod and Secret."""

    containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    secret_data: dict[str, str]
    names: dict[str, str]
    """container name -> server name (to name a server that failed to start)."""


def build_sidecars(
    servers: RolloutServers, rollout_id: str, settings: KubernetesSettings, *, secret: str, security: dict[str, Any],
    covers: list[dict[str, Any]],
) -> Sidecars:  # fmt: skip
    """The sidecar containers, their volumes and the rollout's key (no servers: nothing to add). ``secret``:
    the rollout's Secret; ``security``: every rollout container's securityContext; ``covers``: the mounts that hide
    the task suites from every container of a rollout pod."""
    if not servers.specs:
        return Sidecars([], [], {}, {})
    containers, volumes, mapping = [], [], {}
    for name in sorted(servers.specs):
        spec, placement = servers.specs[name], servers.specs[name].cluster
        filled = spec.for_rollout(RolloutVars(rollout_id, STATE))
        resources = dict(placement.resources)
        cname = container_name(name)
        state = f"{cname}-state"
        tmp = f"{cname}-tmp"
        volumes += [
            {"name": state, "emptyDir": {"sizeLimit": resources["ephemeral-storage"]}},
            {"name": tmp, "emptyDir": {"sizeLimit": resources["ephemeral-storage"]}},
        ]
        port = servers.ports[name]
        env = [
            {"name": "HOME", "value": STATE},
            *({"name": key, "value": value} for key, value in filled.env),
            {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": secret, "key": KEY_SECRET_KEY}}},
        ]
        containers.append(
            {
                "name": cname,
                "image": in_registry(placement.image or settings.mcp_runner_image, settings.image_registry),
                "imagePullPolicy": settings.image_pull_policy,
                "restartPolicy": "Always",
                "command": [
                    "rollwire",
                    "mcp",
                    "bridge",
                    "--host",
                    "0.0.0.0",
                    "--port",
                    str(port),
                    "--path",
                    "/mcp",
                    "--key-env",
                    KEY_ENV,
                    "--cwd",
                    STATE,
                    "--startup-timeout",
                    str(settings.mcp_startup_timeout_s),
                    "--",
                    filled.command,
                    *filled.args,
                ],  # fmt: skip
                "workingDir": STATE,
                "env": env,
                "ports": [{"containerPort": port, "name": f"mcp-{port}"}],
                **probes({"httpGet": {"path": "/ready", "port": port}}, settings.mcp_startup_timeout_s),
                "resources": {"requests": resources, "limits": dict(resources)},
                "volumeMounts": [
                    {"name": state, "mountPath": STATE},
                    {"name": tmp, "mountPath": "/tmp"},
                    *covers,
                ],
                "securityContext": security,
            }
        )
        mapping[cname] = name
    key = sidecar_key(servers.secret, rollout_id)
    return Sidecars(containers, volumes, {KEY_SECRET_KEY: key}, mapping)


def probes(check: dict[str, Any], startup_s: int) -> dict[str, Any]:
    """Startup (the server answered initialize: ``/ready``, polled each second), readiness and liveness, each its own
    copy of ``check``."""
    return {
        "startupProbe": {**copy.deepcopy(check), "periodSeconds": 1, "failureThreshold": startup_s},
        "readinessProbe": {**copy.deepcopy(check), "periodSeconds": 10},
        "livenessProbe": {**copy.deepcopy(check), "periodSeconds": 20, "failureThreshold": 3},
    }


def sidecar_failure(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(container, why) for a sidecar that did not start, from the pod's status (the kubelet's) and the server names
    the orchestrator annotated; None while none has failed. Only before the harness runs: a sidecar the kubelet
    restarts later shows to the harness as failing tool calls."""
    try:
        names = json.loads(((pod.get("metadata") or {}).get("annotations") or {}).get(SERVERS_ANNOTATION) or "{}")
    except ValueError:
        return None
    status = pod.get("status") or {}
    if not isinstance(names, dict) or not names:
        return None
    for harness in status.get("containerStatuses") or []:
        if {"running", "terminated"} & set(harness.get("state") or {}):
            return None
    for container in status.get("initContainerStatuses") or []:
        cname = str(container.get("name") or "")
        if cname not in names:
            continue
        state = container.get("state") or {}
        ended = (container.get("lastState") or {}).get("terminated") or state.get("terminated") or {}
        waiting = (state.get("waiting") or {}).get("reason") or ""
        if int(container.get("restartCount") or 0) > 0 or ended.get("exitCode") or waiting == "CrashLoopBackOff":
            how = (
                f"exit {ended.get('exitCode')} ({ended.get('reason') or 'Error'})" if ended else waiting or "restarted"
            )
            return cname, f"MCP server {names[cname]!r} did not start ({cname}: {how})"
    return None


__all__ = [
    "KEY_ENV",
    "RolloutServers",
    "SERVERS_ANNOTATION",
    "SIDECARS_LABEL",
    "STATE",
    "Sidecars",
    "build_sidecars",
    "probes",
    "sidecar_failure",
]
