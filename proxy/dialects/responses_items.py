"""Responses ``input`` (and stored ``output``) items folded into chat messages.

Calls join the assistant turn before them; reasoning items attach to the assistant turn after them. A freeform
``custom_tool_call`` becomes a call with the arguments ``{"input": <its input>}``, which is what the model
sampled for it (see ``responses_tools``), so a call carried back renders and splices like a function call.
``custom_tool_call_output`` and ``function_call_output`` are tool messages, their output a string or a list of
text parts. ``additional_tools`` items carry tools, not messages (``responses_tools`` reads them).
"""

from __future__ import annotations

import json
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.proxy.conversation import Message, ToolCall
from rollwire.proxy.dialects.responses_tools import CUSTOM_INPUT, flat_name

MESSAGE_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
TOOL_ONLY = ("additional_tools",)
"""Item types that carry tools for the template, not messages."""


def text_of(content: Any, where: str) -> str:
    """A string, or the text of text parts; anything else (images, files, audio) is refused by name."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or a list of content parts", param=where)
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind not in TEXT_PARTS:
            raise InvalidRequest(f"{where}[{j}].type {kind!r} is not supported", param=f"{where}[{j}].type")
        out.append(str(part.get("text", "")))
    return "".join(out)


def _string(item: dict[str, Any], key: str, where: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}: a {what} needs a string {key}", param=f"{where}.{key}")
    return value


def _called_name(item: dict[str, Any], where: str, what: str) -> str:
    """The flat name the template shows for the called tool (its namespace folded in)."""
    name, namespace = _string(item, "name", where, what), item.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidRequest(f"{where}.namespace must be a string", param=f"{where}.namespace")
    return flat_name(namespace, name)


class Items:
    """Folds the items of ``field`` (``input``, or a stored answer's ``output``) into ``messages`` in order, after
    ``opening`` (the instructions); ``add`` raises InvalidRequest naming the item's field. A ``Fold``
    (``dialects.parsed``): a rollout's next request resumes from a copy of where its last one ended."""

    def __init__(self, field: str = "input", opening: tuple[Message, ...] = ()) -> None:
        self.field = field
        self.messages: list[Message] = list(opening)
        self.reasoning: str | None = None

    def copy(self) -> Items:
        copied = Items(self.field, tuple(self.messages))
        copied.reasoning = self.reasoning
        return copied

    def _assistant(self, content: str = "", calls: tuple[ToolCall, ...] = ()) -> None:
        last = self.messages[-1] if self.messages else None
        if calls and last is not None and last.role == "assistant" and self.reasoning is None:
            self.messages[-1] = Message(
                "assistant", last.content, last.reasoning, last.tool_calls + calls, None, last.name
            )
            return
        self.messages.append(Message("assistant", content, self.reasoning, calls))
        self.reasoning = None

    def add(self, item: Any, i: int) -> None:
        where = f"{self.field}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in MESSAGE_ROLES:
                raise InvalidRequest(f"{where}.role must be one of {sorted(MESSAGE_ROLES)}", param=f"{where}.role")
            text = text_of(item.get("content"), f"{where}.content")
            if role == "assistant":
                self._assistant(text)
            else:
                self.messages.append(Message(MESSAGE_ROLES[role], text))
        elif kind == "function_call":
            name, call_id = _called_name(item, where, kind), _string(item, "call_id", where, kind)
            args = item.get("arguments", "{}")
            self._assistant(calls=(ToolCall(call_id, name, args if isinstance(args, str) else json.dumps(args)),))
        elif kind == "custom_tool_call":
            name, call_id = _called_name(item, where, kind), _string(item, "call_id", where, kind)
            arguments = json.dumps({CUSTOM_INPUT: _string(item, "input", where, kind)}, ensure_ascii=False)
            self._assistant(calls=(ToolCall(call_id, name, arguments),))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = _string(item, "call_id", where, kind)
            self.messages.append(Message("tool", text_of(item.get("output"), f"{where}.output"), tool_call_id=call_id))
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            self.reasoning = text_of(parts, f"{where}.content") or None
        elif kind not in TOOL_ONLY:
            raise InvalidRequest(f"{where}.type {kind!r} is not supported by this proxy", param=f"{where}.type")


__all__ = ["MESSAGE_ROLES", "Items", "text_of"]
