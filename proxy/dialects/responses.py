"""OpenAI Responses API (what Codex CLI speaks): ``input`` items into a Conversation, and the response
object and its typed stream events (with ``sequence_number``) back out of a Generation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from rollwire.proxy.conversation import Conversation, Generation, Message, Sampling, StreamEvent, ToolCall
from rollwire.proxy.dialects.fields import (
    flag,
    named_choice,
    number,
    openai_choice_mode,
    output_format,
    requested_model,
)
from rollwire.proxy.dialects.responses_stream import ResponsesStream, message_item, reasoning_item
from rollwire.proxy.dialects.responses_tools import flat_name, parse_tools
from rollwire.proxy.dialects.streaming import render, rendered, replay

from rollwire.errors import InvalidRequest, RollwireError

MESSAGE_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def _text(content: Any, where: str) -> str:
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


class _Items:
    """Folds Responses input items into chat messages: function calls join the assistant turn before them,
    reasoning items attach to the assistant turn after them."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.reasoning: str | None = None

    def _assistant(self, content: str = "", calls: tuple[ToolCall, ...] = ()) -> None:
        last = self.messages[-1] if self.messages else None
        if calls and last is not None and last.role == "assistant" and self.reasoning is None:
            self.messages[-1] = Message(
                "assistant", last.content, last.reasoning, last.tool_calls + calls, None, last.name
            )
            return
        self.messages.append(Message("assistant", content, self.reasoning, calls))
        self.reasoning = None

    def add(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in MESSAGE_ROLES:
                raise InvalidRequest(f"{where}.role must be one of {sorted(MESSAGE_ROLES)}", param=f"{where}.role")
            text = _text(item.get("content"), f"{where}.content")
            if role == "assistant":
                self._assistant(text)
            else:
                self.messages.append(Message(MESSAGE_ROLES[role], text))
        elif kind == "function_call":
            name, call_id, namespace = item.get("name"), item.get("call_id"), item.get("namespace")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise InvalidRequest(f"{where}: a function_call needs name and call_id", param=f"{where}.call_id")
            if namespace is not None:
                if not isinstance(namespace, str):
                    raise InvalidRequest(f"{where}.namespace must be a string", param=f"{where}.namespace")
                name = flat_name(namespace, name)
            args = item.get("arguments", "{}")
            self._assistant(calls=(ToolCall(call_id, name, args if isinstance(args, str) else json.dumps(args)),))
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise InvalidRequest(f"{where}: a function_call_output needs call_id", param=f"{where}.call_id")
            self.messages.append(Message("tool", _text(item.get("output"), f"{where}.output"), tool_call_id=call_id))
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            self.reasoning = _text(parts, f"{where}.content") or None
        else:
            raise InvalidRequest(f"{where}.type {kind!r} is not supported by this proxy", param=f"{where}.type")


def _tool_choice(raw: Any, tools: tuple[dict[str, Any], ...]) -> str:
    mode = openai_choice_mode(raw, tools)
    if mode is not None:
        return mode
    name = raw.get("name") if isinstance(raw, dict) and raw.get("type") == "function" else None
    if not isinstance(name, str):
        raise InvalidRequest(
            "tool_choice must be auto, none, required or {'type':'function','name':...}", param="tool_choice"
        )
    return named_choice(name, tools, "tool_choice", "tool_choice names")


def _check_unsupported(body: dict[str, Any]) -> None:
    """Fields whose meaning the proxy cannot honour are refused by name rather than silently ignored."""
    if body.get("background"):
        raise InvalidRequest("background responses are not supported", param="background")


def _text_format(text: Any) -> dict[str, Any] | None:
    """``text.format`` (json_schema / json_object) as the upstream's structured output."""
    if text is not None and not isinstance(text, dict):
        raise InvalidRequest("text must be an object", param="text")
    return output_format((text or {}).get("format"), "text.format")


def _ids(generation: Generation) -> tuple[str, str]:
    """The response id and the suffix its item ids share, derived from the generation id."""
    suffix = generation.id.split("-", 1)[-1]
    return "resp_" + suffix, suffix


class ResponsesDialect:
    """The module-level instance parses requests and reads stored answers back; ``for_request`` gives the one
    that answers a request, bound to its namespaced tools so calls of them go out with namespace + name."""

    name = "responses"

    def __init__(self, namespaced: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.namespaced = dict(namespaced or {})
        """Flat tool name -> (namespace, tool name), from the request's ``namespace`` tools."""

    def for_request(self, body: dict[str, Any]) -> ResponsesDialect:
        """The dialect that answers ``body`` (already checked by ``parse_request``)."""
        namespaced = parse_tools(body.get("tools")).namespaced
        return ResponsesDialect(namespaced) if namespaced else self

    def parse_request(self, body: Any) -> Conversation:
        model = requested_model(body)
        _check_unsupported(body)
        items = _Items()
        instructions = body.get("instructions")
        if instructions is not None:
            if not isinstance(instructions, str):
                raise InvalidRequest("instructions must be a string", param="instructions")
            items.messages.append(Message("system", instructions))
        raw = body.get("input")
        if isinstance(raw, str):
            items.messages.append(Message("user", raw))
        elif isinstance(raw, list) and raw:
            for i, item in enumerate(raw):
                items.add(item, f"input[{i}]")
        else:
            raise InvalidRequest("input must be a string or a non-empty list of items", param="input")
        tools = parse_tools(body.get("tools")).functions
        sampling = Sampling(
            max_tokens=number(body, "max_output_tokens", int, 1, 1 << 30),
            temperature=number(body, "temperature", float, 0, 2),
            top_p=number(body, "top_p", float, 1e-9, 1),
            structured=_text_format(body.get("text")),
        )
        return Conversation(
            model=model,
            messages=tuple(items.messages),
            tools=tools,
            tool_choice=_tool_choice(body.get("tool_choice"), tools),
            sampling=sampling,
            stream=flag(body, "stream"),
            parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        )

    def output(self, generation: Generation) -> list[dict[str, Any]]:
        """The response's output items: reasoning, the message (always, unless only tool calls), calls."""
        _, suffix = _ids(generation)
        message = generation.choices[0].message
        out: list[dict[str, Any]] = []
        if message.reasoning is not None:
            out.append(reasoning_item(suffix, message.reasoning))
        if message.content or not message.tool_calls:
            out.append(message_item(suffix, message.content))
        for i, call in enumerate(message.tool_calls):
            item = {"type": "function_call", "id": f"fc_{suffix}_{i}", "call_id": call.id, "name": call.name}
            if call.name in self.namespaced:
                item["namespace"], item["name"] = self.namespaced[call.name]
            out.append({**item, "arguments": call.arguments, "status": "completed"})
        return out

    def envelope(self, generation: Generation, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        response_id, _ = _ids(generation)
        finish = generation.choices[0].finish_reason if generation.choices else None
        incomplete = status == "incomplete"
        return {
            "id": response_id,
            "object": "response",
            "created_at": generation.created,
            "status": status,
            "model": generation.model,
            "output": output,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "temperature": None,
            "top_p": None,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "store": False,
            "usage": self._usage(generation) if status != "in_progress" else None,
            "weight_version": generation.policy_version,
            "finish_reason": finish,
        }

    def _usage(self, generation: Generation) -> dict[str, Any]:
        return {
            "input_tokens": generation.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": generation.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": generation.prompt_tokens + generation.completion_tokens,
        }

    def _status(self, generation: Generation) -> str:
        return "incomplete" if generation.choices[0].finish_reason == "length" else "completed"

    def response_body(self, generation: Generation) -> dict[str, Any]:
        return self.envelope(generation, self._status(generation), self.output(generation))

    def answer_message(self, response_body: dict[str, Any], index: int) -> Message:
        items = _Items()
        for i, item in enumerate(response_body["output"]):
            items.add(item, f"output[{i}]")
        messages = [m for m in items.messages if m.role == "assistant"]
        return messages[0] if messages else Message("assistant", "")

    def stream(self, events: AsyncIterator[StreamEvent], conv: Conversation) -> AsyncIterator[str]:
        return render(ResponsesStream(self), events)

    def stream_events(self, generation: Generation, conv: Conversation) -> Iterator[str]:
        return rendered(ResponsesStream(self), replay(generation))

    def error_body(self, exc: RollwireError) -> dict[str, Any]:
        return {"error": {"message": exc.message, "type": exc.code, "param": exc.param, "code": exc.code}}


__all__ = ["ResponsesDialect"]
