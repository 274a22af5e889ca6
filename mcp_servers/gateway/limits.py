"""Per-rollout tool limits of the gateway: which tools are served (allow-list), and how big a result may get.
How many calls a rollout may make is its budget (``rollwire.rollouts.budgets``), kept in the store."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from typing import Any

from rollwire.settings import GatewaySettings


class RolloutLimits:
    """The tool allow-list from the settings."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.timeout_s = settings.call_timeout_s
        self.allowed = list(settings.allowed_tools)

    def allows_tool(self, name: str) -> bool:
        return not self.allowed or any(fnmatch.fnmatchcase(name, pattern) for pattern in self.allowed)


@dataclass(frozen=True, slots=True)
class Capped:
    result: dict[str, Any]
    size: int
    """Bytes of the result as the upstream sent it (JSON)."""
    truncated: bool


def cap_result(result: dict[str, Any], limit: int) -> Capped:
    """A tool result of at most ~``limit`` bytes: over it, its text is cut, other blocks are dropped, and a
    note tells the model (and the trace) how big it was."""
    size = len(json.dumps(result, ensure_ascii=False).encode())
    if size <= limit:
        return Capped(result, size, False)
    text = "\n".join(str(b.get("text", "")) for b in result.get("content", []) if isinstance(b, dict))
    structured = result.get("structuredContent")
    text_result = isinstance(structured, dict) and set(structured) == {"result"}  # a tool returning text
    room = max(limit - 200, 0) // (2 if text_result else 1)  # the text goes twice: as content and as its schema's shape
    kept = text.encode()[:room].decode(errors="ignore")
    note = f"\n[truncated by the gateway: the result was {size} bytes; at most {limit} are kept]"
    capped: dict[str, Any] = {"content": [{"type": "text", "text": kept + note}], "isError": bool(result.get("isError"))}
    if text_result:
        capped["structuredContent"] = {"result": kept + note}
    return Capped(capped, size, True)


__all__ = ["Capped", "RolloutLimits", "cap_result"]
