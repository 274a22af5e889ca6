"""A rollout's model calls and tool calls in one causal order, with timing: what the proxy and the gateway
recorded (different processes) interleaved by their start times. One place builds it; ``rollwire traces show``,
the admin rollout view and the trajectory exports all print or carry this list."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import select

from rollwire.store import McpMessage, ModelCall, ToolEvent, session_scope
from rollwire.store.codec import decode_ids
from rollwire.store.prompts import prompt_length


def _model_entry(call: ModelCall) -> dict[str, Any]:
    return {
        "kind": "model_call",
        "id": call.id,
        "started_ns": call.started_ns,
        "ended_ns": call.ended_ns,
        "latency_ms": call.latency_ms,
        "dialect": call.dialect,
        "line": call.line,
        "segment_index": call.segment_index,
        "prompt_tokens": prompt_length(call.prompt_ids, call.prompt_base, call.reused_prefix_len),
        "completion_tokens": len(decode_ids(call.completion_ids)),
        "finish_reason": call.finish_reason,
        "status": call.status,
        "error": call.error,
    }


def _tool_entry(event: ToolEvent) -> dict[str, Any]:
    try:
        arguments = json.loads(event.arguments_json) if event.arguments_json else {}
    except ValueError:
        arguments = event.arguments_json
    return {
        "kind": "tool_event",
        "id": event.id,
        "started_ns": event.started_ns,
        "ended_ns": event.ended_ns,
        "latency_ms": event.latency_ms,
        "server": event.server,
        "tool": event.tool,
        "arguments": arguments,
        "is_error": event.is_error,
        "error": event.error,
        "truncated": event.truncated,
        "result_bytes": event.result_bytes,
        "replayed_from": event.replayed_from,
    }


def build_timeline(calls: Sequence[ModelCall], events: Sequence[ToolEvent]) -> list[dict[str, Any]]:
    """Model calls and tool events by start time (a call that started first comes first; ties: the one that ended
    first), each with ``offset_ms`` from the rollout's first recorded start."""
    entries = [_model_entry(c) for c in calls] + [_tool_entry(e) for e in events]
    entries.sort(key=lambda e: (e["started_ns"], e["ended_ns"], e["kind"]))
    first = entries[0]["started_ns"] if entries else 0
    for entry in entries:
        entry["offset_ms"] = (entry["started_ns"] - first) / 1e6
    return entries


def load_tool_events(engine: Engine, rollout_id: str) -> list[ToolEvent]:
    with session_scope(engine) as session:
        query = select(ToolEvent).where(ToolEvent.rollout_id == rollout_id).order_by(ToolEvent.started_ns, ToolEvent.id)  # type: ignore[arg-type]
        return list(session.exec(query).all())


def load_messages(engine: Engine, rollout_id: str) -> list[McpMessage]:
    """The MCP messages the gateway relayed for the rollout, in the order they passed."""
    with session_scope(engine) as session:
        query = select(McpMessage).where(McpMessage.rollout_id == rollout_id).order_by(McpMessage.at_ns, McpMessage.id)  # type: ignore[arg-type]
        return list(session.exec(query).all())


def format_entry(entry: dict[str, Any]) -> str:
    """One line of the timeline for a terminal: start offset, duration, what, outcome."""
    head = f"{entry['offset_ms'] / 1000:>9.3f}s {entry['latency_ms']:>9.1f}ms  "
    if entry["kind"] == "model_call":
        outcome = entry["finish_reason"] or "-"
        if entry["status"] != "complete":
            outcome = f"✗ {entry['status']}: {entry['error'] or ''}".rstrip(": ")
        what = f"model  call {entry['id']} ({entry['dialect']}, {entry['prompt_tokens']}+{entry['completion_tokens']} tokens"
        line = "" if entry["line"] == "main" else f", {entry['line']}"
        return f"{head}{what}{line}) -> {outcome}"
    arguments = json.dumps(entry["arguments"], ensure_ascii=False)
    if len(arguments) > 80:
        arguments = arguments[:77] + "..."
    outcome = f"✗ {entry['error'] or 'error'}" if entry["is_error"] else "ok"
    if entry["truncated"]:
        outcome += f" (cut from {entry['result_bytes']} bytes)"
    return f"{head}tool   {entry['server']}.{entry['tool']} {arguments} -> {outcome.splitlines()[0][:120]}"


__all__ = ["build_timeline", "format_entry", "load_messages", "load_tool_events"]
