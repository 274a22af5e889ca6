"""Must-show 3 and 1 (HTTP): servers are declared as harness users write them (``{"mcpServers": ...}``) in an
``--mcp-config`` file and in a suite; a name nobody declared fails at suite load (``rollwire mcp suites``) and, for a
rollout, with a clear message; an HTTP upstream learns which rollout calls from a header."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer

from rollwire.app.cli.__main__ import main
from rollwire.app.serving import ServerThread
from rollwire.mcp_servers.envs.app import security
from rollwire.mcp_servers.server_config import load_upstreams
from rollwire.mcp_servers.state import ROLLOUT_HEADER
from tests.mcp_servers.env_stack import EnvServers, gateway_stack, result_text
from tests.mcp_servers.npm_servers import npm_server


def _suite(tmp_path: Path, servers: list[str], mcp_servers: dict[str, object]) -> Path:
    path = tmp_path / "mine.json"
    task = {
        "id": "remember", "instruction": "Remember the colour.", "servers": servers, "split": "train",
        "checker": [{"kind": "answer_contains", "args": {"value": "teal"}}],
    }  # fmt: skip
    path.write_text(json.dumps({"name": "mine", "mcpServers": mcp_servers, "tasks": [task]}))
    return path


def test_suites_command_checks_server_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    memory = {"command": "mcp-server-memory", "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}}
    good = _suite(tmp_path, ["memory", "workspace"], {"memory": memory})
    assert main(["mcp", "suites", str(good)]) == 0
    out = capsys.readouterr().out
    assert "server memory: mcp-server-memory" in out and "remember" in out

    (tmp_path / "typo").mkdir()
    typo = _suite(tmp_path / "typo", ["memroy"], {"memory": memory})
    assert main(["mcp", "suites", str(typo)]) == 1
    err = capsys.readouterr().err
    assert "task 'remember' names unknown MCP server(s) 'memroy'" in err and "memory" in err

    (tmp_path / "bad").mkdir()
    bad = _suite(tmp_path / "bad", ["memory"], {"memory": {"command": "x", "env": {"F": "{rollout_folder}/f"}}})
    assert main(["mcp", "suites", str(bad)]) == 1
    assert "unknown placeholder {rollout_folder}" in capsys.readouterr().err


def test_mcp_config_file_errors_are_readable(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp", "headers": {"x-a": "{rollout_id}"}}}}))
    assert load_upstreams(str(path))["web"].headers == (("x-a", "{rollout_id}"),)
    path.write_text(json.dumps({"mcpServers": {"both": {"url": "http://x", "command": "y"}}}))
    with pytest.raises(Exception, match="needs exactly one of 'url' or 'command'"):
        load_upstreams(str(path))
    path.write_text("{not json")
    with pytest.raises(Exception, match="cannot read MCP config"):
        load_upstreams(str(path))


def test_suite_servers_and_unknown_names_at_the_gateway(env_servers: EnvServers, store_url: str, tmp_path: Path) -> None:
    memory = {"command": npm_server("mcp-server-memory"), "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}}
    suite = _suite(tmp_path, ["memory"], {"memory": memory})
    server, stack = gateway_stack(env_servers, store_url, rollouts_dir=str(tmp_path / "r"))
    with server:
        from_suite = stack.add_rollout("from-suite", task=f"{suite}:remember")
        typo = stack.add_rollout("typo", servers=["workspace", "memroy"])

        async def scenario() -> set[str]:
            async with Client(stack.mcp_url(from_suite)) as client:
                return {t.name for t in (await client.list_tools()).tools}

        assert {"create_entities", "read_graph"} <= anyio.run(scenario)
        assert (tmp_path / "r" / "from-suite" / "memory").is_dir()

        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        answer = httpx.post(stack.mcp_url(typo), json=init, headers={"Accept": "application/json, text/event-stream"})
        assert answer.status_code == 400
        message = answer.json()["error"]["message"]
        assert "rollout typo names MCP server(s) 'memroy'" in message and "known:" in message and "workspace" in message


def test_http_upstream_gets_the_rollout_identity(env_servers: EnvServers, store_url: str) -> None:
    upstream = MCPServer("keyed")

    @upstream.tool()
    def whoami(ctx: Context) -> str:
        """Which rollout calls (a server that keeps state per rollout keys it on this header)."""
        headers = ctx.headers or {}
        return f"{headers.get(ROLLOUT_HEADER)}|{headers.get('x-team')}"

    app = upstream.streamable_http_app(transport_security=security(["127.0.0.1:*"]))
    with ServerThread(app) as keyed:
        raw = {"mcpServers": {"keyed": {"url": f"{keyed.url}/mcp", "headers": {"x-team": "team-{rollout_id}"}}}}
        from rollwire.mcp_servers.server_config import parse_servers

        server, stack = gateway_stack(env_servers, store_url, parse_servers(raw, "test"))
        with server:
            tokens = {r: stack.add_rollout(r, servers=["keyed"]) for r in ("http-a", "http-b")}

            async def scenario() -> dict[str, str]:
                seen = {}
                for rollout_id, token in tokens.items():
                    async with Client(stack.mcp_url(token)) as client:
                        seen[rollout_id] = result_text(await client.call_tool("whoami", {}))
                return seen

            assert anyio.run(scenario) == {"http-a": "http-a|team-http-a", "http-b": "http-b|team-http-b"}
