"""Play a scripted tool-call list (a task's reference solution, or any other) against real MCP servers.

Used to check that suites are solvable through the servers, and to produce teacher/SFT tool traces.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from rollwire.mcp_servers.state import ROLLOUT_HEADER, SECRET_HEADER, TASK_HEADER
from rollwire.mcp_servers.tasks.schema import ToolCall


def env_client(
    url: str, rollout_id: str, task_ref: str | None = None, headers: dict[str, str] | None = None, secret: str = ""
) -> tuple[Client, httpx2.AsyncClient]:
    """An official MCP client for one server URL that identifies itself as ``rollout_id`` (and its task), with
    the env servers' shared ``secret`` (they serve only the gateway and whoever holds it)."""
    sent = {ROLLOUT_HEADER: rollout_id, **({SECRET_HEADER: secret} if secret else {}), **(headers or {})}
    if task_ref:
        sent[TASK_HEADER] = task_ref
    http = create_mcp_http_client(headers=sent)
    return Client(streamable_http_client(url, http_client=http)), http


async def play(
    calls: list[ToolCall], url_of: Callable[[str], str], rollout_id: str, task_ref: str | None = None, secret: str = ""
) -> list[dict[str, Any]]:
    """Run ``calls`` in order (one client per server); returns each call's text and is_error."""
    results: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        clients: dict[str, Client] = {}
        for call in calls:
            if call.server not in clients:
                client, http = env_client(url_of(call.server), rollout_id, task_ref, secret=secret)
                await stack.enter_async_context(http)
                clients[call.server] = await stack.enter_async_context(client)
            result = await clients[call.server].call_tool(call.tool, call.arguments)
            text = "".join(getattr(block, "text", "") for block in result.content)
            results.append({"tool": call.tool, "text": text, "is_error": bool(result.is_error)})
    return results


__all__ = ["env_client", "play"]
