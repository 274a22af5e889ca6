"""OpenAI Responses API (what Codex CLI speaks): ``input`` items into a Conversation, and the response
object and its typed stream events (with ``sequence_number``) back out of a Generation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

from rollwire.errors import InvalidRequest, RollwireError, openai_error
from rollwire.proxy.conversation import (
    Conversation,
    Generation,
    Message,
    OutputFormat,
    Sampling,
    StreamEvent,
    ToolCall,
)
from rollwire.proxy.dialects.base import Accepted, History
from rollwire.proxy.dialects.fields import (
    flag,
    named_choice,
    number,
    openai_choice_mode,
    output_format,
    requested_model,
)
from rollwire.proxy.dialects.parsed import WHOLE, Reading
from rollwire.proxy.dialects.responses_history import expand_previous
from rollwire.proxy.dialects.responses_items import Items
from rollwire.proxy.dialects.responses_stream import ResponsesStream, message_item, reasoning_item
from rollwire.proxy.dialects.responses_tools import CUSTOM_INPUT, ResponsesTools, parse_tools
from rollwire.proxy.dialects.streaming import render, rendered, replay


def _tool_choice(raw: Any, tools: tuple[dict[str, Any], ...]) -> str:
    mode = openai_choice_mode(raw, tools)
    if mode is not None:
        return mode
    name = raw.get("name") if isinstance(raw, dict) and raw.get("type") in ("function", "custom") else None
    if not isinstance(name, str):
        raise InvalidRequest(
            "tool_choice must be auto, none, required or {'type':'function'|'custom','name':...}", param="tool_choice"
        )
    return named_choice(name, tools, "tool_choice", "tool_choice names")


def _check_unsupported(body: dict[str, Any]) -> None:
    """Fields whose meaning the proxy cannot honour are refused by name rather than silently ignored."""
    if body.get("background"):
        raise InvalidRequest("background responses are not supported", param="background")


def _text_format(text: Any) -> OutputFormat | None:
    """``text.format`` (json_schema / json_object) as the upstream's structured output."""
    if text is not None and not isinstance(text, dict):
        raise InvalidRequest("text must be an object", param="text")
    return output_format((text or {}).get("format"), "text.format")


def _ids(generation: Generation) -> tuple[str, str]:
    """The response id and the suffix its item ids share, derived from the generation id."""
    suffix = generation.id.split("-", 1)[-1]
    return "resp_" + suffix, suffix


def _custom_input(arguments: str) -> str:
    """The freeform input of a sampled call of a custom tool: its one string argument (shown as ``input``);
    arguments of another shape go back as the text the model wrote."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(parsed, dict) and len(parsed) == 1 and isinstance(parsed.get(CUSTOM_INPUT), str):
        return str(parsed[CUSTOM_INPUT])
    return arguments


class ResponsesDialect:
    """The module-level instance parses requests and reads stored answers back; ``for_request`` gives the one
    that answers a request, bound to its tools: calls of namespaced tools go out with namespace + name, calls
    of freeform tools as ``custom_tool_call``, and the hosted tools left out are named on the answer."""

    name = "responses"
    path = "/responses"
    entries_key = "input"
    count_tokens_path: str | None = None

    def __init__(self, tools: ResponsesTools | None = None) -> None:
        self.tools = tools or ResponsesTools()

    async def accept(self, raw: Any, sent: bytes | None, history: History) -> Accepted:
        """The request with the input of the answer it continues (``previous_response_id``) read from the store,
        answered by the dialect bound to its tools (``for_request``)."""
        expanded = await expand_previous(history.store, history.rollout_id, raw)
        if expanded is not raw:
            raw, sent = expanded, None
        conv = self.parse_request(raw, history.reading(self.name))
        return Accepted(conv, self.for_request(raw), raw, sent)

    def for_request(self, body: dict[str, Any]) -> ResponsesDialect:
        """The dialect that answers ``body`` (already checked by ``parse_request``)."""
        return ResponsesDialect(parse_tools(body))

    def parse_request(self, body: Any, reading: Reading = WHOLE) -> Conversation:
        model = requested_model(body)
        _check_unsupported(body)
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise InvalidRequest("instructions must be a string", param="instructions")
        opening = (Message("system", instructions),) if instructions is not None else ()
        raw = body.get("input")
        if isinstance(raw, str):
            items = Items(opening=(*opening, Message("user", raw)))
        elif isinstance(raw, list) and raw:
            items = reading.folded(instructions, raw, partial(Items, "input", opening))
        else:
            raise InvalidRequest("input must be a string or a non-empty list of items", param="input")
        tools = parse_tools(body).functions
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

    def call_item(self, suffix: str, i: int, call: ToolCall) -> dict[str, Any]:
        """One sampled call as an output item: ``custom_tool_call`` for a freeform tool, else ``function_call``."""
        item: dict[str, Any]
        if call.name in self.tools.custom:
            item = {"type": "custom_tool_call", "id": f"ctc_{suffix}_{i}", "call_id": call.id, "name": call.name}
            extra = {"input": _custom_input(call.arguments)}
        else:
            item = {"type": "function_call", "id": f"fc_{suffix}_{i}", "call_id": call.id, "name": call.name}
            extra = {"arguments": call.arguments}
        if call.name in self.tools.namespaced:
            item["namespace"], item["name"] = self.tools.namespaced[call.name]
        return {**item, **extra, "status": "completed"}

    def output(self, generation: Generation) -> list[dict[str, Any]]:
        """The response's output items: reasoning, the message (always, unless only tool calls), calls."""
        _, suffix = _ids(generation)
        message = generation.choices[0].message
        out: list[dict[str, Any]] = []
        if message.reasoning is not None:
            out.append(reasoning_item(suffix, message.reasoning))
        if message.content or not message.tool_calls:
            out.append(message_item(suffix, message.content))
        out += [self.call_item(suffix, i, call) for i, call in enumerate(message.tool_calls)]
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
            "left_out_tools": [dict(t) for t in self.tools.left_out],
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
        items = Items("output")
        for i, item in enumerate(response_body["output"]):
            items.add(item, i)
        messages = [m for m in items.messages if m.role == "assistant"]
        return messages[0] if messages else Message("assistant", "")

    def stream(self, events: AsyncIterator[StreamEvent], conv: Conversation) -> AsyncIterator[str]:
        return render(ResponsesStream(self), events)

    def stream_events(self, generation: Generation, conv: Conversation) -> Iterator[str]:
        return rendered(ResponsesStream(self), replay(generation))

    def error_body(self, exc: RollwireError) -> dict[str, Any]:
        return openai_error(exc)


__all__ = ["ResponsesDialect"]
