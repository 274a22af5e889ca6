"""The Responses API stream: the typed event sequence (response.created ... response.completed, each with a
``sequence_number``) the official SDK's accumulator and Codex CLI parse, rendered from finished output items.

The terminal event is always ``response.completed`` (its ``status`` says ``incomplete`` on a length cut):
harnesses such as Codex treat ``response.incomplete`` as a failed turn, which a short sample is not.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from rollwire.proxy.sse import named_event


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
    elif item["type"] == "reasoning":
        for c, part in enumerate(item["content"]):
            where = {"item_id": item_id, "output_index": index, "content_index": c}
            yield emit("response.reasoning_text.delta", **where, delta=part["text"])
            yield emit("response.reasoning_text.done", **where, text=part["text"])
    yield emit("response.output_item.done", output_index=index, item=item)


def response_events(opening: dict[str, Any], output: list[dict[str, Any]], final: dict[str, Any]) -> Iterator[str]:
    """``opening`` is the in-progress envelope, ``output`` the finished items, ``final`` the full response."""
    emit = _Events()
    yield emit("response.created", response=opening)
    yield emit("response.in_progress", response=opening)
    for index, item in enumerate(output):
        yield from _item_events(emit, index, item)
    yield emit("response.completed", response=final)


__all__ = ["response_events"]
