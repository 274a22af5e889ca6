"""How the gateway reaches the mcpServers file's servers on Kubernetes, where it starts none of them itself.

A third-party server runs where the file's cluster keys put it (``placement``): a shared one behind its Service,
called with the rollout's identity in a header; a rollout-scoped one in the rollout's own pod. That pod is read
from the API server by its name (the orchestrator names it after the rollout), and the orchestrator's annotations
on it say whose it is and which port each server listens on: nothing a rollout says decides where its calls go.

Every bridged server answers only its own key, and proves on every answer that it holds it (``placement.proof``
of a nonce the gateway sends): a process that took a sidecar's port after the sidecar stopped (the harness shares
the pod's network) cannot pass for the server.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import httpx2

from rollwire.errors import RollwireError, UpstreamError
from rollwire.mcp_servers.placement import SHARED_PORT, Scope, object_name, proof, require_secret, sidecar_key
from rollwire.mcp_servers.server_config import UpstreamSpec
from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import annotated
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import ROLLOUT_ID_ANNOTATION, pod_name
from rollwire.settings import KubernetesSettings

if TYPE_CHECKING:  # the Kubernetes client loads only where the gateway runs on a cluster
    from kubernetes import client

    from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi

NONCE_HEADER = "X-Rollwire-Nonce"
PROOF_HEADER = "X-Rollwire-Proof"
ENDED_PHASES = ("Succeeded", "Failed")
Address = Callable[[str], Awaitable[tuple[str, dict[str, int]]]]
"""rollout id -> (its pod's IP, server -> port in that pod)."""


def _bearer(key: str) -> tuple[str, str]:
    return ("Authorization", f"Bearer {key}")


def cluster_upstreams(specs: dict[str, UpstreamSpec], namespace: str, secret: str) -> dict[str, UpstreamSpec]:
    """The file's servers as the gateway calls them on a cluster: none with a ``command`` (nothing is started
    here); a rollout-scoped one gets its url and key per rollout (``SidecarRoutes``)."""
    routed: dict[str, UpstreamSpec] = {}
    for name, spec in specs.items():
        placement = spec.cluster
        placement.check(name, spec.command)
        bare = replace(spec, command="", args=(), env=())
        if placement.scope == Scope.REMOTE:
            routed[name] = spec
        elif placement.scope == Scope.ROLLOUT:
            require_secret(secret)  # at start, not at a rollout's first call
            routed[name] = replace(bare, url="", in_rollout_pod=True)
        elif placement.bridged:  # our bridge: it answers its own key, and strips it
            key = sidecar_key(secret, "shared", name)
            url = f"http://{object_name(name)}.{namespace}.svc:{SHARED_PORT}/mcp"
            routed[name] = replace(bare, url=url, headers=(*spec.headers, _bearer(key)), proof_key=key)
        else:  # the image's own server: the user's headers, never a key of ours
            url = f"http://{object_name(name)}.{namespace}.svc:{placement.port}{placement.path}"
            routed[name] = replace(bare, url=url)
    return routed


class SidecarRoutes:
    """A rollout-scoped server's URL and key for one rollout: its pod's address and the server's port there."""

    def __init__(self, address: Address, secret: str, close: Callable[[], Awaitable[None]]) -> None:
        self._address = address
        self._secret = secret
        self.aclose = close

    async def resolve(self, spec: UpstreamSpec, rollout_id: str) -> UpstreamSpec:
        host, ports = await self._address(rollout_id)
        if spec.name not in ports:
            raise UpstreamError(f"rollout {rollout_id}'s pod runs no sidecar for MCP server {spec.name!r}")
        host = f"[{host}]" if ":" in host else host
        key = sidecar_key(self._secret, "rollout", rollout_id, spec.name)
        url = f"http://{host}:{ports[spec.name]}/mcp"
        return replace(spec, url=url, headers=(*spec.headers, _bearer(key)), proof_key=key)


def proving(http: httpx2.AsyncClient, key: str) -> httpx2.AsyncClient:
    """``http`` (the MCP SDK's client: ``httpx2``), sending a fresh nonce with every request and refusing an answer
    without the server's proof."""

    async def ask(request: httpx2.Request) -> None:
        request.headers[NONCE_HEADER] = secrets.token_hex(16)

    async def check(response: httpx2.Response) -> None:
        nonce = response.request.headers.get(NONCE_HEADER, "")
        if response.headers.get(PROOF_HEADER) != proof(key, nonce):
            raise UpstreamError(f"{response.request.url.host}: the MCP server did not prove its key (not the server)")

    http.event_hooks = {"request": [ask], "response": [check]}
    return http


class PodAddresses:
    """A rollout pod's IP and sidecar ports, read from the API server (the gateway's account may get pods only)."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self._api = api
        self._namespace = namespace

    async def __call__(self, rollout_id: str) -> tuple[str, dict[str, int]]:
        name = pod_name(rollout_id)
        try:
            pod = await self._api.call("read_namespaced_pod", name, self._namespace)
        except RollwireError as exc:
            raise UpstreamError(f"rollout {rollout_id}: its pod {name} cannot be read: {exc.message}") from None
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        status = pod.get("status") or {}
        if annotations.get(ROLLOUT_ID_ANNOTATION) != rollout_id:
            raise UpstreamError(f"pod {name} is not rollout {rollout_id}'s")
        if status.get("phase") in ENDED_PHASES or not status.get("podIP"):
            raise UpstreamError(f"rollout {rollout_id}'s pod {name} has no address ({status.get('phase') or 'Pending'})")
        return str(status["podIP"]), {server: port for server, port in annotated(pod).values()}


async def _nothing() -> None:
    return None


async def _no_sidecars(rollout_id: str) -> tuple[str, dict[str, int]]:
    raise UpstreamError(f"rollout {rollout_id}: the deployment's MCP file has no rollout-scoped server")


def kubernetes_routes(
    specs: dict[str, UpstreamSpec], kube: KubernetesSettings, secret: str, api_client: Callable[[], client.ApiClient]
) -> tuple[dict[str, UpstreamSpec], SidecarRoutes]:
    """The gateway's upstreams and sidecar routes on Kubernetes (``GatewaySettings.runtime``). The API client is
    made (``api_client()``) only when some server runs in rollout pods: otherwise the gateway needs no token."""
    routed = cluster_upstreams(specs, kube.namespace, secret)
    if not any(spec.in_rollout_pod for spec in routed.values()):
        return routed, SidecarRoutes(_no_sidecars, secret, _nothing)
    from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi

    api = KubeApi(api_client(), kube)
    return routed, SidecarRoutes(PodAddresses(api, kube.namespace), secret, api.aclose)


__all__ = [
    "NONCE_HEADER",
    "PROOF_HEADER",
    "PodAddresses",
    "SidecarRoutes",
    "cluster_upstreams",
    "kubernetes_routes",
    "proving",
]
