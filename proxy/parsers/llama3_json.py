"""Llama-3.1 JSON tool calls: the answer is ``{"name": ..., "parameters": {...}}`` (``;``-separated, optional
``<|python_tag|>``), as vLLM's llama3_json parser."""

from __future__ import annotations

import json

from rollwire.proxy.conversation import ToolCall
from rollwire.proxy.parsers.hermes import call_from_json

PYTHON_TAG = "<|python_tag|>"


def _json_objects(text: str) -> list[str] | None:
    """Split ``{..}; {..}`` into objects; None when anything else is in the text."""
    decoder = json.JSONDecoder()
    pos, out = 0, []
    while pos < len(text):
        while pos < len(text) and text[pos] in " \n\t;":
            pos += 1
        if pos >= len(text):
            break
        try:
            _, end = decoder.raw_decode(text, pos)
        except ValueError:
            return None
        out.append(text[pos:end])
        pos = end
    return out


class Llama3JsonToolParser:
    prefill_required = '{"name": "'

    def prefill_named(self, name: str) -> str:
        return '{"name": ' + json.dumps(name) + ', "parameters": '

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        body = text.strip()
        if body.startswith(PYTHON_TAG):
            body = body[len(PYTHON_TAG) :].strip()
        if not body.startswith("{"):
            return text, []
        objects = _json_objects(body)
        calls = [call_from_json(o) for o in objects or []]
        if not objects or any(c is None for c in calls):
            return text, []
        return "", [c for c in calls if c is not None]

    def holdback(self, text: str) -> int:
        """The whole answer is a call or plain text: an answer that opens like a call waits for its end."""
        body = text.lstrip()
        if not body or body.startswith(("{", PYTHON_TAG)) or PYTHON_TAG.startswith(body):
            return 0
        return len(text)


__all__ = ["Llama3JsonToolParser"]
