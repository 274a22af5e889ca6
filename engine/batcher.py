"""Continuous batching: one scheduler thread admits requests between steps and decodes all live sequences together.

Every step feeds each running sequence's last token through one batched forward pass, so concurrent rollouts
(and the ``n`` choices of one request) share the model instead of queueing. A new request is prefilled alone
and joined to the running batch at the next step boundary; a finished or cancelled one leaves it there. A
weight swap waits for the running batch to drain (admitting nothing meanwhile), so every completion is
sampled from exactly one weight version, the one its response reports.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from rollwire.engine.grammar import Constraint
from rollwire.engine.kv import KVBatch, tensors
from rollwire.engine.model import LanguageModel, Weights
from rollwire.engine.prefix_cache import PrefixCache
from rollwire.engine.sampling import Sample, SamplingParams, generator_for, sample_step
from rollwire.engine.stopping import SequenceText

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One sampled token of one choice, with the text it adds and, on the last one, why the choice ended."""

    index: int
    sample: Sample
    text: str
    finish_reason: str | None
    stop_reason: int | str | None
    weight_version: int


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """The step that carried this request failed; the message is one line for the client."""

    message: str


Sink = Callable[[list[TokenEvent] | EngineFailure], None]
"""Called on the scheduler thread; must only hand the events over (e.g. ``loop.call_soon_threadsafe``)."""


@dataclass(slots=True, eq=False)
class GenerationRequest:
    """``n`` choices sampled from one prompt; choice ``i`` is reported as index ``first_index + i``."""

    prompt_ids: list[int]
    params: SamplingParams
    sink: Sink
    n: int = 1
    first_index: int = 0
    cache_salt: str | None = None
    """Shares cached prefixes only with requests of the same salt (``prefix_cache``)."""
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(slots=True, eq=False)
class _Sequence:
    request: GenerationRequest
    index: int
    text: SequenceText
    generator: torch.Generator
    constraint: Constraint | None = None
    """The sequence's ``structured_outputs`` grammar, advanced token by token."""
    last_token: int = -1
    length: int = 0
    """Tokens in the sequence including ``last_token``, which is not yet in the cache."""
    sampled: list[int] = field(default_factory=list)


class Batcher:
    """Owns the model's forward passes; started and stopped by the app's lifespan."""

    def __init__(self, model: LanguageModel, max_batch_size: int, prefix_cache: PrefixCache | None = None) -> None:
        self.model = model
        self.max_batch_size = max(1, max_batch_size)
        self.prefix_cache = prefix_cache if prefix_cache is not None and model.prefix_cacheable else PrefixCache(0)
        """Keys and values of earlier sequences; emptied at every weight swap (off for sliding-window models)."""
        self._cv = threading.Condition()
        self._waiting: deque[GenerationRequest] = deque()
        self._swaps: deque[tuple[Weights, Future[None]]] = deque()
        self._running: list[_Sequence] = []
        self._kv: KVBatch | None = None
        self._stopping = False
        self._shared_generator = torch.Generator(device="cpu")
        self._shared_generator.manual_seed(random.SystemRandom().getrandbits(63))
        self._thread = threading.Thread(target=self._loop, name="engine-batcher", daemon=True)
        self.steps = 0
        self.rows_decoded = 0

    @property
    def num_running(self) -> int:
        """Sequences in the running batch (read from other threads: a snapshot, not a lock-held count)."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return sum(r.n for r in list(self._waiting))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(30)

    def submit(self, request: GenerationRequest) -> None:
        with self._cv:
            self._waiting.append(request)
            self._cv.notify_all()

    def swap(self, weights: Weights) -> Future[None]:
        """Install ``weights`` once the running batch has drained; the future resolves after the swap."""
        done: Future[None] = Future()
        with self._cv:
            self._swaps.append((weights, done))
            self._cv.notify_all()
        return done

    def wake(self) -> None:
        """Look again at cancellations now rather than at the next event."""
        with self._cv:
            self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (self._stopping or self._waiting or self._running or self._swaps):
                    self._cv.wait()
                if self._stopping:
                    break
                admitted = self._take_admissions()
            try:
                self._apply_swap()
                for request in admitted:
                    self._admit(request)
                if self._running:
                    self._step()
            except Exception as exc:  # the engine's edge: fail the requests in flight, keep serving
                logger.exception("batch step failed")
                self._fail_all(admitted, f"engine step failed: {exc}".splitlines()[0])
        self._fail_all(list(self._waiting), "engine is shutting down")

    def _take_admissions(self) -> list[GenerationRequest]:
        if self._swaps:
            return []
        taken: list[GenerationRequest] = []
        rows = len(self._running)
        while self._waiting:
            request = self._waiting[0]
            if request.cancelled.is_set():
                self._waiting.popleft()
                continue
            if rows and rows + request.n > self.max_batch_size:
                break
            taken.append(self._waiting.popleft())
            rows += request.n
        return taken

    def _apply_swap(self) -> None:
        if self._running or not self._swaps:
            return
        with self._cv:
            weights, done = self._swaps.popleft()
        self.model.weights = weights
        self.prefix_cache.clear()
        if not done.done():
            done.set_result(None)

    def _admit(self, request: GenerationRequest) -> None:
        salt, ids = request.cache_salt, request.prompt_ids
        logits, cache = self.model.prefill(ids, self.prefix_cache.lookup(ids, salt))
        self.prefix_cache.insert(ids, tensors(cache), salt)
        params = request.params
        sequences = [
            _Sequence(
                request=request,
                index=request.first_index + i,
                text=SequenceText(self.model.tokenizer, request.prompt_ids, params, self.model.eos_token_ids),
                generator=generator_for(None if params.seed is None else params.seed + i, self._shared_generator),
                constraint=None if params.grammar is None else self.model.grammars.constraint(params.grammar),
                length=len(request.prompt_ids),
            )
            for i in range(request.n)
        ]
        samples = sample_step(
            logits.expand(request.n, -1), [params] * request.n, [s.generator for s in sequences],
            [s.constraint for s in sequences],
        )  # fmt: skip
        alive = self._advance(sequences, samples)
        if not alive:
            return
        fresh = KVBatch.from_prefill(cache, request.n)
        if len(alive) < request.n:
            fresh = fresh.keep(alive)
        self._kv = fresh if self._kv is None else self._kv.join(fresh)
        self._running.extend(sequences[i] for i in alive)

    def _step(self) -> None:
        self._drop_cancelled()
        if not self._running or self._kv is None:
            return
        device = self.model.device
        ids = torch.tensor([[s.last_token] for s in self._running], dtype=torch.long, device=device)
        positions = torch.tensor([[s.length - 1] for s in self._running], dtype=torch.long, device=device)
        mask = self._kv.extend_mask()
        logits = self.model.decode(ids, mask, positions, self._kv.cache)
        self.steps += 1
        self.rows_decoded += len(self._running)
        running = self._running
        samples = sample_step(
            logits, [s.request.params for s in running], [s.generator for s in running], [s.constraint for s in running]
        )
        alive = self._advance(self._running, samples)
        if len(alive) < len(self._running):
            self._keep_finished(alive)
            self._running = [self._running[i] for i in alive]
            self._kv = self._kv.keep(alive) if alive else None

    def _advance(self, sequences: list[_Sequence], samples: list[Sample]) -> list[int]:
        """Record each sequence's new token, deliver the events; returns the positions still running."""
        version = self.model.weights.version
        alive: list[int] = []
        batches: dict[int, tuple[GenerationRequest, list[TokenEvent]]] = {}
        for position, (seq, sample) in enumerate(zip(sequences, samples, strict=True)):
            progress = seq.text.add(sample.token_id)
            if seq.constraint is not None:
                seq.constraint.advance(sample.token_id)
            seq.last_token = sample.token_id
            seq.sampled.append(sample.token_id)
            seq.length += 1
            event = TokenEvent(seq.index, sample, progress.text, progress.finish_reason, progress.stop_reason, version)
            batches.setdefault(id(seq.request), (seq.request, []))[1].append(event)
            if progress.finish_reason is None and not seq.request.cancelled.is_set():
                alive.append(position)
        for request, events in batches.values():
            request.sink(events)
        return alive

    def _keep_finished(self, alive: list[int]) -> None:
        """Cache what the finished rows computed: a rollout's next call starts with this prompt and answer."""
        if not self.prefix_cache.enabled or self._kv is None:
            return
        still = set(alive)
        for row, seq in enumerate(self._running):
            if row not in still and not seq.request.cancelled.is_set():
                ids = seq.request.prompt_ids + seq.sampled[:-1]
                self.prefix_cache.insert(ids, self._kv.row(row, len(ids)), seq.request.cache_salt)

    def _drop_cancelled(self) -> None:
        keep = [i for i, s in enumerate(self._running) if not s.request.cancelled.is_set()]
        if len(keep) < len(self._running) and self._kv is not None:
            self._running = [self._running[i] for i in keep]
            self._kv = self._kv.keep(keep) if keep else None

    def _fail_all(self, admitted: list[GenerationRequest], message: str) -> None:
        requests = {id(r): r for r in admitted}
        requests.update({id(s.request): s.request for s in self._running})
        self._running, self._kv = [], None
        for request in requests.values():
            request.sink(EngineFailure(message))


__all__ = ["Batcher", "EngineFailure", "GenerationRequest", "Sink", "TokenEvent"]
