"""Must-show 5 at the gateway: limits exceeded, tools outside the allow-list, bad arguments, a call timeout, and a
server that dies mid-call all come back as clear tool errors, are recorded (a refused call as a Refusal, not a
ToolEvent), and the gateway keeps serving."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp import Client

from rollwire.mcp_servers.server_config import UpstreamSpec
from tests.mcp_servers.env_stack import EnvServers, gateway_stack, result_text

CRASHY = UpstreamSpec("crashy", command=sys.executable, args=(str(Path(__file__).with_name("crash_server.py")),))


def test_failures_are_tool_errors_and_others_keep_working(env_servers: EnvServers, store_url: str) -> None:
    server, stack = gateway_stack(
        env_servers,
        store_url,
        {"crashy": CRASHY},
        max_tool_calls=6,
        call_timeout_s=3.0,
        allowed_tools=["echo", "crash", "hang", "write_file", "read_file"],
    )
    with server:
        victim = stack.add_rollout("victim", servers=["crashy", "workspace"])
        other = stack.add_rollout("other", servers=["workspace"])  # all workspace tools (a tiny task shows only write_file)

        async def scenario() -> None:
            async with Client(stack.mcp_url(victim)) as v, Client(stack.mcp_url(other)) as o:
                names = {t.name for t in (await v.list_tools()).tools}
                assert names == {"echo", "crash", "hang", "write_file", "read_file"}  # list_files/delete_file filtered
                assert result_text(await v.call_tool("echo", {"text": "hi"})) == "hi"
                crashed = await v.call_tool("crash", {})
                assert crashed.is_error and "crashy" in result_text(crashed) and "failed" in result_text(crashed)
                assert (await o.call_tool("write_file", {"path": "answer.txt", "content": "sun"})).is_error is False
                assert result_text(await v.call_tool("echo", {"text": "back"})) == "back"  # reconnected after the crash
                with anyio.fail_after(20):
                    hung = await v.call_tool("hang", {})
                assert hung.is_error and "timed out after 3s" in result_text(hung)
                bad = await v.call_tool("write_file", {"path": "x.txt"})
                assert bad.is_error and "content" in result_text(bad)
                denied = await v.call_tool("list_files", {})
                assert denied.is_error and "not allowed" in result_text(denied)
                await v.call_tool("echo", {"text": "sixth"})
                limited = await v.call_tool("echo", {"text": "seventh"})
                assert limited.is_error and "limit reached" in result_text(limited)
                assert result_text(await o.call_tool("read_file", {"path": "answer.txt"})) == "sun"

        anyio.run(scenario)
        events = stack.events("victim")
        assert [e.tool for e in events] == ["echo", "crash", "echo", "hang", "write_file", "echo"]
        assert [e.is_error for e in events] == [False, True, False, True, True, False]
        assert all(e.error for e in events if e.is_error)
        # refused calls are refusals with their reason, not tool events
        refusals = stack.refusals("victim")
        assert [(r.kind, r.target) for r in refusals] == [("tool_not_allowed", "list_files"), ("tool_calls", "echo")]
        assert all(r.source == "gateway" and r.reason for r in refusals)
        assert [e.tool for e in stack.events("other")] == ["write_file", "read_file"]


def test_idle_connections_are_closed(env_servers: EnvServers, store_url: str) -> None:
    server, stack = gateway_stack(env_servers, store_url, {"crashy": CRASHY}, call_timeout_s=10.0)
    with server:
        token = stack.add_rollout("idle", servers=["crashy"])

        async def scenario() -> list[str]:
            async with Client(stack.mcp_url(token)) as client:
                first = result_text(await client.call_tool("echo", {"text": "one"}))
                pool = stack.app.state.gateway.pool
                closed = pool.close_idle(now=10**9)
                again = result_text(await client.call_tool("echo", {"text": "two"}))  # reopened on demand
                return [first, str(closed), again]

        assert anyio.run(scenario) == ["one", "1", "two"]
