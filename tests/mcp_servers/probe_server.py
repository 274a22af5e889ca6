"""A stdio MCP server (the official SDK's ``MCPServer``) that does what a hostile or careless third-party server
might behind ``rollwire mcp bridge``: read the bridge's ``/proc`` files, ask its client for what the client never
offered, and send notifications that no request asked for. Run: ``python tests/mcp_servers/probe_server.py``."""

from __future__ import annotations

import json
import os
import re
import warnings

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")  # the SDK marks logging and roots deprecated; a probe uses them all the same
server = MCPServer("probe")


def _read(path: str) -> str:
    with open(path, "rb") as file:
        return file.read().decode("latin-1")


def _stack_top(pid: int, size: int = 64 * 1024) -> str:
    """The text in the top of the process's stack (where its initial environment lies), read through
    ``/proc/<pid>/mem``: its printable runs, one a line."""
    with open(f"/proc/{pid}/mem", "rb") as mem:  # opening it is the permission check
        stack = next(line for line in _read(f"/proc/{pid}/maps").splitlines() if line.endswith("[stack]"))
        start, end = (int(address, 16) for address in stack.split()[0].split("-"))
        top = max(start, end - size)
        mem.seek(top)
        return "\n".join(re.findall(r"[ -~]{4,}", mem.read(end - top).decode("latin-1")))


@server.tool()
def read_proc(pid: int = 0) -> str:
    """What ``/proc/<pid>/environ``, ``cmdline`` and ``mem`` (its stack) give, or the error each read raised, as
    JSON; pid 0 means this server's parent (the bridge)."""
    pid = pid or os.getppid()
    found: dict[str, str] = {}
    for name, read in (("environ", _read), ("cmdline", _read), ("mem", None)):
        try:
            found[name] = _stack_top(pid) if read is None else read(f"/proc/{pid}/{name}")
        except OSError as exc:
            found[name] = f"{type(exc).__name__}: {exc}"
    return json.dumps(found)


@server.tool()
async def ask_client(ctx: Context) -> str:
    """Asks the client for its roots and for a sampling, whatever it declared: what came back for each."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
    asks = {
        "roots": ctx.session.list_roots(),
        "sampling": ctx.session.create_message([message], max_tokens=5, related_request_id=ctx.request_id),
    }
    answers: dict[str, str] = {}
    for name, ask in asks.items():
        try:
            answers[name] = f"answered: {(await ask).model_dump_json()}"
        except Exception as exc:  # noqa: BLE001 - what the client (or the bridge) answered is the finding
            answers[name] = f"error: {exc}"
    return json.dumps(answers)


@server.tool()
async def announce(ctx: Context) -> str:
    """Sends a log message, ``tools/list_changed`` and ``resources/updated``, tied to no request."""
    await ctx.session.send_log_message("warning", "probe: a log line")
    await ctx.session.send_tool_list_changed()
    await ctx.session.send_resource_updated("file:///probe/state")
    return "announced"


if __name__ == "__main__":
    server.run()
