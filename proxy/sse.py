"""Server-sent events framing shared by the streaming dialects."""

from __future__ import annotations

from typing import Any

from rollwire.compact_json import json_text


def data_event(payload: dict[str, Any]) -> str:
    """One ``data:`` event, its payload as compact JSON (orjson's writer: a streamed answer writes one a token)."""
    return f"data: {json_text(payload)}\n\n"


def named_event(name: str, payload: dict[str, Any]) -> str:
    """An ``event:`` + ``data:`` pair (Anthropic Messages, Responses)."""
    return f"event: {name}\n{data_event(payload)}"


DONE = "data: [DONE]\n\n"

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

__all__ = ["DONE", "SSE_HEADERS", "data_event", "named_event"]
