"""Red team: on Kubernetes the gateway runs no third-party code. A rollout whose task names a stdio server the
gateway knows (declared in a suite file, or handed to it directly) gets no process started on its behalf: the
server's tools are missing (the gateway logs where to declare it instead), and the program never ran (its marker
file is never written)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp import Client

from rollwire.errors import UpstreamError
from rollwire.mcp_servers.gateway.cluster_routes import SidecarRoutes
from rollwire.mcp_servers.server_config import UpstreamSpec
from tests.mcp_servers.env_stack import EnvServers, gateway_stack, result_text


async def _no_pod(rollout_id: str) -> tuple[str, dict[str, int]]:
    raise UpstreamError(f"no pod for {rollout_id}")


async def _nothing() -> None:
    return None


def test_a_stdio_server_is_never_started_by_the_cluster_gateway(
    env_servers: EnvServers, store_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    evil = UpstreamSpec("evil", command=sys.executable, args=("-c", f"open({str(marker)!r}, 'w').write('x')"))
    sidecars = SidecarRoutes(_no_pod, "secret", _nothing)
    # The sandbox off: where a started server would act with the gateway's own rights, so the refusal must come
    # before any sandbox is considered (with it on, a missing bwrap would refuse the server for another reason).
    server, stack = gateway_stack(env_servers, store_url, {"evil": evil}, sidecars, sandbox=False)
    with server:
        token = stack.add_rollout("r-evil", servers=["workspace", "evil"])

        async def scenario() -> tuple[set[str], str]:
            async with Client(stack.mcp_url(token)) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                return names, result_text(await client.call_tool("run", {}))

        names, answer = anyio.run(scenario)
    assert "write_file" in names and "run" not in names  # the env servers still answer; the stdio one never started
    assert "unknown tool 'run'" in answer
    assert not marker.exists()
