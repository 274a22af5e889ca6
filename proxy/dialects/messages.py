"""Anthropic Messages API (what Claude Code speaks): ``system`` + content blocks into a Conversation, and the
message body, its event stream and Anthropic-shaped errors back out of a Generation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from rollwire.errors import InvalidRequest, RollwireError, anthropic_error
from rollwire.proxy.answer import REASONING
from rollwire.proxy.conversation import (
    Conversation,
    Generation,
    Message,
    OutputFormat,
    Sampling,
    StreamEnd,
    StreamEvent,
    StreamFailure,
    StreamStart,
    TextDelta,
    ToolCall,
)
from rollwire.proxy.dialects.base import Accepted, History
from rollwire.proxy.dialects.fields import (
    ANTHROPIC_TOOL_NAME,
    checked_schema,
    flag,
    named_choice,
    number,
    output_format,
    requested_model,
)
from rollwire.proxy.dialects.parsed import WHOLE, Reading
from rollwire.proxy.dialects.streaming import render, rendered, replay
from rollwire.proxy.sse import named_event

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
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


def _messages(raw: Any, system: Any, reading: Reading) -> tuple[Message, ...]:
    """The top-level ``system`` first; a ``system`` message inside ``messages`` (Claude Code sends its reminders
    so) stays where it stands, as a system message the template renders in place."""
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("messages must be a non-empty list", param="messages")
    head = (Message("system", _plain(system, "system")),) if system else ()
    return head + reading.messages(raw, _message)


def _message(message: Any, i: int) -> tuple[Message, ...]:
    """Entry ``i`` of ``messages``: a user turn may be several messages (``_user``)."""
    where = f"messages[{i}]"
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant", "system"):
        raise InvalidRequest(
            f"{where}.role must be 'user', 'assistant' or 'system', got {role!r}", param=f"{where}.role"
        )
    content = message.get("content")
    if role == "user":
        return tuple(_user(content, f"{where}.content"))
    if role == "system":
        return (Message("system", _plain(content, f"{where}.content")),)
    return (_assistant(content, f"{where}.content"),)


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
    top_k = number(body, "top_k", int, 1, 2**31 - 1)
    return Sampling(
        max_tokens=max_tokens,
        temperature=values["temperature"],
        top_p=values["top_p"],
        top_k=top_k,
        stop=tuple(stops),
        structured=_output_format(body),
    )


def _output_format(body: dict[str, Any]) -> OutputFormat | None:
    """Structured outputs: ``output_config.format`` (or the beta's top-level ``output_format``)."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise InvalidRequest("output_config must be an object", param="output_config")
    if config and config.get("format") is not None:
        return output_format(config["format"], "output_config.format")
    return output_format(body.get("output_format"), "output_format")


THINKING = {"enabled": True, "adaptive": True, "disabled": False}
"""Anthropic's thinking modes -> the template's reasoning switch; the budget is not enforced (max_tokens is)."""


def _reasoning(raw: Any) -> bool | None:
    """``thinking`` as the template's switch; absent: the template's own default (the model's usual mode)."""
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in THINKING:
        raise InvalidRequest("thinking.type must be enabled, adaptive or disabled", param="thinking.type")
    if kind == "enabled":
        budget = raw.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise InvalidRequest("thinking.budget_tokens must be a positive integer", param="thinking.budget_tokens")
    return THINKING[kind]


ACCEPTED_OBJECTS = ("metadata", "context_management", "output_config")
"""Accepted and not acted on: ``metadata`` (the caller's ids; stored with the request), ``context_management``
(server-side history edits: the proxy never edits a history, which fits the context whole or is refused),
``output_config.effort`` (no open-model equivalent). ``output_config.format`` is structured output (``_output_format``)."""


def _accepted(body: dict[str, Any]) -> None:
    for name in ACCEPTED_OBJECTS:
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise InvalidRequest(f"{name} must be an object", param=name)


def parse_messages(body: Any, need_max_tokens: bool = True, reading: Reading = WHOLE) -> Conversation:
    """The request as a Conversation; ``count_tokens`` bodies carry no ``max_tokens``; ``reading``: how messages
    and tools are read (through the proxy's memo: ``History.reading``)."""
    model = requested_model(body)
    tools, tools_key = reading.tools(body.get("tools"), _tools)
    choice, parallel = _tool_choice(body.get("tool_choice"), tools)
    sampling = _sampling(body if need_max_tokens else {"max_tokens": 1, **body})
    _accepted(body)
    return Conversation(
        model=model,
        messages=_messages(body.get("messages"), body.get("system"), reading),
        tools=tools,
        tool_choice=choice,
        sampling=sampling,
        stream=flag(body, "stream"),
        parallel_tool_calls=parallel,
        reasoning=_reasoning(body.get("thinking")),
        known_tools_key=tools_key,
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
    path = "/messages"
    entries_key = "messages"
    count_tokens_path: str | None = "/messages/count_tokens"

    async def accept(self, raw: Any, sent: bytes | None, history: History) -> Accepted:
        return Accepted(self.parse_request(raw, history.reading(self.name)), self, raw, sent)

    def parse_request(self, body: Any, reading: Reading = WHOLE) -> Conversation:
        return parse_messages(body, reading=reading)

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

    def opening(self, generation: Generation) -> dict[str, Any]:
        message = {**self._head(generation), "content": [], "stop_reason": None, "stop_sequence": None}
        return {**message, "usage": self._usage(generation, 1)}

    def stream(self, events: AsyncIterator[StreamEvent], conv: Conversation) -> AsyncIterator[str]:
        return render(_MessagesStream(self), events)

    def stream_events(self, generation: Generation, conv: Conversation) -> Iterator[str]:
        return rendered(_MessagesStream(self), replay(generation))

    def error_body(self, exc: RollwireError) -> dict[str, Any]:
        return anthropic_error(exc)


_OPENED = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""}}
_DELTAS = {"text": ("text_delta", "text"), "thinking": ("thinking_delta", "thinking")}


def _event(kind: str, **payload: Any) -> str:
    return named_event(kind, {"type": kind, **payload})


def _text_delta(index: int, kind: str, text: str) -> str:
    name, field = _DELTAS[kind]
    return _event("content_block_delta", index=index, delta={"type": name, field: text})


def _block_end(index: int, kind: str) -> Iterator[str]:
    if kind == "thinking":
        yield _event("content_block_delta", index=index, delta={"type": "signature_delta", "signature": ""})
    yield _event("content_block_stop", index=index)


class _MessagesStream:
    """message_start, then thinking and text blocks that stream as they arrive; at the end the streamed blocks
    are completed and the rest (tool_use blocks) sent whole from the final content, then message_delta/stop."""

    def __init__(self, dialect: MessagesDialect) -> None:
        self.dialect = dialect
        self.streamed: list[tuple[str, str]] = []
        """(block type, text shown) of the blocks opened so far."""

    def feed(self, event: StreamEvent) -> Iterator[str]:
        if isinstance(event, StreamStart):
            yield _event("message_start", message=self.dialect.opening(event.generation))
            yield _event("ping")
        elif isinstance(event, TextDelta) and event.index == 0:
            kind = "thinking" if event.channel == REASONING else "text"
            if not self.streamed or self.streamed[-1][0] != kind:
                if self.streamed:
                    yield from _block_end(len(self.streamed) - 1, self.streamed[-1][0])
                yield _event("content_block_start", index=len(self.streamed), content_block=_OPENED[kind])
                self.streamed.append((kind, ""))
            if event.text:
                yield _text_delta(len(self.streamed) - 1, kind, event.text)
                self.streamed[-1] = (kind, self.streamed[-1][1] + event.text)
        elif isinstance(event, StreamEnd):
            yield from self._end(event.generation)
        elif isinstance(event, StreamFailure):
            yield _event("error", error=self.dialect.error_body(event.error)["error"])

    def _end(self, generation: Generation) -> Iterator[str]:
        body = self.dialect.response_body(generation)
        for index, block in enumerate(body["content"]):
            if index < len(self.streamed) and self.streamed[index][0] == block["type"]:
                if index == len(self.streamed) - 1:  # earlier streamed blocks were closed when the next opened
                    kind, shown = self.streamed[index]
                    text = block[_DELTAS[kind][1]]
                    if text.startswith(shown) and len(text) > len(shown):
                        yield _text_delta(index, kind, text[len(shown) :])
                    yield from _block_end(index, kind)
            else:
                yield from _block_events(index, block)
        delta = {"stop_reason": body["stop_reason"], "stop_sequence": None}
        yield _event("message_delta", delta=delta, usage={"output_tokens": generation.completion_tokens})
        yield _event("message_stop")


def _block_events(index: int, block: dict[str, Any]) -> Iterator[str]:
    """A whole block: start, its content as one delta, stop."""
    kind = block["type"]
    yield _event("content_block_start", index=index, content_block=_OPENED.get(kind) or {**block, "input": {}})
    if kind == "tool_use":
        partial = json.dumps(block["input"], ensure_ascii=False)
        yield _event("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": partial})
    elif kind == "thinking" or (kind == "text" and block["text"]):
        yield _text_delta(index, kind, block[_DELTAS[kind][1]])
    yield from _block_end(index, kind)


__all__ = ["MessagesDialect", "content_blocks", "parse_messages"]
