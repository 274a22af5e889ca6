"""One rollout cannot exhaust shared resources: the gateway's tool-call budget is kept in the store (a restarted
gateway goes on counting), tool results over the cap are cut and recorded as truncated, sqldb bounds its file,
any one value and a query's result bytes, and a workspace has a disk quota."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError

from rollwire.app.serving import ServerThread
from rollwire.mcp_servers.envs.app import SERVERS, build_app, runtime
from rollwire.mcp_servers.envs.sqldb import run_sql
from rollwire.mcp_servers.gateway.server import build_gateway_app
from rollwire.mcp_servers.tasks.schema import ToolCall
from rollwire.mcp_servers.tasks.solve import play
from rollwire.settings import GatewaySettings, McpSettings
from tests.mcp_servers.env_stack import ENV_SECRET, EnvServers, gateway_stack, result_text


def test_tool_call_budget_survives_a_gateway_restart(env_servers: EnvServers, store_url: str) -> None:
    server, stack = gateway_stack(env_servers, store_url)
    token = stack.add_rollout("budgeted", "tiny:write-cat", budgets={"tool_calls": 2})

    async def calls(url: str, count: int) -> list[bool]:
        async with Client(url) as client:
            return [
                bool((await client.call_tool("write_file", {"path": "answer.txt", "content": f"w{i}"})).is_error)
                for i in range(count)
            ]

    with server:
        assert anyio.run(calls, stack.mcp_url(token), 1) == [False]
    settings = GatewaySettings(env_url=env_servers.url, env_secret=ENV_SECRET)
    with ServerThread(build_gateway_app(settings, stack.engine)) as restarted:  # a fresh process state
        assert anyio.run(calls, f"{restarted.url}/r/{token}/mcp", 2) == [False, True]
    assert len(stack.events("budgeted")) == 2
    assert [r.kind for r in stack.refusals("budgeted")] == ["tool_calls"]


def test_big_tool_results_are_cut_and_marked(env_servers: EnvServers, store_url: str) -> None:
    server, stack = gateway_stack(env_servers, store_url, max_result_bytes=2_000)
    token = stack.add_rollout("bigread", servers=["workspace"])

    async def scenario() -> str:
        async with Client(stack.mcp_url(token)) as client:
            await client.call_tool("write_file", {"path": "big.txt", "content": "z" * 15_000})
            return result_text(await client.call_tool("read_file", {"path": "big.txt"}))

    with server:
        text = anyio.run(scenario)
    assert len(text.encode()) < 2_000 and "truncated by the gateway" in text
    write, read = stack.events("bigread")
    assert not write.truncated and read.truncated and read.result_bytes > 15_000
    assert len(read.result_json) < 2_500  # the stored row is cut as well


def test_sqldb_bounds_its_file_values_and_results(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    run_sql(db, "CREATE TABLE t (b BLOB)")
    rows = run_sql(
        db,
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 150) SELECT x, printf('%.1000c', 'a') FROM c",
        max_result_bytes=10_000,
    )
    assert rows["truncated"] and 5 <= len(rows["rows"]) <= 10
    with pytest.raises(ToolError, match="too big"):
        run_sql(db, "SELECT randomblob(5000000)", max_result_bytes=1_000_000)
    with pytest.raises(ToolError, match="at most 300000 bytes"):
        for _ in range(200):
            run_sql(db, "INSERT INTO t SELECT randomblob(20000)", max_bytes=300_000)
    assert db.stat().st_size <= 300_000 + 64_000


def test_a_workspace_has_a_disk_quota(tmp_path: Path) -> None:
    settings = McpSettings(max_payload_bytes=20_000, workspace_quota_bytes=30_000)
    env = runtime(settings, tmp_path, None)
    app = build_app(list(SERVERS), env, settings.allowed_hosts, 1_000_000, secret=ENV_SECRET)

    def write(path: str, size: int) -> dict[str, object]:
        call = ToolCall(server="workspace", tool="write_file", arguments={"path": path, "content": "q" * size})
        return anyio.run(play, [call], lambda name: f"{server.url}/{name}/mcp", "quota", None, ENV_SECRET)[0]

    with ServerThread(app) as server:
        assert not write("a.txt", 20_000)["is_error"]
        refused = write("b.txt", 15_000)
        assert refused["is_error"] and "quota is 30000 bytes" in str(refused["text"])
        assert not write("a.txt", 19_000)["is_error"]  # replacing a file counts its new size only
        assert not write("b.txt", 10_000)["is_error"]
    files = (tmp_path / "mcp_state" / "quota" / "workspace").iterdir()
    assert sum(p.stat().st_size for p in files) <= 30_000
