"""POST /v1/completions: prompts in, batcher events out, as vLLM's completion body or its SSE chunks.

With ``return_token_ids`` each choice carries ``prompt_token_ids`` and ``token_ids`` (in a stream: the prompt
ids on a choice's first chunk, the new ids on every chunk), exactly where vLLM puts them; rollwire adds a
top-level ``weight_version`` to the body and to every chunk, and the ``X-Weight-Version`` header.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive

from rollwire.engine.batcher import Batcher, EngineFailure, GenerationRequest, TokenEvent
from rollwire.engine.model import LanguageModel
from rollwire.engine.protocol import (
    CompletionRequest,
    check_model,
    check_token_ids,
    sampling_params,
    validate_completion,
)
from rollwire.errors import RollwireError, UpstreamError

VERSION_HEADER = "X-Weight-Version"
T = TypeVar("T")
LOGPROB_FLOOR = -9999.0
"""vLLM's stand-in for -inf, which JSON cannot carry."""


@dataclass(slots=True)
class _Choice:
    """What has arrived for one choice so far."""

    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    events: list[TokenEvent] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None


async def _unless_disconnected(receive: Receive, work: Callable[[], Awaitable[T]]) -> T | None:
    """``work()``, or None as soon as the client disconnects (its body has been read, so receive only waits)."""
    result: T | None = None
    failure: RollwireError | None = None
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            result = await work()
        except RollwireError as exc:  # re-raised below, not wrapped in the task group's ExceptionGroup
            failure = exc
        group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


class CompletionService:
    """Turns one validated request into batcher requests and renders what comes back."""

    def __init__(self, model: LanguageModel, batcher: Batcher, served_name: str) -> None:
        self._model = model
        self._batcher = batcher
        self._served_name = served_name

    async def _prompts(self, request: CompletionRequest) -> list[list[int]]:
        prompt = request.prompt
        if isinstance(prompt, str):
            texts = [prompt]
        elif prompt and isinstance(prompt[0], str):
            texts = [str(p) for p in prompt]
        elif prompt and isinstance(prompt[0], int):
            return [[int(t) for t in prompt]]
        else:  # the protocol's union leaves None, [] or a list of id lists here
            return [[int(t) for t in p] for p in cast("list[list[int]]", prompt or [])]
        tokenizer = self._model.tokenizer

        def encode() -> list[list[int]]:
            return [list(tokenizer(t, add_special_tokens=request.add_special_tokens)["input_ids"]) for t in texts]

        return await anyio.to_thread.run_sync(encode)

    async def respond(self, request: CompletionRequest, receive: Receive) -> Response:
        """The completion body or stream; a client that disconnects has its sequences dropped from the batch."""
        check_model(request.model, self._served_name)
        validate_completion(request)
        prompts = await self._prompts(request)
        for ids in prompts:
            check_token_ids(ids, self._model.vocab_size, "prompt")
        grammar = await anyio.to_thread.run_sync(self._model.grammars.compile, request.structured_outputs)
        params = [sampling_params(request, len(ids), self._model.max_model_len, grammar) for ids in prompts]
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[list[TokenEvent] | EngineFailure] = asyncio.Queue()

        def sink(item: list[TokenEvent] | EngineFailure) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the server's event loop has closed: nobody is left to read these
                pass

        jobs = [
            GenerationRequest(ids, p, sink, n=request.n, first_index=i * request.n, cache_salt=request.cache_salt)
            for i, (ids, p) in enumerate(zip(prompts, params, strict=True))
        ]
        choices = [_Choice(prompt_ids=ids) for ids in prompts for _ in range(request.n)]
        run = _Run(self, request, jobs, choices, queue)
        for job in jobs:
            self._batcher.submit(job)
        try:
            first = await _unless_disconnected(receive, run.next_delivery)
            if first is None:
                run.cancel()
                return Response(status_code=499)  # the client left; nobody reads this
            if request.stream:
                return StreamingResponse(
                    run.stream(first), media_type="text/event-stream", headers={VERSION_HEADER: str(run.version)}
                )
            if await _unless_disconnected(receive, run.collect) is None:
                run.cancel()
                return Response(status_code=499)
        except BaseException:
            run.cancel()
            raise
        run.cancel()
        return JSONResponse(run.body(), headers={VERSION_HEADER: str(run.version)})

    def logprobs_block(
        self, events: list[TokenEvent], top_n: int, text_offset: int, as_ids: bool = False
    ) -> dict[str, Any]:
        """vLLM's completions logprobs: tokens, token_logprobs, top_logprobs (sampled first), text_offset.

        Tokens are their decoded text (two ids with the same text share one top_logprobs key, as in vLLM), or
        ``token_id:<id>`` with ``return_tokens_as_token_ids``.
        """

        def decode(ids: list[int]) -> str:
            return f"token_id:{ids[0]}" if as_ids else self._model.decode_text(ids)

        tokens: list[str] = []
        token_logprobs: list[float] = []
        top_logprobs: list[dict[str, float]] = []
        offsets: list[int] = []
        for event in events:
            token = decode([event.sample.token_id])
            offsets.append(text_offset)
            text_offset += len(token)
            tokens.append(token)
            token_logprobs.append(max(event.sample.logprob, LOGPROB_FLOOR))
            ranked: dict[int, float] = {event.sample.token_id: event.sample.logprob}
            for token_id, logprob in event.sample.top:
                ranked.setdefault(token_id, logprob)
            entries = list(ranked.items())[: top_n + 1]
            top_logprobs.append({decode([t]): max(lp, LOGPROB_FLOOR) for t, lp in entries})
        return {
            "text_offset": offsets,
            "token_logprobs": token_logprobs,
            "tokens": tokens,
            "top_logprobs": top_logprobs,
        }

    @property
    def served_name(self) -> str:
        return self._served_name


class _Run:
    """One request in flight: its choices, its queue, and how to end it early."""

    def __init__(
        self,
        service: CompletionService,
        request: CompletionRequest,
        jobs: list[GenerationRequest],
        choices: list[_Choice],
        queue: asyncio.Queue[list[TokenEvent] | EngineFailure],
    ) -> None:
        self.service = service
        self.request = request
        self.jobs = jobs
        self.choices = choices
        self.queue = queue
        self.open = len(choices)
        self.version = -1
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    async def next_delivery(self) -> list[TokenEvent]:
        item = await self.queue.get()
        if isinstance(item, EngineFailure):
            raise UpstreamError(item.message)
        if self.version < 0:
            self.version = item[0].weight_version
        for event in item:
            choice = self.choices[event.index]
            choice.events.append(event)
            choice.token_ids.append(event.sample.token_id)
            choice.text += event.text
            if event.finish_reason is not None:
                choice.finish_reason, choice.stop_reason = event.finish_reason, event.stop_reason
                self.open -= 1
        return item

    def cancel(self) -> None:
        if self.open > 0:
            for job in self.jobs:
                job.cancelled.set()
            self.service._batcher.wake()

    async def collect(self) -> bool:
        while self.open > 0:
            await self.next_delivery()
        return True

    def _usage(self) -> dict[str, Any]:
        prompt_tokens = sum(len(job.prompt_ids) for job in self.jobs)
        completion_tokens = sum(len(c.token_ids) for c in self.choices)
        return {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }

    def body(self) -> dict[str, Any]:
        with_ids = bool(self.request.return_token_ids)
        top_n = self.request.logprobs
        as_ids = bool(self.request.return_tokens_as_token_ids)
        choices = [
            {
                "index": i,
                "text": c.text,
                "logprobs": None if top_n is None else self.service.logprobs_block(c.events, top_n, 0, as_ids),
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
                "prompt_logprobs": None,
                "prompt_token_ids": c.prompt_ids if with_ids else None,
                "token_ids": c.token_ids if with_ids else None,
            }
            for i, c in enumerate(self.choices)
        ]
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.service.served_name,
            "choices": choices,
            "usage": self._usage(),
            "system_fingerprint": None,
            "weight_version": self.version,
        }

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.service.served_name,
            "choices": choices,
            "weight_version": self.version,
        }
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def _running(self, event: TokenEvent, counts: list[int]) -> dict[str, Any] | None:
        """Per-chunk usage, only with ``stream_options.continuous_usage_stats`` (vLLM's per-choice counts)."""
        options = self.request.stream_options
        if options is None or not options.include_usage or not options.continuous_usage_stats:
            return None
        prompt_tokens = len(self.choices[event.index].prompt_ids)
        done = counts[event.index]
        return {"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": prompt_tokens + done}

    def _event_choice(self, events: list[TokenEvent], sent_prompt: set[int], text_offsets: list[int]) -> dict[str, Any]:
        """One choice's part of a chunk: ``events``, that choice's tokens since its last chunk (one, unless the
        request sets ``stream_interval``)."""
        last = events[-1]
        with_ids = bool(self.request.return_token_ids)
        prompt_ids = None
        if with_ids and last.index not in sent_prompt:
            sent_prompt.add(last.index)
            prompt_ids = self.choices[last.index].prompt_ids
        logprobs = None
        if self.request.logprobs is not None:
            logprobs = self.service.logprobs_block(
                events, self.request.logprobs, text_offsets[last.index], bool(self.request.return_tokens_as_token_ids)
            )
        text = "".join(e.text for e in events)
        text_offsets[last.index] += len(text)
        return {
            "index": last.index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": last.finish_reason,
            "stop_reason": last.stop_reason,
            "prompt_token_ids": prompt_ids,
            "token_ids": [e.sample.token_id for e in events] if with_ids else None,
        }

    async def stream(self, first: list[TokenEvent]) -> AsyncIterator[str]:
        """A chunk per sampled token per choice (with ``stream_interval``: a choice's first token, then one every
        that many tokens and at its end, as vLLM sends them), then the usage chunk (if asked) and ``[DONE]``."""
        sent_prompt: set[int] = set()
        text_offsets = [0] * len(self.choices)
        counts = [0] * len(self.choices)
        interval = self.request.stream_interval or 1
        held: list[list[TokenEvent]] = [[] for _ in self.choices]  # each choice's tokens not sent yet
        delivery = first
        try:
            while True:
                for event in delivery:
                    counts[event.index] += 1
                    events = held[event.index]
                    events.append(event)
                    if len(events) < interval and counts[event.index] > 1 and event.finish_reason is None:
                        continue
                    held[event.index] = []
                    yield self._chunk(
                        [self._event_choice(events, sent_prompt, text_offsets)], self._running(event, counts)
                    )
                if self.open == 0:
                    break
                delivery = await self.next_delivery()
            options = self.request.stream_options
            if options is not None and options.include_usage:
                yield self._chunk([], usage=self._usage())
            yield "data: [DONE]\n\n"
        except RollwireError as exc:
            error = {"message": exc.message, "type": exc.code, "param": exc.param, "code": exc.status_code}
            yield f"data: {json.dumps({'error': error})}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            self.cancel()


__all__ = ["VERSION_HEADER", "CompletionService"]
