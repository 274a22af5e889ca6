"""Where an MCP server of the ``mcpServers`` file runs on Kubernetes: the file's cluster keys, read and checked once.

One file drives both runtimes. On one machine the gateway starts a stdio server per rollout in a sandbox; on a
cluster the gateway runs no third-party code, so every server of the file needs a home of its own:

- ``"scope": "rollout"`` (the default for a stdio server: most keep state) puts the server in each rollout's pod,
  as a sidecar behind ``rollwire mcp bridge``, with its state in the pod's own volume. The harness shares that
  pod's loopback, so the bridge answers only the rollout's key (``sidecar_key``), which the gateway and the
  sidecar hold and the harness does not. A server that serves HTTP itself could not be fenced that way, so it
  cannot be ``rollout``-scoped.
- ``"scope": "shared"`` runs one Deployment + Service for every rollout, reached only by the gateway
  (NetworkPolicy), which sends the rollout's identity in a header (as on one machine). A stdio server is bridged;
  an image that serves streamable HTTP itself is written as its local ``url`` plus its ``image`` and ``port``:
  on one machine the gateway calls the url, on a cluster the image's Service.
- a ``url`` server without an ``image`` is somebody else's endpoint: the gateway calls it as it is.

A stdio server runs in ``image`` with ``rollwire mcp bridge`` in front, so the image holds rollwire: the MCP
runner image (``harness_adapters.images.MCP_RUNNER_IMAGE``: rollwire without the task suites, Node, and pinned
npm/PyPI servers) by default, or one built from it. ``resources`` sets requests = limits of the server's container.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from rollwire.errors import InvalidRequest

CLUSTER_KEYS = ("scope", "image", "port", "path", "resources", "replicas")
"""The keys of an ``mcpServers`` entry that only a cluster reads (the local runtime ignores them)."""
SHARED_PORT = 8000
"""The port a shared server's bridge listens on (an image that serves HTTP itself names its own)."""
FETCHERS = frozenset({"npx", "uvx", "pipx", "bunx"})
"""Commands that fetch a package at start: on a cluster a server's container has no network to fetch with."""
DEFAULT_RESOURCES = (("cpu", "250m"), ("ephemeral-storage", "256Mi"), ("memory", "256Mi"))
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
_QUANTITY = re.compile(r"^[0-9]*[1-9][0-9]*(\.[0-9]+)?(m|[KMGTPE]i|[kMGTPE])?$")
_KEY_LABEL = b"rollwire-mcp-sidecar\0"


class Scope(StrEnum):
    ROLLOUT = "rollout"
    """One instance in each rollout's pod: state no other rollout can see."""
    SHARED = "shared"
    """One Deployment for all rollouts: stateless, or keyed on the rollout header."""
    REMOTE = "remote"
    """A ``url`` server: not deployed by rollwire."""


@dataclass(frozen=True)
class Placement:
    """How one server is deployed on a cluster."""

    scope: Scope
    image: str = ""
    """The container image; '' means the MCP runner image."""
    port: int = 0
    """Where an image that serves streamable HTTP itself listens; 0 for a bridged stdio server."""
    path: str = "/mcp"
    resources: tuple[tuple[str, str], ...] = DEFAULT_RESOURCES
    replicas: int = 1
    network: bool = False
    """The entry's ``"network": true``: the server reaches beyond the cluster's rollwire services."""

    @property
    def bridged(self) -> bool:
        """A stdio server, served over HTTP by ``rollwire mcp bridge`` in its container."""
        return self.port == 0

    @classmethod
    def from_dict(cls, name: str, raw: dict[str, Any]) -> Placement:
        """The cluster keys of one ``mcpServers`` entry (already known to have ``command`` xor ``url``)."""
        where = f"MCP server {name!r}"
        image = raw.get("image", "")
        if not isinstance(image, str) or (image and not image.strip()) or any(c.isspace() for c in image):
            raise InvalidRequest(f"{where}: 'image' must be an image reference without spaces")
        url = str(raw.get("url") or "")
        if url and not image:
            given = [key for key in CLUSTER_KEYS if key in raw]
            if given:
                raise InvalidRequest(
                    f"{where}: a 'url' server without an 'image' is reached where it runs, so the cluster keys "
                    f"{', '.join(map(repr, given))} do not apply"
                )
            return cls(Scope.REMOTE)
        scope = raw.get("scope", Scope.SHARED.value if url else Scope.ROLLOUT.value)
        if scope not in (Scope.ROLLOUT, Scope.SHARED):
            raise InvalidRequest(f"{where}: 'scope' must be 'rollout' or 'shared', not {scope!r}")
        port = raw.get("port", 0)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise InvalidRequest(f"{where}: 'port' must be a port number (where the image serves streamable HTTP)")
        if url and not port:
            raise InvalidRequest(
                f"{where}: an 'image' that serves HTTP (its local 'url') needs the 'port' it listens on"
            )
        if port and not url:
            raise InvalidRequest(
                f"{where}: 'port' is for an image that serves HTTP itself: give its local 'url' with its 'image' and "
                "'port' (and no 'command'); a stdio server's bridge takes its own port"
            )
        if url and scope == Scope.ROLLOUT:
            raise InvalidRequest(
                f"{where}: a server that serves HTTP itself would be open to the harness in the rollout's pod; "
                'it runs as "scope": "shared" (or run its stdio form per rollout)'
            )
        path = raw.get("path", urlsplit(url).path or "/mcp")
        if not isinstance(path, str) or not path.startswith("/") or any(c.isspace() for c in path):
            raise InvalidRequest(f"{where}: 'path' must start with '/' (default '/mcp')")
        replicas = raw.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise InvalidRequest(f"{where}: 'replicas' must be a whole number of at least 1")
        if replicas != 1 and scope == Scope.ROLLOUT:
            raise InvalidRequest(f"{where}: 'replicas' is for shared servers; a rollout-scoped one has one per rollout")
        resources = _resources(where, raw.get("resources"))
        return cls(Scope(scope), image, port, path, resources, replicas, bool(raw.get("network", False)))

    def check(self, name: str, command: str = "") -> None:
        """What a cluster cannot give this server (run by ``command``), as one readable line (the local runtime
        can: it is not asked)."""
        fetcher = command.rsplit("/", 1)[-1]
        if fetcher in FETCHERS and not self.network:
            raise InvalidRequest(
                f"MCP server {name!r}: {fetcher} would download the server each time its container starts, and it has "
                "no network there; install it in its image (one built FROM the MCP runner image) and name its command"
            )
        if self.scope == Scope.ROLLOUT and self.network:
            raise InvalidRequest(
                f"MCP server {name!r}: a rollout-scoped server shares the rollout pod's network, which reaches only "
                'the proxy and the gateway; "network": true needs "scope": "shared" on Kubernetes'
            )


def _resources(where: str, raw: Any) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return DEFAULT_RESOURCES
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where}: 'resources' must map cpu, memory, ephemeral-storage to quantities")
    amounts = dict(DEFAULT_RESOURCES)
    for key, value in raw.items():
        if key not in RESOURCE_NAMES:
            raise InvalidRequest(f"{where}: resource {key!r} is not one of {', '.join(RESOURCE_NAMES)}")
        if not isinstance(value, str | int) or isinstance(value, bool) or not _QUANTITY.match(str(value)):
            raise InvalidRequest(
                f"{where}: resource {key!r} must be a quantity such as '500m' or '512Mi', not {value!r}"
            )
        amounts[key] = str(value)
    return tuple(sorted(amounts.items()))


def _dns_label(server: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", server.lower())


def object_name(server: str) -> str:
    """The DNS-1035 name of a shared server's Deployment, Service and NetworkPolicy (``mcp-server-<server>``, lower
    case: a prefix none of the stack's own objects has, so no server can take one's name or labels)."""
    return f"mcp-server-{_dns_label(server)}"[:63].rstrip("-")


def container_name(server: str) -> str:
    """The name of a server's sidecar container in a rollout pod (``mcp-<server>``)."""
    return f"mcp-{_dns_label(server)}"[:63].rstrip("-")


def check_names(servers: list[str]) -> None:
    """Two servers whose names map to one Kubernetes name would overwrite each other: refused, with both names."""
    seen: dict[str, str] = {}
    for server in servers:
        other = seen.setdefault(container_name(server), server)
        if other != server:
            raise InvalidRequest(
                f"MCP servers {other!r} and {server!r} both become {container_name(server)!r} on Kubernetes"
            )


def sidecar_ports(servers: dict[str, Placement], first: int) -> dict[str, int]:
    """Each rollout-scoped server's port in the rollout pod, from ``first`` in name order: the gateway and the
    orchestrator read the same file and settings, and so agree without telling each other."""
    ours = sorted(name for name, placement in servers.items() if placement.scope == Scope.ROLLOUT)
    return {name: first + index for index, name in enumerate(ours)}


def require_secret(secret: str) -> str:
    """``secret``, or one readable line saying which setting holds it: checked where a process starts, before it
    makes a pod or takes a call."""
    if not secret:
        raise InvalidRequest(
            "bridged MCP servers on Kubernetes need the deployment's sidecar secret (the rollwire-mcp-sidecar Secret: "
            "the gateway's sidecar_secret and the orchestrator's mcp_sidecar_secret settings)"
        )
    return secret


def sidecar_key(secret: str, *scope: str) -> str:
    """The key one bridged server answers to: an HMAC of the deployment's sidecar secret and its ``scope``,
    (``"rollout", <rollout id>, <server>``, or ``"shared", <server>``). The gateway derives any of them; one
    server's key opens no other server, in its own rollout or another."""
    key = require_secret(secret).encode()
    return hmac.new(key, _KEY_LABEL + "\0".join(scope).encode(), hashlib.sha256).hexdigest()


def proof(key: str, nonce: str) -> str:
    """What a bridge answers to the gateway's nonce: it holds the key, so it is the server the gateway meant (a
    process that took its port after it stopped does not)."""
    return hmac.new(key.encode(), b"rollwire-mcp-proof\0" + nonce.encode(), hashlib.sha256).hexdigest()


__all__ = [
    "CLUSTER_KEYS",
    "Placement",
    "SHARED_PORT",
    "Scope",
    "check_names",
    "container_name",
    "object_name",
    "proof",
    "require_secret",
    "sidecar_key",
    "sidecar_ports",
]
