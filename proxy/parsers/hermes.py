"""Hermes / Qwen tool calls: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks."""

from __future__ import annotations

import json
import re

from rollwire.proxy.conversation import ToolCall
from rollwire.proxy.parsers.base import new_call_id, partial_marker

OPEN = "<tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def call_from_json(raw: str) -> ToolCall | None:
    """``{"name": str, "arguments"|"parameters": object}`` -> a call; anything else -> None."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(id=new_call_id(), name=data["name"], arguments=json.dumps(args, ensure_ascii=False))


class HermesToolParser:
    prefill_required = '<tool_call>\n{"name": "'

    def prefill_named(self, name: str) -> str:
        return '<tool_call>\n{"name": ' + json.dumps(name) + ', "arguments": '

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        calls: list[ToolCall] = []
        kept: list[str] = []
        last = 0
        for match in _BLOCK.finditer(text):
            call = call_from_json(match.group(1).strip())
            kept.append(text[last : match.start()])
            if call is None:
                kept.append(match.group(0))  # unparseable: stays as text
            else:
                calls.append(call)
            last = match.end()
        kept.append(text[last:])
        return "".join(kept).strip() if calls else text, calls

    def holdback(self, text: str) -> int:
        at = text.find(OPEN)
        return at if at >= 0 else partial_marker(text, OPEN)


__all__ = ["HermesToolParser", "call_from_json"]
