"""Rollout-scoped MCP servers on a real cluster (kubeconfig present): two rollout pods at once, each with npm's memory
server as a sidecar from the MCP runner image. Rollout A creates an entity and stays; rollout B reads its own graph
and finds it empty, and A's sidecar, at A's pod address, refuses B's key; each pod's server answered before its
harness started, and a request without a key is refused. The harness here is a probe holding its rollout's key (the
test gives it; a real harness never has it) so that it can call sidecars directly; the gateway's routing to a
sidecar is shown against kmock (``tests/mcp_servers/test_gateway_cluster_routes.py``).

    ROLLWIRE_TEST_IMAGE_REGISTRY=REGISTRY pytest tests/orchestrator/test_real_cluster_mcp.py
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import anyio
import pytest

from rollwire.harness_adapters.base import Launch
from rollwire.harness_adapters.images import AGENT_IMAGE
from rollwire.mcp_servers.placement import sidecar_key
from rollwire.orchestrator.runtimes.base import EndKind, RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from rollwire.settings import KubernetesSettings
from tests.orchestrator.real_cluster import CLUSTER_MARKS, KUBECONFIG, NAMESPACE, REGISTRY
from tests.polling import wait_until_async

pytestmark = CLUSTER_MARKS
PORT = KubernetesSettings().mcp_sidecar_port
PROBE = f"""
import asyncio, os, time
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

OWN = "http://127.0.0.1:{PORT}/mcp"
PING = {{"jsonrpc": "2.0", "id": 1, "method": "ping"}}

async def main():
    key = {{"Authorization": "Bearer " + os.environ["PROBE_KEY"]}}
    found = [f"unkeyed={{httpx.post(OWN, json=PING).status_code}}"]
    if os.environ.get("OTHER_URL"):  # another rollout's sidecar, with this rollout's key
        found.append(f"other={{httpx.post(os.environ['OTHER_URL'], json=PING, headers=key).status_code}}")
    async with create_mcp_http_client(headers=key) as http:
        async with Client(streamable_http_client(OWN, http_client=http)) as client:
            if os.environ["PROBE_ROLE"] == "write":
                entity = {{"name": "secret-of-a", "entityType": "note", "observations": ["42"]}}
                await client.call_tool("create_entities", {{"entities": [entity]}})
            graph = await client.call_tool("read_graph", {{}})
    found.append("graph=" + "".join(getattr(block, "text", "") for block in graph.content))
    print(" ".join(found), flush=True)
    open("final_answer.txt", "w").write(" ".join(found))
    while os.environ["PROBE_ROLE"] == "write":  # A stays up (its sidecar with it) until the test stops it
        time.sleep(1)

asyncio.run(main())
"""


def _job(rollout_id: str, role: str, secret: str, other_url: str = "") -> RolloutJob:
    env = {"PROBE_ROLE": role, "PROBE_KEY": sidecar_key(secret, "rollout", rollout_id, "memory"), "OTHER_URL": other_url}
    return RolloutJob("rc-mcp", rollout_id, Launch(argv=("python", "-c", PROBE), env=env, image=AGENT_IMAGE), 600.0)


@pytest.mark.asyncio
async def test_each_rollout_pod_has_its_own_memory_server(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    memory = {"command": "mcp-server-memory", "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}}
    config.write_text(json.dumps({"mcpServers": {"memory": memory}}))
    secret = secrets.token_hex(16)
    settings = KubernetesSettings(
        namespace=NAMESPACE, kubeconfig=KUBECONFIG, service_account="default", image_registry=REGISTRY,
        mcp_config=str(config), mcp_sidecar_secret=secret,
    )  # fmt: skip
    rollout_a, rollout_b = f"rc-mcp-a-{secret[:6]}", f"rc-mcp-b-{secret[:6]}"
    with anyio.fail_after(900):
        async with KubernetesRuntime(settings, api_client_from_settings(settings)) as runtime:
            a = await runtime.start(_job(rollout_a, "write", secret))
            try:

                async def log_of_a() -> str:
                    return await runtime.logs_tail(a, 5)

                log_a: str = await wait_until_async(
                    log_of_a, "rollout A's probe to write", ok=lambda log: "graph=" in log, timeout_s=600, every_s=2
                )
                pod_a = await runtime.api.call("read_namespaced_pod", a.ref, NAMESPACE)
                other = f"http://{pod_a['status']['podIP']}:{PORT}/mcp"
                b = await runtime.start(_job(rollout_b, "read", secret, other))
                ended_b = await runtime.wait(b, 600)
                log_b = await runtime.logs_tail(b, 40)
                await runtime.stop(b)
            finally:
                await runtime.stop(a)
            await runtime.delete_run("rc-mcp")
    assert "unkeyed=401" in log_a and "secret-of-a" in log_a, log_a
    assert ended_b.kind == EndKind.EXITED and ended_b.exit_code == 0, (ended_b, log_b)
    answer = ended_b.final_answer or ""
    assert "unkeyed=401" in answer and "other=401" in answer, answer  # A's server refuses B's key
    assert "graph=" in answer and "secret-of-a" not in answer, answer
