"""The calendar server: a per-rollout list of events (title, start, end, attendees, location) in a JSON file."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from rollwire.mcp_servers.envs.rollout import EnvRuntime
from rollwire.mcp_servers.state import read_json, write_json

NAME = "calendar"
FILE = "calendar.json"
_lock = threading.Lock()


def seed(folder: Path, initial: dict[str, Any]) -> None:
    """Write the task's ``events``."""
    write_json(folder / FILE, list(initial.get("events") or []))


def _time(name: str, value: str) -> str:
    try:
        return datetime.fromisoformat(value).isoformat(timespec="minutes")
    except (TypeError, ValueError):
        raise ToolError(f"{name} must be an ISO date-time like 2025-03-14T09:30, got {value!r}") from None


def build(env: EnvRuntime) -> MCPServer:
    """The calendar MCP server."""
    mcp = MCPServer(NAME, instructions="Your calendar. Times are ISO 8601 local times, e.g. 2025-03-14T09:30.")

    def path_of(ctx: Context[Any, Any]) -> Path:
        return env.folder(ctx, NAME, seed) / FILE

    @mcp.tool()
    def list_events(ctx: Context[Any, Any], date: str | None = None) -> str:
        """List events as JSON, optionally only those starting on ``date`` (YYYY-MM-DD)."""
        events = read_json(path_of(ctx), [])
        if date:
            events = [e for e in events if str(e.get("start", "")).startswith(date)]
        return json.dumps(sorted(events, key=lambda e: e.get("start", "")))

    @mcp.tool()
    def create_event(
        ctx: Context[Any, Any],
        title: str,
        start: str,
        end: str,
        attendees: list[str] | None = None,
        location: str = "",
    ) -> str:
        """Add an event; returns its id."""
        if not title.strip():
            raise ToolError("title must not be empty")
        env.check_size("title", title + location + "".join(attendees or []))
        start_s, end_s = _time("start", start), _time("end", end)
        if end_s < start_s:
            raise ToolError("end must not be before start")
        event = {
            "id": uuid.uuid4().hex[:8],
            "title": title,
            "start": start_s,
            "end": end_s,
            "attendees": list(attendees or []),
            "location": location,
        }
        path = path_of(ctx)
        with _lock:
            write_json(path, [*read_json(path, []), event])
        return json.dumps(event)

    @mcp.tool()
    def delete_event(ctx: Context[Any, Any], event_id: str) -> str:
        """Delete an event by id."""
        path = path_of(ctx)
        with _lock:
            events = read_json(path, [])
            kept = [e for e in events if e.get("id") != event_id]
            if len(kept) == len(events):
                raise ToolError(f"no event with id {event_id!r}")
            write_json(path, kept)
        return f"deleted {event_id}"

    return mcp


__all__ = ["FILE", "NAME", "build", "seed"]
