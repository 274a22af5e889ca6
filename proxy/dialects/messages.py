"""Anthropic Messages API (what Claude Code speaks): ``system`` + content blocks into a Conversation, and the
message body, its event stream and Anthropic-shaped errors back out of a Generation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rollwire.proxy.conversation import Conversation, Generation, Message, Sampling, ToolCall
from rollwire.proxy.dialects.fields import ANTHROPIC_TOOL_NAME, checked_schema, named_choice, requested_model
from rollwire.proxy.sse import named_event

from rollwire.errors import InvalidRequest, RollwireError

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
IGNORED_BLOCKS = ("redacted_thinking",)
"""Opaque to an open model: dropped (the history match ignores reasoning anyway)."""


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or a list of content blocks", param=where)
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(f"{where}[{j}] must be a content block with a type", param=f"{where}[{j}]")
    return content


def _plain(content: Any, where: str) -> str:
    """Text of a string or text blocks (system prompts, tool results); other block types are refused."""
    if content is None:
        return ""
    out = []
    for j, block in enumerate(_blocks(content, where)):
        if block["type"] != "text":
            raise InvalidRequest(
                f"{where}[{j}].type {block['type']!r} is not supported here", param=f"{where}[{j}].type"
            )
        out.append(str(block.get("text", "")))
    return "\n".join(out)


def _user(content: Any, where: str) -> list[Message]:
    """A user turn: tool results become tool messages (first), the rest one user message."""
    tools, texts = [], []
    for j, block in enumerate(_blocks(content, where)):
        kind = block["type"]
        if kind == "tool_result":
            use_id = block.get("tool_use_id")
            if not isinstance(use_id, str):
                raise InvalidRequest(f"{where}[{j}] needs tool_use_id", param=f"{where}[{j}].tool_use_id")
            text = _plain(block.get("content"), f"{where}[{j}].content")
            tools.append(Message("tool", text, tool_call_id=use_id))
        elif kind == "text":
            texts.append(str(block.get("text", "")))
        else:
            raise InvalidRequest(f"{where}[{j}].type {kind!r} is not supported", param=f"{where}[{j}].type")
    return tools + ([Message("user", "".join(texts))] if texts or not tools else [])


def _assistant(content: Any, where: str) -> Message:
    texts, thinking, calls = [], [], []
    for j, block in enumerate(_blocks(content, where)):
        kind = block["type"]
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            thinking.append(str(block.get("thinking", "")))
        elif kind == "tool_use":
            name, use_id, args = block.get("name"), block.get("id"), block.get("input", {})
            if not isinstance(name, str) or not isinstance(use_id, str) or not isinstance(args, dict):
                raise InvalidRequest(
                    f"{where}[{j}]: tool_use needs id, name and an input object", param=f"{where}[{j}]"
                )
            calls.append(ToolCall(use_id, name, json.dumps(args, ensure_ascii=False)))
        elif kind not in IGNORED_BLOCKS:
            raise InvalidRequest(f"{where}[{j}].type {kind!r} is not supported", param=f"{where}[{j}].type")
    return Message("assistant", "".join(texts), "".join(thinking) or None, tuple(calls))


def _messages(raw: Any, system: Any) -> tuple[Message, ...]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("messages must be a non-empty list", param="messages")
    out = [Message("system", _plain(system, "system"))] if system else []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise InvalidRequest(f"{where}.role must be 'user' or 'assistant', got {role!r}", param=f"{where}.role")
        content = message.get("content")
        if role == "user":
            out.extend(_user(content, f"{where}.content"))
        else:
            out.append(_assistant(content, f"{where}.content"))
    return tuple(out)


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest("tools must be a list", param="tools")
    out = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise InvalidRequest(f"tools[{i}] must be an object", param=f"tools[{i}]")
        if tool.get("type", "custom") != "custom":
            raise InvalidRequest(
                f"tools[{i}].type {tool.get('type')!r}: server tools are not supported (only custom tools)",
                param=f"tools[{i}].type",
            )
        name = tool.get("name")
        schema = checked_schema(
            name, tool.get("input_schema"), f"tools[{i}].name", f"tools[{i}].input_schema", ANTHROPIC_TOOL_NAME
        )
        fn = {"name": name, "description": str(tool.get("description") or ""), "parameters": schema}
        out.append({"type": "function", "function": fn})
    return tuple(out)


def _tool_choice(raw: Any, tools: tuple[dict[str, Any], ...]) -> tuple[str, bool]:
    """(the neutral tool choice, parallel tool calls allowed)."""
    if raw is None:
        return ("auto" if tools else "none"), True
    kind = raw.get("type") if isinstance(raw, dict) else None
    parallel = not (isinstance(raw, dict) and raw.get("disable_parallel_tool_use"))
    if kind in ("auto", "none"):
        return str(kind), parallel
    if kind in ("any", "tool") and not tools:
        raise InvalidRequest(f"tool_choice {kind!r} needs tools", param="tool_choice")
    if kind == "any":
        return "required", parallel
    if kind == "tool":
        return named_choice(raw.get("name"), tools, "tool_choice.name", "tool_choice.name"), parallel
    raise InvalidRequest("tool_choice.type must be auto, any, tool or none", param="tool_choice.type")


def _sampling(body: dict[str, Any]) -> Sampling:
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidRequest("max_tokens is required and must be a positive integer", param="max_tokens")
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise InvalidRequest("stop_sequences must be a list of non-empty strings", param="stop_sequences")
    values: dict[str, float | None] = {}
    for name, low in (("temperature", 0.0), ("top_p", 1e-9)):
        value = body.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= 1
        ):
            raise InvalidRequest(f"{name} must be a number in [{low:g}, 1], got {value!r}", param=name)
        values[name] = None if value is None else float(value)
    if body.get("top_k") is not None:
        raise InvalidRequest("top_k is not supported by this proxy", param="top_k")
    return Sampling(max_tokens=max_tokens, temperature=values["temperature"], top_p=values["top_p"], stop=tuple(stops))


def parse_messages(body: Any, need_max_tokens: bool = True) -> Conversation:
    """The request as a Conversation; ``count_tokens`` bodies carry no ``max_tokens``."""
    model = requested_model(body)
    tools = _tools(body.get("tools"))
    choice, parallel = _tool_choice(body.get("tool_choice"), tools)
    sampling = _sampling(body if need_max_tokens else {"max_tokens": 1, **body})
    return Conversation(
        model=model,
        messages=_messages(body.get("messages"), body.get("system")),
        tools=tools,
        tool_choice=choice,
        sampling=sampling,
        stream=bool(body.get("stream")),
        parallel_tool_calls=parallel,
    )


def _arguments(call: ToolCall) -> dict[str, Any]:
    """tool_use.input must be an object: the model's JSON when it is one, else the raw text under a key."""
    try:
        value = json.loads(call.arguments)
    except ValueError:
        return {"arguments": call.arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def content_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.reasoning is not None:
        blocks.append({"type": "thinking", "thinking": message.reasoning, "signature": ""})
    if message.content or not message.tool_calls:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c)} for c in message.tool_calls)
    return blocks


class MessagesDialect:
    name = "messages"

    def parse_request(self, body: Any) -> Conversation:
        return parse_messages(body)

    def _head(self, generation: Generation) -> dict[str, Any]:
        return {
            "id": "msg_" + generation.id.split("-", 1)[-1],
            "type": "message",
            "role": "assistant",
            "model": generation.model,
        }

    def _usage(self, generation: Generation, output_tokens: int) -> dict[str, int]:
        return {
            "input_tokens": generation.prompt_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }

    def response_body(self, generation: Generation) -> dict[str, Any]:
        choice = generation.choices[0]
        return {
            **self._head(generation),
            "content": content_blocks(choice.message),
            "stop_reason": STOP_REASONS.get(choice.finish_reason, "end_turn"),
            "stop_sequence": None,
            "usage": self._usage(generation, generation.completion_tokens),
            "weight_version": generation.policy_version,
        }

    def answer_message(self, response_body: dict[str, Any], index: int) -> Message:
        return _assistant(response_body["content"], "content")

    def stream_events(self, generation: Generation, conv: Conversation) -> Iterator[str]:
        body = self.response_body(generation)
        opening = {**self._head(generation), "content": [], "stop_reason": None, "stop_sequence": None}
        opening["usage"] = self._usage(generation, 1)
        yield named_event("message_start", {"type": "message_start", "message": opening})
        yield named_event("ping", {"type": "ping"})
        for index, block in enumerate(body["content"]):
            yield from _block_events(index, block)
        delta = {"stop_reason": body["stop_reason"], "stop_sequence": None}
        usage = {"output_tokens": generation.completion_tokens}
        yield named_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        yield named_event("message_stop", {"type": "message_stop"})

    def error_body(self, exc: RollwireError) -> dict[str, Any]:
        kind = ERROR_TYPES.get(exc.status_code, "api_error")
        return {"type": "error", "error": {"type": kind, "message": exc.message}}


def _block_events(index: int, block: dict[str, Any]) -> Iterator[str]:
    kind = block["type"]
    opened = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""}}
    start = opened.get(kind) or {**block, "input": {}}
    yield named_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
    if kind == "text" and block["text"]:
        delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
    elif kind == "thinking":
        delta = {"type": "thinking_delta", "thinking": block["thinking"]}
    elif kind == "tool_use":
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
    else:
        delta = {}
    if delta:
        yield named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
    if kind == "thinking":
        signature = {"type": "signature_delta", "signature": ""}
        yield named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": signature})
    yield named_event("content_block_stop", {"type": "content_block_stop", "index": index})


__all__ = ["MessagesDialect", "content_blocks", "parse_messages"]
