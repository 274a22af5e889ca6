"""Rollout-scoped MCP servers on a real cluster (kubeconfig present): two rollout pods, each with npm's memory server
as a sidecar from the MCP runner image. Rollout A creates an entity; rollout B, started after A ended, reads its own
graph and finds it empty; each pod's server answered before its harness started; a request without the key is
refused. The harness here is a probe that holds its rollout's key (the test gives it; a real harness never has it)
so it can call its sidecar directly; the gateway's routing to the sidecar is shown against kmock
(``tests/mcp_servers/test_gateway_cluster_routes.py``).

    ROLLWIRE_TEST_IMAGE_REGISTRY=REGISTRY pytest tests/orchestrator/test_real_cluster_mcp.py
"""

from __future__ import annotations

import json
import os
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

KUBECONFIG = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
pytestmark = [
    pytest.mark.needs_cluster,
    pytest.mark.skipif(
        not Path(KUBECONFIG).is_file(), reason=f"no kubeconfig at {KUBECONFIG}: no cluster to run against"
    ),
]
NAMESPACE = os.environ.get("ROLLWIRE_TEST_NAMESPACE", "default")
REGISTRY = os.environ.get("ROLLWIRE_TEST_IMAGE_REGISTRY", "")
SIDECAR_PORT = KubernetesSettings().mcp_sidecar_port
PROBE = f"""
import asyncio, os
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
import httpx

URL = "http://127.0.0.1:{SIDECAR_PORT}/mcp"

async def main():
    open_reply = httpx.post(URL, json={{"jsonrpc": "2.0", "id": 1, "method": "ping"}})
    headers = {{"Authorization": "Bearer " + os.environ["PROBE_KEY"]}}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(URL, http_client=http)) as client:
            if os.environ["PROBE_ROLE"] == "write":
                entity = {{"name": "secret-of-a", "entityType": "note", "observations": ["42"]}}
                await client.call_tool("create_entities", {{"entities": [entity]}})
            graph = await client.call_tool("read_graph", {{}})
    text = "".join(getattr(block, "text", "") for block in graph.content)
    open("final_answer.txt", "w").write(f"unkeyed={{open_reply.status_code}} graph={{text}}")

asyncio.run(main())
"""


def _job(rollout_id: str, role: str, secret: str) -> RolloutJob:
    env = {"PROBE_ROLE": role, "PROBE_KEY": sidecar_key(secret, rollout_id)}
    return RolloutJob("rc-mcp", rollout_id, Launch(argv=("python", "-c", PROBE), env=env, image=AGENT_IMAGE), 300.0)


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
    answers = {}
    with anyio.fail_after(900):
        async with KubernetesRuntime(settings, api_client_from_settings(settings)) as runtime:
            for rollout_id, role in ((f"rc-mcp-a-{secret[:6]}", "write"), (f"rc-mcp-b-{secret[:6]}", "read")):
                handle = await runtime.start(_job(rollout_id, role, secret))
                ended = await runtime.wait(handle, 600)
                log = await runtime.logs_tail(handle, 40)
                await runtime.stop(handle)
                assert ended.kind == EndKind.EXITED and ended.exit_code == 0, (ended, log)
                answers[role] = ended.final_answer or ""
            await runtime.delete_run("rc-mcp")
    assert answers["write"].startswith("unkeyed=401 ") and "secret-of-a" in answers["write"]
    assert answers["read"].startswith("unkeyed=401 ") and "secret-of-a" not in answers["read"], answers
