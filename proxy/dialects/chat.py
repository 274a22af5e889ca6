"""OpenAI Chat Completions: request validation into a Conversation, response/stream/error bodies back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from rollwire.errors import InvalidRequest, RollwireError, openai_error
from rollwire.proxy.answer import REASONING
from rollwire.proxy.conversation import (
    ChoiceEnd,
    Conversation,
    Generation,
    Message,
    Sampling,
    StreamEnd,
    StreamEvent,
    StreamFailure,
    StreamStart,
    TextDelta,
    TokenLogprobs,
    ToolCall,
)
from rollwire.proxy.dialects.base import Accepted, History
from rollwire.proxy.dialects.fields import (
    checked_schema,
    flag,
    named_choice,
    number,
    openai_choice_mode,
    output_format,
    requested_model,
)
from rollwire.proxy.dialects.parsed import WHOLE, Reading
from rollwire.proxy.dialects.streaming import render, rendered, replay
from rollwire.proxy.sse import DONE, data_event

ROLES = {"system", "developer", "user", "assistant", "tool"}
MAX_N = 16


def _text(content: Any, where: str) -> str:
    """String content, or the text of content parts (other part types are refused, naming the field)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be a string or a list of content parts", param=f"{where}.content")
    out = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise InvalidRequest(f"{where}.content[{i}]: unsupported content part {kind!r}", param=f"{where}.content")
        out.append(str(part.get("text", "")))
    return "".join(out)


def _tool_calls(raw: Any, where: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest(f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
    calls = []
    for i, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidRequest(f"{where}.tool_calls[{i}] needs function.name", param=f"{where}.tool_calls")
        args = fn.get("arguments", "{}")
        calls.append(ToolCall(str(call.get("id", "")), fn["name"], args if isinstance(args, str) else json.dumps(args)))
    return tuple(calls)


def _message(raw: Any, i: int) -> tuple[Message]:
    """Entry ``i`` of ``messages`` (one message: the shape ``Reading.messages`` takes, where an entry may be several)."""
    where = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where} must be an object", param=where)
    role = raw.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidRequest(f"{where}.role must be one of {sorted(ROLES)}, got {role!r}", param=f"{where}.role")
    if role == "tool" and not isinstance(raw.get("tool_call_id"), str):
        raise InvalidRequest(f"{where}: a tool message needs tool_call_id", param=f"{where}.tool_call_id")
    reasoning = raw.get("reasoning_content", raw.get("reasoning"))
    return (
        Message(
            role="system" if role == "developer" else role,
            content=_text(raw.get("content"), where),
            reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
            tool_calls=_tool_calls(raw.get("tool_calls"), where) if role == "assistant" else (),
            tool_call_id=raw.get("tool_call_id") if role == "tool" else None,
            name=raw.get("name") if isinstance(raw.get("name"), str) else None,
        ),
    )


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest("tools must be a list of function tools", param="tools")
    out = []
    for i, tool in enumerate(raw):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise InvalidRequest(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", param=f"tools[{i}]")
        params = checked_schema(
            fn.get("name"),
            fn.get("parameters", {"type": "object", "properties": {}}),
            f"tools[{i}].function.name",
            f"tools[{i}].function.parameters",
        )
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return tuple(out)


def _tool_choice(raw: Any, tools: tuple[dict[str, Any], ...]) -> str:
    mode = openai_choice_mode(raw, tools)
    if mode is not None:
        return mode
    name = (
        raw.get("function", {}).get("name") if isinstance(raw, dict) and isinstance(raw.get("function"), dict) else None
    )
    if not isinstance(name, str):
        raise InvalidRequest(
            "tool_choice must be auto, none, required or {'type':'function','function':{'name':...}}",
            param="tool_choice",
        )
    return named_choice(name, tools, "tool_choice", "tool_choice names")


def _sampling(body: dict[str, Any]) -> Sampling:
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise InvalidRequest("stop must be a string or a list of up to 4 strings", param="stop")
    max_tokens = number(body, "max_completion_tokens", int, 1, 1 << 30)
    top = number(body, "top_logprobs", int, 0, 20)
    return Sampling(
        max_tokens=max_tokens if max_tokens is not None else number(body, "max_tokens", int, 1, 1 << 30),
        temperature=number(body, "temperature", float, 0, 2),
        top_p=number(body, "top_p", float, 1e-9, 1),
        seed=number(body, "seed", int, -(1 << 63), 1 << 63),
        stop=stops,
        n=number(body, "n", int, 1, MAX_N) or 1,
        top_logprobs=(top or 0) if body.get("logprobs") else None,
        structured=output_format(body.get("response_format"), "response_format"),
    )


class ChatDialect:
    name = "chat"
    path = "/chat/completions"
    entries_key = "messages"
    count_tokens_path: str | None = None

    async def accept(self, raw: Any, sent: bytes | None, history: History) -> Accepted:
        return Accepted(self.parse_request(raw, history.reading(self.name)), self, raw, sent)

    def parse_request(self, body: Any, reading: Reading = WHOLE) -> Conversation:
        model = requested_model(body)
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise InvalidRequest("messages must be a non-empty list", param="messages")
        tools, tools_key = reading.tools(body.get("tools"), _tools)
        options = body.get("stream_options") or {}
        return Conversation(
            model=model,
            messages=reading.messages(raw, _message),
            tools=tools,
            tool_choice=_tool_choice(body.get("tool_choice"), tools),
            sampling=_sampling(body),
            stream=flag(body, "stream"),
            include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
            parallel_tool_calls=body.get("parallel_tool_calls") is not False,
            known_tools_key=tools_key,
        )

    def _message_body(self, message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": message.content or (None if message.tool_calls else "")}
        if message.reasoning is not None:
            out["reasoning_content"] = message.reasoning
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in message.tool_calls
            ]
        return out

    def _logprobs(self, run: TokenLogprobs | None) -> dict[str, Any] | None:
        if run is None:
            return None
        content = []
        for j, (token, lp) in enumerate(zip(run.tokens, run.logprobs)):
            tops = run.top_logprobs[j] if run.top_logprobs and j < len(run.top_logprobs) else {}
            content.append(
                {
                    "token": token,
                    "logprob": lp,
                    "bytes": list(token.encode()),
                    "top_logprobs": [
                        {"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in (tops or {}).items()
                    ],
                }
            )
        return {"content": content, "refusal": None}

    def _usage(self, gen: Generation) -> dict[str, int]:
        total = gen.prompt_tokens + gen.completion_tokens
        return {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens, "total_tokens": total}

    def response_body(self, generation: Generation) -> dict[str, Any]:
        choices = [
            {
                "index": c.index,
                "message": self._message_body(c.message),
                "logprobs": self._logprobs(
                    TokenLogprobs(c.tokens, c.logprobs, c.top_logprobs) if c.tokens is not None else None
                ),
                "finish_reason": c.finish_reason,
            }
            for c in generation.choices
        ]
        return {
            "id": generation.id,
            "object": "chat.completion",
            "created": generation.created,
            "model": generation.model,
            "choices": choices,
            "usage": self._usage(generation),
            "system_fingerprint": None,
            "weight_version": generation.policy_version,
        }

    def answer_message(self, response_body: dict[str, Any], index: int) -> Message:
        raw = next(c for c in response_body["choices"] if c["index"] == index)["message"]
        (message,) = _message(raw, index)
        return message

    def stream(self, events: AsyncIterator[StreamEvent], conv: Conversation) -> AsyncIterator[str]:
        return render(_ChatStream(self, conv), events)

    def stream_events(self, generation: Generation, conv: Conversation) -> Iterator[str]:
        return rendered(_ChatStream(self, conv), replay(generation))

    def error_body(self, exc: RollwireError) -> dict[str, Any]:
        return openai_error(exc)


class _ChatStream:
    """``chat.completion.chunk`` events: a role chunk opens each choice, text and reasoning stream as deltas,
    tool calls and the finish reason come with the choice's end, then usage and ``[DONE]``."""

    def __init__(self, dialect: ChatDialect, conv: Conversation) -> None:
        self.dialect = dialect
        self.conv = conv
        self.head: dict[str, Any] = {}
        self.opened: set[int] = set()
        self.usage_field: dict[str, Any] = {"usage": None} if conv.include_usage else {}

    def _chunk(self, index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> str:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return data_event({**self.head, "choices": [choice], **self.usage_field})

    def _open(self, index: int) -> Iterator[str]:
        if index not in self.opened:
            self.opened.add(index)
            yield self._chunk(index, {"role": "assistant", "content": ""})

    def _text(self, index: int, channel: str, text: str, logprobs: Any) -> str:
        key = "reasoning_content" if channel == REASONING else "content"
        return self._chunk(index, {key: text}, logprobs=logprobs)

    def feed(self, event: StreamEvent) -> Iterator[str]:
        if isinstance(event, StreamStart):
            g = event.generation
            self.head = {"id": g.id, "object": "chat.completion.chunk", "created": g.created, "model": g.model}
        elif isinstance(event, TextDelta):
            yield from self._open(event.index)
            yield self._text(event.index, event.channel, event.text, self.dialect._logprobs(event.logprobs))
        elif isinstance(event, ChoiceEnd):
            yield from self._end(event)
        elif isinstance(event, StreamEnd):
            if self.conv.include_usage:
                yield data_event({**self.head, "choices": [], "usage": self.dialect._usage(event.generation)})
            yield DONE
        elif isinstance(event, StreamFailure):
            yield data_event(self.dialect.error_body(event.error))
            yield DONE

    def _end(self, event: ChoiceEnd) -> Iterator[str]:
        c = event.choice
        yield from self._open(c.index)
        logprobs = self.dialect._logprobs(event.logprobs)
        for channel, text in event.tail:
            yield self._text(c.index, channel, text, logprobs)
            logprobs = None
        for i, call in enumerate(c.message.tool_calls):
            opening = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            yield self._chunk(c.index, {"tool_calls": [opening]})
            yield self._chunk(c.index, {"tool_calls": [{"index": i, "function": {"arguments": call.arguments}}]})
        yield self._chunk(c.index, {}, c.finish_reason, logprobs)


__all__ = ["ChatDialect"]
