"""How the gateway reaches the mcpServers file's servers on Kubernetes, where it starts none of them itself.

A third-party server runs where the file's cluster keys put it (``placement``): a shared one behind its Service,
called with the rollout's identity in a header; a rollout-scoped one in the rollout's own pod, called at the pod's
address with the rollout's key. The pod's address comes from the API server, read by the pod's name (the
orchestrator names it after the rollout) and checked against the annotation the orchestrator wrote: nothing a
rollout says decides where its calls go.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from rollwire.errors import RollwireError, UpstreamError
from rollwire.mcp_servers.placement import SHARED_PORT, Scope, object_name, sidecar_key, sidecar_ports
from rollwire.mcp_servers.server_config import UpstreamSpec
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import ROLLOUT_ID_ANNOTATION, pod_name
from rollwire.settings import KubernetesSettings

if TYPE_CHECKING:  # the Kubernetes client loads only where the gateway runs on a cluster
    from kubernetes import client

    from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi

ENDED_PHASES = ("Succeeded", "Failed")


def bearer(key: str) -> tuple[str, str]:
    return ("Authorization", f"Bearer {key}")


def cluster_upstreams(specs: dict[str, UpstreamSpec], kube: KubernetesSettings, secret: str) -> dict[str, UpstreamSpec]:
    """The file's servers as the gateway calls them on a cluster: none with a ``command`` (nothing is started
    here); a rollout-scoped one keeps only its sidecar port, its url filled per rollout (``SidecarRoutes``)."""
    namespace = kube.namespace
    ports = sidecar_ports({name: spec.cluster for name, spec in specs.items()}, kube.mcp_sidecar_port)
    routed: dict[str, UpstreamSpec] = {}
    for name, spec in specs.items():
        placement = spec.cluster
        placement.check(name, spec.command)
        if placement.scope == Scope.REMOTE:
            routed[name] = spec
        elif placement.scope == Scope.ROLLOUT:
            sidecar_key(secret, "check")  # refuses an empty secret at start, not at a rollout's first call
            routed[name] = replace(spec, command="", args=(), env=(), url="", sidecar_port=ports[name])
        else:
            host = f"http://{object_name(name)}.{namespace}.svc"
            if placement.bridged:  # our bridge: it answers the deployment's secret, and strips it
                url, headers = f"{host}:{SHARED_PORT}/mcp", (*spec.headers, bearer(secret))
            else:  # the image's own server: the user's headers, never our secret
                url, headers = f"{host}:{placement.port}{placement.path}", spec.headers
            routed[name] = replace(spec, command="", args=(), env=(), url=url, headers=tuple(headers))
    return routed


class SidecarRoutes:
    """A rollout-scoped server's URL and key for one rollout: its pod's address (``address``) and port."""

    def __init__(self, address: Callable[[str], Awaitable[str]], secret: str, close: Callable[[], Awaitable[None]]):
        self._address = address
        self._secret = secret
        self.aclose = close

    async def resolve(self, spec: UpstreamSpec, rollout_id: str) -> UpstreamSpec:
        host = await self._address(rollout_id)
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{spec.sidecar_port}/mcp"
        return replace(spec, url=url, headers=(*spec.headers, bearer(sidecar_key(self._secret, rollout_id))))


class PodAddresses:
    """A rollout pod's IP, read from the API server (the gateway's account may get pods, nothing else)."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self._api = api
        self._namespace = namespace

    async def __call__(self, rollout_id: str) -> str:
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
            raise UpstreamError(
                f"rollout {rollout_id}'s pod {name} has no address ({status.get('phase') or 'Pending'})"
            )
        return str(status["podIP"])


def kubernetes_routes(
    specs: dict[str, UpstreamSpec], kube: KubernetesSettings, secret: str, api_client: client.ApiClient
) -> tuple[dict[str, UpstreamSpec], SidecarRoutes]:
    """The gateway's upstreams and sidecar routes on Kubernetes (``GatewaySettings.runtime``)."""
    from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi

    api = KubeApi(api_client, kube)
    return cluster_upstreams(specs, kube, secret), SidecarRoutes(PodAddresses(api, kube.namespace), secret, api.aclose)


__all__ = ["PodAddresses", "SidecarRoutes", "cluster_upstreams", "kubernetes_routes"]
