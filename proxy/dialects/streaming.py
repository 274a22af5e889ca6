"""What every dialect's stream shares: a renderer turns neutral events into SSE text, one event at a time, for
a live answer (``render``: sent in as few writes as the events allow) and for a finished one (``replay``, the
events a live stream would have sent)."""

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
    """A live answer's SSE text in as few pieces as its events allow, each piece one write to the client's socket
    (a system call, and a wake-up of the client): what one event renders goes out together, and a choice's end
    waits for the event after it, since the live stream yields every choice's end and then the stream's end back
    to back once the call is committed (``live.LiveGeneration``). A streamed answer's tail of two tool calls (each
    call's name and arguments, the finish reason, usage, ``[DONE]``) was seven writes; it is one."""
    held = ""
    async for event in events:
        held += "".join(renderer.feed(event))
        if held and not isinstance(event, ChoiceEnd):
            yield held
            held = ""
    if held:  # the events stopped after a choice's end (a generator closed early): what it rendered still goes
        yield held


__all__ = ["Renderer", "render", "rendered", "replay"]
