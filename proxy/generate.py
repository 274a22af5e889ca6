"""The one generation path every dialect calls: resolve the model -> plan the prompt (render + splice) ->
upstream -> parse sampled ids -> record, committed before the response is handed back."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

import anyio.to_thread

from rollwire.compact_json import json_ids_extended
from rollwire.errors import InvalidRequest, NotFound, UpstreamError
from rollwire.proxy.answer import AnswerStream, Delta
from rollwire.proxy.auth import Caller
from rollwire.proxy.conversation import Choice, Conversation, Generation, Sampling
from rollwire.proxy.dialects.base import Dialect
from rollwire.proxy.limits import OutputCap, fit_output
from rollwire.proxy.lines import call_line
from rollwire.proxy.parsers.base import ReasoningParser, ToolParser, new_id
from rollwire.proxy.recorder import Recorder
from rollwire.proxy.render import Renderer
from rollwire.proxy.seeds import SampleSeeds
from rollwire.proxy.session import Plan, PriorCall, encode_work, plan_prompt
from rollwire.proxy.upstream import Sampled, completion_body, exchange, takes_stream_interval
from rollwire.proxy.upstream_http import Pool
from rollwire.settings import ProxySettings
from rollwire.side_calls import MAIN, rules_of
from rollwire.store import encode_floats, encode_ids, now_ns
from rollwire.store.prompts import stored_prompt
from rollwire.store.requests import stored_request
from rollwire.store.schema import ENGINE_FAILED

INLINE_PLAN_CHARS = 2048
"""Plans that render and encode at most this many characters run on the event loop: that costs well under
the ~0.1-0.3 ms of a hop to a worker thread and back (measured with bench/proxy.py); bigger ones (a long
first prompt, a re-render) run off the loop so they do not stall other requests."""

WHOLE_ANSWER_STREAM_INTERVAL = 32
"""Tokens a chunk of a whole (non-streamed) answer may hold, where the engine takes ``stream_interval``. Whole
answers are streamed from the engine too (``live.py``: a client that hangs up stops the generation and what was
sampled is recorded), and one token a chunk would wake the proxy once a token for an answer no one reads until
it ends; chunks of up to 32 take a third to a half less CPU a json call (``bench/proxy.py --pace-ms 1``; the figures are
in ``docs/bench-log.md``). The first chunk still comes at once; a partial record may miss the last few tokens
sampled (fewer than this many)."""


@dataclass
class Served:
    """The upstream's model name, learnt on first use (the upstream may start after the proxy)."""

    name: str | None = None
    max_model_len: int | None = None
    """From the model card (vLLM and the bundled engine report it); bounds every output cap (``limits``)."""
    models: int = 0
    """How many models the upstream lists; with one, any requested name is answered by it."""
    structured_outputs: bool = True
    """False when the model card says the upstream cannot enforce an output format; vLLM's card does not say,
    and vLLM enforces ``structured_outputs``, as the bundled engine does (its card says so)."""
    policy_version: int | None = None
    """Set through the admin API for engines that cannot report a version (real vLLM)."""
    stream_interval: bool = False
    """The upstream takes a per-request ``stream_interval`` (``upstream.takes_stream_interval``)."""


def sampling_record(sampling: Sampling) -> dict[str, Any]:
    """The sampling parameters a call was sent with (unset ones omitted: the engine's defaults, T=1, top_p=1)."""
    values = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "seed": sampling.seed,
        "max_tokens": sampling.max_tokens,
    }
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True, slots=True)
class RequestBody:
    """The client's request: parsed, and the JSON text stored with its calls (the body as sent, when it is)."""

    data: dict[str, Any]
    text: str


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready for the upstream."""

    started: int
    prefill: str
    plan: Plan
    body: dict[str, Any]
    prompt_json: bytes
    """``body``'s prompt as the request writes it (``Plan.json_prompt``): sent, then extended by what a later call
    splices onto (``PriorCall.ids_json``)."""
    line: str = MAIN
    """The agent's main line, or ``side:<rule>`` (``rollwire.side_calls``)."""
    cap: OutputCap = OutputCap(None, None)
    """The output cap asked for and the one sent (recorded on the call)."""
    base_request: str | None = None
    """The whole request of the call the plan continues, where held: this call's request is stored as an edit of
    it (``rollwire.store.requests``)."""


class Generator:
    def __init__(
        self,
        settings: ProxySettings,
        client: Pool,
        renderer: Renderer,
        recorder: Recorder,
        tools: ToolParser,
        reasoning: ReasoningParser,
    ) -> None:
        self.settings = settings
        self.client = client
        self.renderer = renderer
        self.recorder = recorder
        self.tools = tools
        self.reasoning = reasoning
        self.served = Served()
        self.seeds = SampleSeeds(settings.sample_seed) if settings.sample_seed is not None else None

    async def served_name(self) -> str:
        if self.served.name is None:
            url = self.settings.upstream.rstrip("/") + "/v1/models"
            status, data = await exchange(self.client, "GET", "/v1/models")
            try:
                if status != 200:
                    raise ValueError(f"HTTP {status}")
                cards = json.loads(data)["data"]
                card = cards[0]
                self.served.models = len(cards)
                self.served.structured_outputs = card.get("structured_outputs") is not False
                length = card.get("max_model_len")
                self.served.max_model_len = int(length) if isinstance(length, int) and length > 0 else None
                name = str(card["id"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise UpstreamError(f"cannot list the upstream's models at {url}: {exc.__class__.__name__}") from None
            self.served.stream_interval = await takes_stream_interval(self.client)
            self.served.name = name  # last: a call that finds the name set finds the rest learnt too
        return self.served.name

    async def resolve_model(self, requested: str) -> str:
        """The served name for ``requested``: an alias, the served name itself, or (unless ``strict_models``)
        any name while the upstream serves just one model; harnesses insist on their own names."""
        served = await self.served_name()
        aliases = self.settings.model_aliases
        target = aliases.get(requested) or (aliases.get("*") if "*" in aliases else None) or requested
        if target == served or (not self.settings.strict_models and self.served.models == 1):
            return served
        known = "" if self.settings.strict_models else f"; the upstream serves {self.served.models} models"
        raise NotFound(f"The model `{requested}` does not exist (this proxy serves `{served}`{known}).", param="model")

    def _prefill(self, conv: Conversation) -> str:
        if conv.tool_choice == "required":
            return self.tools.prefill_required
        if conv.tool_choice.startswith("fn:"):
            return self.tools.prefill_named(conv.tool_choice[3:])
        return ""

    def answer(self, conv: Conversation, prefill: str) -> AnswerStream:
        """A fresh parser of one choice's sampled ids (tool calls only when the request allows them)."""
        tools = self.tools if conv.tools and conv.tool_choice != "none" else None
        return AnswerStream(self.renderer, self.reasoning, tools, conv.sampling.stop, prefill, conv.parallel_tool_calls)

    def choice(
        self, index: int, answer: AnswerStream, sampled: Sampled, conv: Conversation
    ) -> tuple[Choice, list[Delta]]:
        """The finished choice from its parser, and the deltas a stream has not shown yet."""
        message, tail = answer.finish(cut_off=sampled.finish_reason == "length")
        finish = "tool_calls" if message.tool_calls and sampled.finish_reason == "stop" else sampled.finish_reason
        tokens = None
        if conv.sampling.top_logprobs is not None:
            tokens = sampled.tokens or self.renderer.token_strings(sampled.token_ids)
        choice = Choice(index, message, finish, sampled.token_ids, sampled.logprobs, sampled.top_logprobs, tokens)
        return choice, tail

    def new_generation(self, conv: Conversation, prompt_len: int, upstream_version: int | None) -> Generation:
        """Id, time, usage and version of an answer; choices are added as they finish."""
        # the engine's own word wins: it knows which weights sampled this answer; the published version is
        # only for engines that report none (a publish can lag or lead the reload it describes)
        if upstream_version is not None:
            version = upstream_version
        else:
            version = self.served.policy_version if self.served.policy_version is not None else 0
        return Generation(
            id=new_id("chatcmpl-"),
            created=int(time.time()),
            model=conv.model,
            choices=[],
            prompt_tokens=prompt_len,
            completion_tokens=0,
            policy_version=version,
        )

    def _sampling(self, sampling: Sampling, prompt_ids: list[int]) -> tuple[Sampling, OutputCap]:
        """The output cap fitted to what the context leaves (``limits``: the one rule of every dialect), and the
        seed of a request that brings none where the run has a seed (``seeds``)."""
        cap = fit_output(sampling.max_tokens, len(prompt_ids), self.served.max_model_len)
        seed = sampling.seed
        if seed is None and self.seeds is not None:
            seed = self.seeds.for_prompt(prompt_ids)
        return replace(sampling, max_tokens=cap.granted, seed=seed), cap

    async def _plan(self, conv: Conversation, priors: list[PriorCall], prefill: str) -> Plan:
        policy = self.settings.splice_policy
        if encode_work(conv, priors, policy, self.renderer, prefill) <= INLINE_PLAN_CHARS:
            return plan_prompt(conv, priors, self.renderer, policy, prefill)
        return await anyio.to_thread.run_sync(plan_prompt, conv, priors, self.renderer, policy, prefill)

    async def prepare(self, caller: Caller, conv: Conversation) -> Prepared:
        """Model, prompt plan and upstream body: everything that can refuse the request before it is sent."""
        started = now_ns()
        served = await self.resolve_model(conv.model)
        wanted = conv.sampling.structured
        if wanted is not None and not self.served.structured_outputs:
            raise InvalidRequest(
                f"{wanted.param}: the upstream serving `{served}` cannot enforce an output format (its model card "
                "says it has no structured outputs): serve the model with vLLM or rollwire's engine for JSON output",
                param=wanted.param,
            )
        prefill = self._prefill(conv)
        priors = await self.recorder.priors(caller.rollout_id)
        plan = await self._plan(conv, priors, prefill)
        stop_ids = sorted(self.renderer.end_ids)
        sampling, cap = self._sampling(conv.sampling, plan.prompt_ids)
        interval = WHOLE_ANSWER_STREAM_INTERVAL if not conv.stream and self.served.stream_interval else None
        body = completion_body(served, plan.prompt_ids, sampling, stop_ids, interval)
        line = call_line(conv, priors, rules_of(caller.meta))
        base = _request_of(priors, plan.spliced_from)
        return Prepared(started, prefill, plan, body, plan.json_prompt(), line, cap, base)

    async def record(
        self,
        caller: Caller,
        conv: Conversation,
        dialect: Dialect,
        request: RequestBody,
        body: dict[str, Any],
        body_text: str,
        prepared: Prepared,
        generation: Generation,
        status: str = "complete",
        error: str | None = None,
    ) -> list[int]:
        """One committed ModelCall row per choice; the session's in-memory priors learn the complete ones once the
        recorder settles the call (``Recorder.settle``: after the answer has left)."""
        plan, ended = prepared.plan, now_ns()
        prompt_blob = plan.encoded_prompt()
        shared = self._call_fields(caller, conv, dialect, request, prepared, prompt_blob, ended)
        rows: list[dict[str, Any]] = []
        for choice in generation.choices:
            first = choice.index == 0
            rows.append(
                shared
                | {
                    "response_json": body_text,
                    "completion_ids": encode_ids(choice.sampled_ids),
                    "completion_logprobs": encode_floats(choice.logprobs),
                    "choice_index": choice.index,
                    "finish_reason": choice.finish_reason,
                    "policy_version": generation.policy_version,
                    "segment_index": plan.segment_index if first else plan.next_free + choice.index - 1,
                    "segment_break": plan.segment_break
                    if first
                    else f"choice {choice.index} of {len(generation.choices)}",
                    "status": status,
                    "error": error,
                }
            )

        def learn() -> list[PriorCall | None]:
            keys, tools_key, learnt = conv.message_keys(), conv.tools_key(), []
            for choice, row in zip(generation.choices, rows):
                blob = prompt_blob + row["completion_ids"]
                written = json_ids_extended(prepared.prompt_json, choice.sampled_ids)
                segment = row["segment_index"]
                learnt.append(
                    self._learnt(dialect, body, choice, keys, tools_key, plan, segment, blob, written, request.text)
                )
            return learnt

        return await self.recorder.record(rows, learn)

    def _call_fields(
        self,
        caller: Caller,
        conv: Conversation,
        dialect: Dialect,
        request: RequestBody,
        prepared: Prepared,
        prompt_blob: bytes,
        ended: int,
    ) -> dict[str, Any]:
        """What every row of one call records alike: who asked, what was sent (the request as an edit of its base,
        the prompt as the rest of the call it continues), the sampling asked for, its line, output cap and timing."""
        plan = prepared.plan
        kept = stored_request(request.text, plan.spliced_from, prepared.base_request)
        return {
            "rollout_id": caller.rollout_id,
            "dialect": dialect.name,
            "requested_model": conv.model,
            "served_model": self.served.name or "",
            "request_json": kept.text,
            "request_base": kept.base,
            "request_head": kept.head,
            "request_tail": kept.tail,
            "prompt_ids": stored_prompt(prompt_blob, plan.spliced_from, plan.reused_prefix_len),
            "prompt_base": plan.spliced_from,
            "sampling": sampling_record(replace(conv.sampling, seed=prepared.body.get("seed"))),  # the seed sent
            "segment_index": plan.segment_index,
            "segment_break": plan.segment_break,
            "reused_prefix_len": plan.reused_prefix_len,
            "line": prepared.line,
            "max_tokens_requested": prepared.cap.requested,
            "max_tokens_granted": prepared.cap.granted,
            "latency_ms": (ended - prepared.started) / 1e6,
            "started_ns": prepared.started,
            "ended_ns": ended,
        }

    async def record_engine_failure(
        self,
        caller: Caller,
        conv: Conversation,
        dialect: Dialect,
        request: RequestBody,
        prepared: Prepared | None,
        error: str,
    ) -> None:
        """The engine failed this call before it sampled anything (``prepared`` is None when it failed before the
        prompt was built: listing its models): one committed row with the request, the prompt if there was one,
        and no completion, the platform's evidence that the rollout did not get a fair run (``Scheduler``)."""
        ended = now_ns()
        row: dict[str, Any] = {
            "rollout_id": caller.rollout_id,
            "dialect": dialect.name,
            "requested_model": conv.model,
            "served_model": self.served.name or "",
            "request_json": request.text,
            "prompt_ids": b"",
            "sampling": sampling_record(conv.sampling),
            "started_ns": ended,
            "ended_ns": ended,
        }
        if prepared is not None:
            row = self._call_fields(caller, conv, dialect, request, prepared, prepared.plan.encoded_prompt(), ended)
        row |= {
            "response_json": "",
            "completion_ids": b"",
            "completion_logprobs": b"",
            "finish_reason": None,
            "policy_version": self.served.policy_version or 0,
            "status": ENGINE_FAILED,
            "error": error,
        }
        await self.recorder.record([row], lambda: [None])

    @staticmethod
    def _learnt(
        dialect: Dialect,
        body: dict[str, Any],
        choice: Choice,
        request_keys: tuple[Any, ...],
        tools_key: str,
        plan: Plan,
        segment: int,
        ids_blob: bytes,
        ids_json: bytes,
        request_text: str,
    ) -> PriorCall | None:
        """The call as a later request will find it: its answer as the dialect reads it back from the body."""
        try:
            answer = dialect.answer_message(body, choice.index)
        except (ValueError, KeyError, TypeError, StopIteration, InvalidRequest):
            return None
        return PriorCall(
            0, request_keys, tools_key, answer.key(), plan.prompt_ids, choice.sampled_ids, segment, False, ids_blob,
            ids_json, request_text,
        )  # fmt: skip


def _request_of(priors: list[PriorCall], call_id: int | None) -> str | None:
    """The whole request held for call ``call_id`` (None: no such call, or its request is not held)."""
    if call_id is not None:
        for prior in reversed(priors):  # the call a plan continues is most often the latest
            if prior.call_id == call_id:
                return prior.request_text
    return None


__all__ = ["Generator", "Prepared", "RequestBody", "Served"]
