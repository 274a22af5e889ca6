"""A stdio MCP server for the gateway failure tests: echoes, hangs forever, or dies mid-call."""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("crashy")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@mcp.tool()
def crash() -> str:
    """Kill this server process in the middle of the call."""
    os._exit(3)


@mcp.tool()
async def hang() -> str:
    """Never answer (for the per-call timeout)."""
    await anyio.Event().wait()
    return "unreachable"


if __name__ == "__main__":
    mcp.run("stdio")
