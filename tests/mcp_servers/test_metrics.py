"""The gateway's and the env servers' /metrics (Prometheus text, read back with the Prometheus client's parser) after
real traffic from the official mcp client: tool calls by server and status and budget refusals match the store's
ToolEvent and Refusal rows; the env servers count the calls the gateway forwarded, and the requests they refused."""

from __future__ import annotations

from collections import Counter

import anyio
import httpx
from mcp import Client

from tests.mcp_servers.env_stack import EnvServers, first_text, gateway_stack
from tests.proxy.test_metrics import scrape, total


def test_gateway_and_env_metrics_match_the_store(env_servers: EnvServers, store_url: str) -> None:
    server, stack = gateway_stack(env_servers, store_url)
    with server:
        token = stack.add_rollout("rm", servers=["workspace"])
        capped = stack.add_rollout("rc", servers=["workspace"], budgets={"tool_calls": 1})

        async def drive() -> None:
            async with Client(stack.mcp_url(token)) as client:
                await client.call_tool("write_file", {"path": "a.txt", "content": "one"})
                await client.call_tool("read_file", {"path": "a.txt"})
                missing = await client.call_tool("read_file", {"path": "missing.txt"})
                assert missing.is_error
                unknown = await client.call_tool("no_such_tool", {})
                assert unknown.is_error
            async with Client(stack.mcp_url(capped)) as client:
                await client.call_tool("list_files", {})
                spent = await client.call_tool("list_files", {})
                assert spent.is_error and "tool-call limit" in first_text(spent)

        anyio.run(drive)
        refused = httpx.post(env_servers.server_url("workspace"), json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401  # no shared secret: refused, and counted
        gateway = scrape(stack.url)
        env = scrape(env_servers.url)
        events = stack.events("rm") + stack.events("rc")
        refusals = stack.refusals("rm") + stack.refusals("rc")

    by_status = Counter((e.server, "error" if e.is_error else "ok") for e in events)
    assert by_status == {("workspace", "ok"): 3, ("workspace", "error"): 1}
    for (name, status), count in by_status.items():
        assert total(gateway, "rollwire_gateway_tool_calls_total", server=name, status=status) == count
        assert total(env, "rollwire_env_tool_calls_total", server=name, status=status) == count
    assert total(gateway, "rollwire_gateway_tool_call_duration_seconds_count", server="workspace") == len(events)
    assert total(env, "rollwire_env_tool_call_duration_seconds_count", server="workspace") == len(events)
    assert sorted(r.kind for r in refusals) == ["tool_calls", "unknown_tool"]
    for kind in ("tool_calls", "unknown_tool"):
        assert total(gateway, "rollwire_gateway_budget_refusals_total", budget=kind) == 1
    assert total(gateway, "rollwire_gateway_http_requests_total", route="mcp", code="200") > 0
    assert total(gateway, "rollwire_gateway_http_requests_in_flight") == 0
    assert total(env, "rollwire_env_http_requests_total", server="workspace", code="401") == 1
    assert total(env, "rollwire_env_http_requests_total", server="workspace", code="200") > 0
    assert total(env, "rollwire_env_http_requests_in_flight") == 0
    for secret in (token, capped, "rm", "rc"):
        assert all(secret not in value for key in gateway for value in dict(key[1]).values())
