"""The Responses API stream: the typed event sequence (response.created ... response.completed, each with a
``sequence_number``) the official SDK's accumulator and Codex CLI parse. Reasoning and message text stream
into their items as they arrive; at the end every item is completed (or, if nothing streamed into it, sent
whole) from the finished response's output, so the deltas always add up to the final items. Tool calls are
sent whole at the end: ``function_call`` with ``response.function_call_arguments.delta/done``, a freeform
``custom_tool_call`` with ``response.custom_tool_call_input.delta/done``.

The terminal event is always ``response.completed`` (its ``status`` says ``incomplete`` on a length cut):
harnesses such as Codex treat ``response.incomplete`` as a failed turn, which a short sample is not.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, Protocol

from rollwire.proxy.answer import REASONING
from rollwire.proxy.conversation import Generation, StreamEnd, StreamEvent, StreamFailure, StreamStart, TextDelta
from rollwire.proxy.sse import named_event


def reasoning_item(suffix: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{suffix}",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def message_item(suffix: str, text: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": f"msg_{suffix}", "role": "assistant", "status": "completed", "content": [part]}


class _Events:
    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: str, **payload: Any) -> str:
        event = named_event(kind, {"type": kind, "sequence_number": self.seq, **payload})
        self.seq += 1
        return event


def _in_progress(item: dict[str, Any]) -> dict[str, Any]:
    """The item as first announced: same identity, empty text/arguments."""
    opened = copy.deepcopy(item)
    if item["type"] == "message":
        opened.update(status="in_progress", content=[])
    elif item["type"] == "function_call":
        opened.update(status="in_progress", arguments="")
    elif item["type"] == "custom_tool_call":
        opened.update(status="in_progress", input="")
    elif item["type"] == "reasoning":
        opened.update(content=[])
    return opened


def _item_events(emit: _Events, index: int, item: dict[str, Any]) -> Iterator[str]:
    yield emit("response.output_item.added", output_index=index, item=_in_progress(item))
    item_id = item["id"]
    if item["type"] == "message":
        for c, part in enumerate(item["content"]):
            where = {"item_id": item_id, "output_index": index, "content_index": c}
            yield emit("response.content_part.added", **where, part={**part, "text": ""})
            if part["text"]:
                yield emit("response.output_text.delta", **where, delta=part["text"], logprobs=[])
            yield emit("response.output_text.done", **where, text=part["text"], logprobs=[])
            yield emit("response.content_part.done", **where, part=part)
    elif item["type"] == "function_call":
        where = {"item_id": item_id, "output_index": index}
        if item["arguments"]:
            yield emit("response.function_call_arguments.delta", **where, delta=item["arguments"])
        yield emit("response.function_call_arguments.done", **where, arguments=item["arguments"], name=item["name"])
    elif item["type"] == "custom_tool_call":
        where = {"item_id": item_id, "output_index": index}
        if item["input"]:
            yield emit("response.custom_tool_call_input.delta", **where, delta=item["input"])
        yield emit("response.custom_tool_call_input.done", **where, input=item["input"])
    elif item["type"] == "reasoning":
        for c, part in enumerate(item["content"]):
            where = {"item_id": item_id, "output_index": index, "content_index": c}
            yield emit("response.reasoning_text.delta", **where, delta=part["text"])
            yield emit("response.reasoning_text.done", **where, text=part["text"])
    yield emit("response.output_item.done", output_index=index, item=item)


class ResponseShapes(Protocol):
    """What the stream needs from the dialect (responses.py) to shape envelopes and items."""

    def envelope(self, generation: Generation, status: str, output: list[dict[str, Any]]) -> dict[str, Any]: ...

    def output(self, generation: Generation) -> list[dict[str, Any]]: ...

    def response_body(self, generation: Generation) -> dict[str, Any]: ...


def _finish_item(emit: _Events, index: int, item: dict[str, Any], shown: str) -> Iterator[str]:
    """Complete an item text already streamed into: the rest of its text, then its done events."""
    text = item["content"][0]["text"]
    tail = text[len(shown) :] if text.startswith(shown) else ""
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    if item["type"] == "message":
        if tail:
            yield emit("response.output_text.delta", **where, delta=tail, logprobs=[])
        yield emit("response.output_text.done", **where, text=text, logprobs=[])
        yield emit("response.content_part.done", **where, part=item["content"][0])
    else:
        if tail:
            yield emit("response.reasoning_text.delta", **where, delta=tail)
        yield emit("response.reasoning_text.done", **where, text=text)
    yield emit("response.output_item.done", output_index=index, item=item)


class ResponsesStream:
    """Renders stream events (see ``dialects.streaming``); only choice 0 exists in this dialect."""

    def __init__(self, shapes: ResponseShapes) -> None:
        self.shapes = shapes
        self.emit = _Events()
        self.suffix = ""
        self.streamed: list[tuple[str, str]] = []
        """(item type, text shown) of the items opened so far, in output order."""

    def feed(self, event: StreamEvent) -> Iterator[str]:
        if isinstance(event, StreamStart):
            self.suffix = event.generation.id.split("-", 1)[-1]
            opening = self.shapes.envelope(event.generation, "in_progress", [])
            yield self.emit("response.created", response=opening)
            yield self.emit("response.in_progress", response=opening)
        elif isinstance(event, TextDelta) and event.index == 0:
            yield from self._delta(event)
        elif isinstance(event, StreamEnd):
            for index, item in enumerate(self.shapes.output(event.generation)):
                if index < len(self.streamed) and self.streamed[index][0] == item["type"]:
                    yield from _finish_item(self.emit, index, item, self.streamed[index][1])
                else:
                    yield from _item_events(self.emit, index, item)
            yield self.emit("response.completed", response=self.shapes.response_body(event.generation))
        elif isinstance(event, StreamFailure):
            exc = event.error
            yield self.emit("error", code=exc.code, message=exc.message, param=exc.param)

    def _delta(self, event: TextDelta) -> Iterator[str]:
        kind = "reasoning" if event.channel == REASONING else "message"
        index = len(self.streamed) - 1
        if not self.streamed or self.streamed[-1][0] != kind:
            index = len(self.streamed)
            build = reasoning_item if kind == "reasoning" else message_item
            item = build(self.suffix, "")
            yield self.emit("response.output_item.added", output_index=index, item=_in_progress(item))
            if kind == "message":
                where = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield self.emit("response.content_part.added", **where, part=item["content"][0])
            self.streamed.append((kind, ""))
        if event.text:
            item_id = f"rs_{self.suffix}" if kind == "reasoning" else f"msg_{self.suffix}"
            where = {"item_id": item_id, "output_index": index, "content_index": 0}
            name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            extra: dict[str, Any] = {} if kind == "reasoning" else {"logprobs": []}
            yield self.emit(name, **where, delta=event.text, **extra)
            self.streamed[index] = (kind, self.streamed[index][1] + event.text)


__all__ = ["ResponseShapes", "ResponsesStream", "message_item", "reasoning_item"]
