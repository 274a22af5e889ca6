"""Running a call: the engine's token chunks become dialect-neutral events as they arrive.

Text and reasoning stream as soon as they are certain (``answer.AnswerStream``); tool calls, finish reasons
and usage follow only once every choice's call is committed, so no client acts on an answer the store could
still lose. A stream that does not finish records what was sampled with ``finish_reason`` "abort": status
"partial" when the client left (the upstream request is closed at once, so the engine stops), "error" when
the upstream failed. Non-streamed answers take the same path (``whole_answer``), so a client that hangs up on one
stops its generation too. Neither kind is spliced or reconstructed into trajectories; both show in the traces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio

from rollwire.compact_json import json_text
from rollwire.errors import RollwireError, UpstreamError, UpstreamTimeout
from rollwire.metrics import add_upstream_time
from rollwire.proxy.answer import AnswerStream, Delta
from rollwire.proxy.call.base import Call
from rollwire.proxy.call.prepare import Prepared
from rollwire.proxy.call.record import record_answer, record_engine_failure
from rollwire.proxy.conversation import (
    Choice,
    ChoiceEnd,
    Conversation,
    Generation,
    StreamEnd,
    StreamEvent,
    StreamFailure,
    StreamStart,
    TextDelta,
    TokenLogprobs,
)
from rollwire.proxy.parsers.base import new_id
from rollwire.proxy.render import Renderer
from rollwire.proxy.upstream import ChoiceChunk, Opened, Sampled, chunks, completion_body, open_stream
from rollwire.store.schema import ENGINE_FAILED

if TYPE_CHECKING:
    from rollwire.proxy.call.path import CallPath

ABORTED = "abort"


@dataclass
class _Choice:
    """One choice as it streams: its parser, what was sampled so far, and how much logprob data was sent."""

    answer: AnswerStream
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    sent: int = 0

    @property
    def ids(self) -> list[int]:
        return self.answer.ids

    def add(self, chunk: ChoiceChunk) -> None:
        self.logprobs.extend(chunk.logprobs)
        self.top_logprobs.extend(chunk.top_logprobs or [])
        self.tokens.extend(chunk.tokens or [])
        self.finish_reason = chunk.finish_reason or self.finish_reason

    def sampled(self, finish_reason: str | None = None) -> Sampled:
        tokens = self.tokens if len(self.tokens) == len(self.ids) else None
        top = self.top_logprobs if len(self.top_logprobs) == len(self.ids) else None
        return Sampled(self.ids, self.logprobs, finish_reason or self.finish_reason or "stop", top, tokens)

    def unsent(self, renderer: Renderer) -> TokenLogprobs:
        """Logprobs of the tokens sampled since the last call (for dialects that stream them)."""
        start, self.sent = self.sent, len(self.ids)
        ids = self.ids[start:]
        tokens = self.tokens[start:] if len(self.tokens) == len(self.ids) else renderer.token_strings(ids)
        top = self.top_logprobs[start:] if len(self.top_logprobs) == len(self.ids) else None
        return TokenLogprobs(tokens, self.logprobs[start:], top)


class LiveGeneration:
    """``events()`` once; made by ``start_live`` after the engine accepted the request."""

    def __init__(
        self, path: CallPath, call: Call, prepared: Prepared, opened: Opened, deltas: bool = True,
        sent: float | None = None,
    ) -> None:  # fmt: skip
        self.sent = sent
        """``perf_counter()`` when the upstream request was sent: the engine's share of the latency starts here."""
        self.deltas = deltas
        """False for a whole answer: its text is parsed once at the end, nobody reads deltas."""
        self.path = path
        self.call = call
        self.conv = call.conv
        self.prepared = prepared
        self.response = opened.response
        self.sent_prompt = opened.prompt
        self.choices = [_Choice(_answer_stream(path, call.conv, prepared.prefill)) for _ in range(call.conv.sampling.n)]
        self.generation: Generation | None = None
        self.recorded = False
        self.gone = False
        """The client left (``client_left``)."""

    def _logprobs(self, choice: _Choice) -> TokenLogprobs | None:
        return choice.unsent(self.path.renderer) if self.conv.sampling.top_logprobs is not None else None

    def client_left(self) -> None:
        """The client hung up: drop the upstream connection (the engine stops); the stream then ends as cut short,
        and what was sampled is recorded as partial."""
        self.gone = True
        self.response.close()

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        failure: RollwireError | None = None
        try:
            async with aclosing(self._stream()) as stream:
                async for event in stream:
                    yield event
        except RollwireError as exc:
            failure = None if self.gone else exc  # the connection was dropped for a client that left
        except Exception as exc:  # a bug: still record what was sampled, as an error, then let it surface
            failure = RollwireError(f"internal error: {exc.__class__.__name__}")
            raise
        finally:  # also on cancellation (client left): nothing below may be interrupted
            self.response.close()  # mid-answer: drops the connection, so the engine stops
            if not self.recorded:
                with anyio.CancelScope(shield=True):
                    await self._record_unfinished(failure)
                self.path.settling.settle()  # no answer left to wait for
        if failure is not None:
            yield StreamFailure(failure)

    async def _stream(self) -> AsyncGenerator[StreamEvent, None]:
        plan = self.prepared.plan
        upstream = self.path.settings.upstream
        async for batch in chunks(self.response, upstream, prompt=self.sent_prompt):
            for chunk in batch:
                if self.generation is None:
                    version = chunk.weight_version
                    self.generation = _generation(self.path, self.conv, len(plan.prompt_ids), version)
                    yield StreamStart(self.generation)
                for part in chunk.choices:
                    if part.prompt_ids is not None and part.prompt_ids != plan.prompt_ids:
                        raise UpstreamError("the upstream reports a different prompt than the proxy sent")
                    if not 0 <= part.index < len(self.choices):
                        raise UpstreamError(f"the upstream streamed choice {part.index} of {len(self.choices)}")
                    choice = self.choices[part.index]
                    choice.add(part)
                    if not self.deltas:
                        choice.answer.ids.extend(part.token_ids)
                        continue
                    for channel, text in choice.answer.feed(part.token_ids):
                        yield TextDelta(part.index, channel, text, self._logprobs(choice))
        if self.sent is not None:
            add_upstream_time(time.perf_counter() - self.sent)
        if self.generation is None:
            raise UpstreamError("the upstream's stream ended before any token")
        generation, tails = self._finished()
        body = self.call.dialect.response_body(generation)
        text = json_text(body)
        with anyio.CancelScope(shield=True):  # a client leaving now must not half-record the answer
            self.recorded = True
            ids = await record_answer(self.path, self.call, self.prepared, body, text, generation)
        generation.call_ids.extend(ids)
        # back to back, no waiting in between: a dialect's stream sends a choice's end with what follows it
        for c, tail, choice in zip(generation.choices, tails, self.choices):
            yield ChoiceEnd(c, tuple(tail), self._logprobs(choice))
        yield StreamEnd(generation, text)

    def _finished(self, finish_reason: str | None = None) -> tuple[Generation, list[Any]]:
        assert self.generation is not None
        generation, tails = self.generation, []
        for i, choice in enumerate(self.choices):
            c, tail = _finished_choice(self.path, i, choice.answer, choice.sampled(finish_reason), self.conv)
            generation.choices.append(c)
            tails.append(tail)
        generation = replace(generation, completion_tokens=sum(len(c.sampled_ids) for c in generation.choices))
        self.generation = generation
        return generation, tails

    async def _record_unfinished(self, failure: RollwireError | None) -> None:
        """What was sampled before the client left (or the upstream failed), marked as such. An engine that failed
        is recorded even when nothing was sampled: the rollout's ending is then the platform's."""
        sampled = sum(len(c.ids) for c in self.choices)
        engine_failed = isinstance(failure, ENGINE_ERRORS)
        if self.generation is None or self.generation.choices or (sampled == 0 and not engine_failed):
            return
        self.recorded = True
        if sampled == 0 and isinstance(failure, ENGINE_ERRORS):
            await record_engine_failure(self.path, self.call, self.prepared, failure.message)
            return
        generation, _ = self._finished(ABORTED)
        status = ENGINE_FAILED if engine_failed else "error" if failure is not None else "partial"
        why = failure.message if failure is not None else "the client left"
        body = self.call.dialect.response_body(generation)
        await record_answer(
            self.path, self.call, self.prepared, body, json_text(body), generation,
            status=status, error=f"{why} after {sampled} sampled tokens",
        )  # fmt: skip


ENGINE_ERRORS = (UpstreamError, UpstreamTimeout)
"""The engine failed (unreachable, 5xx, a timeout, a malformed answer): the platform's failure, not the rollout's."""


def _answer_stream(path: CallPath, conv: Conversation, prefill: str) -> AnswerStream:
    """A fresh parser of one choice's sampled ids (tool calls only when the request allows them)."""
    tools = path.tools if conv.tools and conv.tool_choice != "none" else None
    return AnswerStream(path.renderer, path.reasoning, tools, conv.sampling.stop, prefill, conv.parallel_tool_calls)


def _finished_choice(
    path: CallPath, index: int, answer: AnswerStream, sampled: Sampled, conv: Conversation
) -> tuple[Choice, list[Delta]]:
    """The finished choice from its parser, and the deltas a stream has not shown yet."""
    message, tail = answer.finish(cut_off=sampled.finish_reason == "length")
    finish = "tool_calls" if message.tool_calls and sampled.finish_reason == "stop" else sampled.finish_reason
    tokens = None
    if conv.sampling.top_logprobs is not None:
        tokens = sampled.tokens or path.renderer.token_strings(sampled.token_ids)
    choice = Choice(index, message, finish, sampled.token_ids, sampled.logprobs, sampled.top_logprobs, tokens)
    return choice, tail


def _generation(path: CallPath, conv: Conversation, prompt_len: int, reported_version: int | None) -> Generation:
    """Id, time, usage and policy version of an answer; choices are added as they finish."""
    return Generation(
        id=new_id("chatcmpl-"),
        created=int(time.time()),
        model=conv.model,
        choices=[],
        prompt_tokens=prompt_len,
        completion_tokens=0,
        policy_version=path.served.version(reported_version),
    )


async def whole_answer(live: LiveGeneration, client_left: Callable[[], Awaitable[None]]) -> str | None:
    """A non-streamed answer's body text, generated over the same streamed path: when ``client_left`` returns
    (the client hung up) the generation stops and what was sampled is recorded as partial. None then.

    The watch closes the upstream connection rather than cancelling this task: the engine stops all the same,
    and the stream ends as any stream the upstream cuts short (a task group and its cancel scopes cost ~5% of
    a whole answer's CPU, measured with ``bench/proxy.py``)."""

    async def watch() -> None:
        await client_left()
        live.client_left()

    watcher = asyncio.ensure_future(watch())
    finished: str | None = None
    try:
        async with aclosing(live.events()) as stream:
            async for event in stream:
                if isinstance(event, StreamFailure):
                    raise event.error
                if isinstance(event, StreamEnd):
                    finished = event.body_text
    finally:
        watcher.cancel()
    return finished


async def start_live(path: CallPath, call: Call, prepared: Prepared) -> LiveGeneration:
    """Open the engine's stream for a prepared call (errors so far are ordinary HTTP errors); ``events()``
    follow. A whole answer's text is parsed once at its end: nobody reads its deltas."""
    plan, sampling = prepared.plan, prepared.sampling
    salt = path.cache_salts.salt(call.caller)
    body = completion_body(prepared.model, plan.prompt_ids, sampling, path.stop_ids, prepared.stream_interval, salt)
    sent = time.perf_counter()
    opened = await open_stream(path.client, body, prepared.prompt_json)
    return LiveGeneration(path, call, prepared, opened, deltas=call.conv.stream, sent=sent)


__all__ = ["ABORTED", "ENGINE_ERRORS", "LiveGeneration", "start_live", "whole_answer"]
