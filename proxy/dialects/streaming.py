"""What every dialect's stream shares: a renderer turns neutral events into SSE text, one event at a time, for
a live answer (``render``) and for a finished one (``replay``, the events a live stream would have sent)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import replace
from typing import Protocol

from rollwire.proxy.answer import CONTENT, REASONING
from rollwire.proxy.conversation import ChoiceEnd, Generation, StreamEnd, StreamEvent, StreamStart, TokenLogprobs


class Renderer(Protocol):
    def feed(self, event: StreamEvent) -> Iterable[str]:
        """The SSE text for ``event`` (possibly none)."""
        ...


def replay(generation: Generation) -> Iterator[StreamEvent]:
    """A finished generation as stream events: every choice's text arrives with its end."""
    yield StreamStart(replace(generation, choices=[], completion_tokens=0))
    for c in generation.choices:
        tail = []
        if c.message.reasoning is not None:
            tail.append((REASONING, c.message.reasoning))
        if c.message.content:
            tail.append((CONTENT, c.message.content))
        logprobs = TokenLogprobs(c.tokens, c.logprobs, c.top_logprobs) if c.tokens is not None else None
        yield ChoiceEnd(c, tuple(tail), logprobs)
    yield StreamEnd(generation)


def rendered(renderer: Renderer, events: Iterable[StreamEvent]) -> Iterator[str]:
    for event in events:
        yield from renderer.feed(event)


async def render(renderer: Renderer, events: AsyncIterator[StreamEvent]) -> AsyncIterator[str]:
    async for event in events:
        for text in renderer.feed(event):
            yield text


__all__ = ["Renderer", "render", "rendered", "replay"]
