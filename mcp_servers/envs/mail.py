"""The mail server: a per-rollout mailbox (inbox and sent) of messages with realistic fields, in a JSON file."""

from __future__ import annotations

import json
import re
import threading
import uuid
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from rollwire.mcp_servers.envs.rollout import EnvRuntime
from rollwire.mcp_servers.state import read_json, write_json

NAME = "mail"
FILE = "mail.json"
OWNER = "me@example.com"
_ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_lock = threading.Lock()


def seed(folder: Path, initial: dict[str, Any]) -> None:
    """Write the task's ``inbox`` messages (each: id, from, to, subject, body, date)."""
    inbox = [{"folder": "inbox", "read": False, **m} for m in initial.get("inbox") or []]
    write_json(folder / FILE, inbox)


def _summary(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m.get(k) for k in ("id", "folder", "from", "to", "subject", "date", "read")}


def build(env: EnvRuntime) -> MCPServer:
    """The mail MCP server."""
    mcp = MCPServer(NAME, instructions=f"Your mailbox ({OWNER}). Folders: inbox, sent.")

    def path_of(ctx: Context[Any, Any]) -> Path:
        return env.folder(ctx, NAME, seed) / FILE

    @mcp.tool()
    def list_messages(ctx: Context[Any, Any], folder: str = "inbox") -> str:
        """List the messages of a folder (inbox or sent) as JSON summaries."""
        if folder not in ("inbox", "sent"):
            raise ToolError("folder must be 'inbox' or 'sent'")
        return json.dumps([_summary(m) for m in read_json(path_of(ctx), []) if m.get("folder") == folder])

    @mcp.tool()
    def read_message(ctx: Context[Any, Any], message_id: str) -> str:
        """Read one message (marks it read)."""
        path = path_of(ctx)
        with _lock:
            messages = read_json(path, [])
            found = [m for m in messages if m.get("id") == message_id]
            if not found:
                raise ToolError(f"no message with id {message_id!r}")
            found[0]["read"] = True
            write_json(path, messages)
        return json.dumps(found[0])

    @mcp.tool()
    def send_message(ctx: Context[Any, Any], to: list[str], subject: str, body: str) -> str:
        """Send a message to one or more addresses; it is kept in the sent folder."""
        bad = [a for a in to if not _ADDRESS.match(a)]
        if not to or bad:
            raise ToolError(f"to must list valid email addresses; bad: {bad or 'none given'}")
        env.check_size("body", subject + body)
        message = {
            "id": uuid.uuid4().hex[:8],
            "folder": "sent",
            "from": OWNER,
            "to": to,
            "subject": subject,
            "body": body,
            "date": "",
            "read": True,
        }
        path = path_of(ctx)
        with _lock:
            write_json(path, [*read_json(path, []), message])
        return f"sent {message['id']}"

    return mcp


__all__ = ["FILE", "NAME", "OWNER", "build", "seed"]
