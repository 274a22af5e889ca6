"""The gateway on its ``kubernetes`` runtime routes each rollout's calls to the memory server in that rollout's own
pod. The API server is kmock's (``fake_cluster``); each "pod" is a real ``rollwire mcp bridge`` running npm's
memory server, bound on a loopback address of its own (127.0.0.2 for rollout A, 127.0.0.3 for B) that the pod's
status names; the gateway is the real app and the client the official ``mcp`` SDK. Rollout A's entity is in A's
server only; rollout B, through the same gateway, reads an empty graph; every call is recorded; and a pod whose
annotation names another rollout is never called (the pod's address is the platform's word, not the rollout's)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from mcp import Client

from rollwire.mcp_servers.gateway.cluster_routes import kubernetes_routes
from rollwire.mcp_servers.placement import sidecar_key
from rollwire.mcp_servers.server_config import parse_servers
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import ROLLOUT_ID_ANNOTATION, pod_name
from rollwire.settings import KubernetesSettings
from tests.mcp_servers.env_stack import EnvServers, gateway_stack, result_text
from tests.mcp_servers.npm_servers import npm_server
from tests.orchestrator.fake_cluster import NAMESPACE, fake_cluster

SECRET = "deployment-sidecar-secret"
HOSTS = {"ra": "127.0.0.2", "rb": "127.0.0.3"}


def _free_port() -> int:
    """A port free on both pod addresses (each bridge binds its own address, as each pod has its own IP)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((HOSTS["ra"], 0))
            port = probe.getsockname()[1]
            with socket.socket() as other:
                try:
                    other.bind((HOSTS["rb"], port))
                except OSError:
                    continue
            return int(port)
    raise AssertionError("no port free on both loopback addresses")


@contextmanager
def _bridge(host: str, port: int, rollout: str, folder: Path) -> Iterator[subprocess.Popen[str]]:
    """One rollout pod's sidecar: the bridge and the memory server, keyed to the rollout, until the block ends."""
    folder.mkdir()
    env = {**os.environ, "KEY": sidecar_key(SECRET, rollout), "MEMORY_FILE_PATH": str(folder / "graph.jsonl")}
    command = [sys.executable, "-m", "rollwire.app.cli", "mcp", "bridge", "--host", host, "--port", str(port),
               "--key-env", "KEY", "--cwd", str(folder), "--", npm_server("mcp-server-memory")]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None and process.stderr is not None
        lines = iter(process.stdout.readline, "")
        ready = next((line for line in lines if line.startswith("bridge ready on ")), "")  # initialize answered
        assert ready, process.stderr.read()
        yield process
    finally:
        process.terminate()
        process.communicate(timeout=30)


async def _pod(api_url: str, rollout: str, named_as: str, ip: str) -> None:
    """A running rollout pod as the orchestrator makes it (named after its rollout, annotated) with its address."""
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(rollout), "namespace": NAMESPACE, "annotations": {ROLLOUT_ID_ANNOTATION: named_as}},
        "spec": {"containers": [{"name": "harness", "image": "img/hang"}]},
    }  # fmt: skip
    status = {"status": {"phase": "Running", "podIP": ip}}
    async with httpx.AsyncClient(base_url=api_url) as http:
        (await http.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=body)).raise_for_status()
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name(rollout)}/status"
        reply = await http.patch(path, json=status, headers={"Content-Type": "application/merge-patch+json"})
        reply.raise_for_status()


@pytest.mark.asyncio
async def test_each_rollout_reaches_the_server_in_its_own_pod(
    env_servers: EnvServers, store_url: str, tmp_path: Path
) -> None:
    port = _free_port()
    kube = KubernetesSettings(namespace=NAMESPACE, mcp_sidecar_port=port, api_backoff_s=0.01)
    specs = parse_servers({"mcpServers": {"memory": {"command": "mcp-server-memory"}}}, "test")
    async with fake_cluster() as (_api, api_url, _kubelet):
        for rollout, ip in HOSTS.items():
            await _pod(api_url, rollout, rollout, ip)
        await _pod(api_url, "rc", "ra", "127.0.0.2")  # a pod that says it is rollout A's: rollout C is not routed to A
        routed, sidecars = kubernetes_routes(specs, kube, SECRET, api_client_from_settings(kube, host=api_url))
        assert routed["memory"].command == "" and routed["memory"].sidecar_port == port  # the gateway starts nothing
        server, stack = gateway_stack(env_servers, store_url, routed, sidecars, connect_timeout_s=20.0)
        with _bridge(HOSTS["ra"], port, "ra", tmp_path / "a"), _bridge(HOSTS["rb"], port, "rb", tmp_path / "b"), server:
            tokens = {rollout: stack.add_rollout(rollout, servers=["memory"]) for rollout in ("ra", "rb", "rc")}

            async def use(rollout: str, write: bool) -> tuple[set[str], str]:
                async with Client(stack.mcp_url(tokens[rollout])) as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    if write:
                        entity = {"name": "secret-of-a", "entityType": "note", "observations": ["42"]}
                        await client.call_tool("create_entities", {"entities": [entity]})
                    graph = result_text(await client.call_tool("read_graph", {}))
                return names, graph

            names_a, graph_a = await use("ra", write=True)
            names_b, graph_b = await use("rb", write=False)
            names_c, graph_c = await use("rc", write=False)
    assert {"create_entities", "read_graph"} <= names_a and {"create_entities", "read_graph"} <= names_b
    assert "secret-of-a" in graph_a and "secret-of-a" not in graph_b
    assert "secret-of-a" in (tmp_path / "a" / "graph.jsonl").read_text()
    assert (
        not (tmp_path / "b" / "graph.jsonl").exists()
        or "secret-of-a" not in (tmp_path / "b" / "graph.jsonl").read_text()
    )
    assert "read_graph" not in names_c and "unknown tool" in graph_c  # its pod is not rollout C's: never called
    assert [(e.server, e.tool) for e in stack.events("ra")] == [("memory", "create_entities"), ("memory", "read_graph")]
    assert [(e.server, e.tool) for e in stack.events("rb")] == [("memory", "read_graph")]
    assert stack.events("rc") == [] and [(r.kind, r.target) for r in stack.refusals("rc")] == [
        ("unknown_tool", "read_graph")
    ]
    assert json.loads(stack.events("rb")[0].result_json)  # recorded as any other tool result
