"""Server-sent events framing shared by the streaming dialects."""

from __future__ import annotations

import json
from typing import Any


def data_event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def named_event(name: str, payload: dict[str, Any]) -> str:
    """An ``event:`` + ``data:`` pair (Anthropic Messages, Responses)."""
    return f"event: {name}\n{data_event(payload)}"


DONE = "data: [DONE]\n\n"

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

__all__ = ["DONE", "SSE_HEADERS", "data_event", "named_event"]
