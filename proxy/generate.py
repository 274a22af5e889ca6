"""The one generation path every dialect calls: resolve the model -> plan the prompt (render + splice) ->
upstream -> parse sampled ids -> record, committed before the response is handed back."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any

import anyio.to_thread
from rollwire.proxy.answer import AnswerStream, Delta
from rollwire.proxy.auth import Caller
from rollwire.proxy.conversation import Choice, Conversation, Generation, Sampling
from rollwire.proxy.dialects.base import Dialect
from rollwire.proxy.limits import OutputCap, fit_output
from rollwire.proxy.parsers.base import ReasoningParser, ToolParser
from rollwire.proxy.recorder import Recorder
from rollwire.proxy.render import Renderer
from rollwire.proxy.session import Plan, PriorCall, encode_work, plan_prompt
from rollwire.proxy.upstream import Sampled, complete, completion_body, exchange
from rollwire.proxy.upstream_http import Pool

from rollwire.errors import InvalidRequest, NotFound, UpstreamError
from rollwire.settings import ProxySettings
from rollwire.store import encode_floats, encode_ids, now_ns

INLINE_PLAN_CHARS = 2048
"""Plans that render and encode at most this many characters run on the event loop: that costs well under
the ~0.1-0.3 ms of a hop to a worker thread and back (measured with bench/proxy.py); bigger ones (a long
first prompt, a re-render) run off the loop so they do not stall other requests."""


@dataclass
class Served:
    """The upstream's model name, learnt on first use (the upstream may start after the proxy)."""

    name: str | None = None
    max_model_len: int | None = None
    """From the model card (vLLM and the bundled engine report it); bounds every output cap (``limits``)."""
    policy_version: int | None = None
    """Set through the admin API for engines that cannot report a version (real vLLM)."""


def json_text(data: Any) -> str:
    """Compact JSON, as responses are sent and calls are stored (serialized once for both)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


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
    cap: OutputCap = OutputCap(None, None)
    """The output cap asked for and the one sent (recorded on the call)."""


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

    async def served_name(self) -> str:
        if self.served.name is None:
            url = self.settings.upstream.rstrip("/") + "/v1/models"
            status, data = await exchange(self.client, "GET", "/v1/models")
            try:
                if status != 200:
                    raise ValueError(f"HTTP {status}")
                card = json.loads(data)["data"][0]
                length = card.get("max_model_len")
                self.served.max_model_len = int(length) if isinstance(length, int) and length > 0 else None
                self.served.name = str(card["id"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise UpstreamError(f"cannot list the upstream's models at {url}: {exc.__class__.__name__}") from None
        return self.served.name

    async def resolve_model(self, requested: str) -> str:
        served = await self.served_name()
        aliases = self.settings.model_aliases
        target = aliases.get(requested) or (aliases.get("*") if "*" in aliases else None) or requested
        if target != served:
            raise NotFound(f"The model `{requested}` does not exist.", param="model")
        return served

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
        message, tail = answer.finish()
        finish = "tool_calls" if message.tool_calls and sampled.finish_reason == "stop" else sampled.finish_reason
        tokens = None
        if conv.sampling.top_logprobs is not None:
            tokens = sampled.tokens or self.renderer.token_strings(sampled.token_ids)
        choice = Choice(index, message, finish, sampled.token_ids, sampled.logprobs, sampled.top_logprobs, tokens)
        return choice, tail

    def new_generation(self, conv: Conversation, prompt_len: int, upstream_version: int | None) -> Generation:
        """Id, time, usage and version of an answer; choices are added as they finish."""
        version = self.served.policy_version if self.served.policy_version is not None else (upstream_version or 0)
        return Generation(
            id="chatcmpl-" + secrets.token_hex(12),
            created=int(time.time()),
            model=conv.model,
            choices=[],
            prompt_tokens=prompt_len,
            completion_tokens=0,
            policy_version=version,
        )

    def _sampling(self, sampling: Sampling, prompt_len: int) -> tuple[Sampling, OutputCap]:
        """The output cap fitted to what the context leaves (``limits``: the one rule of every dialect)."""
        cap = fit_output(sampling.max_tokens, prompt_len, self.served.max_model_len)
        return replace(sampling, max_tokens=cap.granted), cap

    async def _plan(self, caller: Caller, conv: Conversation, prefill: str) -> Plan:
        priors = await self.recorder.priors(caller.rollout_id)
        policy = self.settings.splice_policy
        if encode_work(conv, priors, policy) <= INLINE_PLAN_CHARS:
            return plan_prompt(conv, priors, self.renderer, policy, prefill)
        return await anyio.to_thread.run_sync(plan_prompt, conv, priors, self.renderer, policy, prefill)

    async def prepare(self, caller: Caller, conv: Conversation) -> Prepared:
        """Model, prompt plan and upstream body: everything that can refuse the request before it is sent."""
        started = now_ns()
        served = await self.resolve_model(conv.model)
        prefill = self._prefill(conv)
        plan = await self._plan(caller, conv, prefill)
        stop_ids = sorted(self.renderer.end_ids)
        sampling, cap = self._sampling(conv.sampling, len(plan.prompt_ids))
        body = completion_body(served, plan.prompt_ids, sampling, stop_ids)
        return Prepared(started, prefill, plan, body, cap)

    async def generate(
        self, caller: Caller, conv: Conversation, dialect: Dialect, request: RequestBody
    ) -> tuple[Generation, str]:
        """Answer ``conv`` for ``caller`` -> (the generation, the response body's JSON text); the calls are
        committed to the store when this returns."""
        prepared = await self.prepare(caller, conv)
        result = await complete(self.client, prepared.body)
        if result.prompt_ids and result.prompt_ids != prepared.plan.prompt_ids:
            raise UpstreamError("the upstream reports a different prompt than the proxy sent")
        generation = self.new_generation(conv, len(prepared.plan.prompt_ids), result.weight_version)
        for i, sampled in enumerate(result.choices):
            answer = self.answer(conv, prepared.prefill)
            answer.ids.extend(sampled.token_ids)
            generation.choices.append(self.choice(i, answer, sampled, conv)[0])
        generation = replace(generation, completion_tokens=sum(len(c.sampled_ids) for c in generation.choices))
        body = dialect.response_body(generation)
        text = json_text(body)
        generation.call_ids.extend(await self.record(caller, conv, dialect, request, body, text, prepared, generation))
        return generation, text

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
        """One committed ModelCall row per choice; the session's in-memory priors learn the complete ones."""
        started, plan = prepared.started, prepared.plan
        ended = now_ns()
        request_keys = tuple(m.key() for m in conv.messages)
        tools_key = conv.tools_key()
        rows: list[dict[str, Any]] = []
        learnt: list[PriorCall | None] = []
        for choice in generation.choices:
            first = choice.index == 0
            segment = plan.segment_index if first else plan.next_free + choice.index - 1
            rows.append(
                {
                    "rollout_id": caller.rollout_id,
                    "dialect": dialect.name,
                    "requested_model": conv.model,
                    "served_model": self.served.name or "",
                    "request_json": request.text,
                    "response_json": body_text,
                    "prompt_ids": encode_ids(plan.prompt_ids),
                    "completion_ids": encode_ids(choice.sampled_ids),
                    "completion_logprobs": encode_floats(choice.logprobs),
                    "choice_index": choice.index,
                    "finish_reason": choice.finish_reason,
                    "policy_version": generation.policy_version,
                    "segment_index": segment,
                    "segment_break": plan.segment_break
                    if first
                    else f"choice {choice.index} of {len(generation.choices)}",
                    "reused_prefix_len": plan.reused_prefix_len,
                    "max_tokens_requested": prepared.cap.requested,
                    "max_tokens_granted": prepared.cap.granted,
                    "status": status,
                    "error": error,
                    "latency_ms": (ended - started) / 1e6,
                    "started_ns": started,
                    "ended_ns": ended,
                }
            )
            learnt.append(self._learnt(dialect, body, choice, request_keys, tools_key, plan, segment))
        return await self.recorder.record(rows, learnt)

    @staticmethod
    def _learnt(
        dialect: Dialect,
        body: dict[str, Any],
        choice: Choice,
        request_keys: tuple[Any, ...],
        tools_key: str,
        plan: Plan,
        segment: int,
    ) -> PriorCall | None:
        """The call as a later request will find it: its answer as the dialect reads it back from the body."""
        try:
            answer = dialect.answer_message(body, choice.index)
        except (ValueError, KeyError, TypeError, StopIteration, InvalidRequest):
            return None
        return PriorCall(0, request_keys, tools_key, answer.key(), plan.prompt_ids, choice.sampled_ids, segment, False)


__all__ = ["Generator", "Prepared", "RequestBody", "Served", "json_text"]
