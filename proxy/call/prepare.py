"""Preparing a call: everything that can refuse it before the engine is asked. The served model resolved, the
rollout's earlier calls read (``splice.priors``), the prompt planned (``splice.plan``), the output cap fitted to
the context (``limits``) and the seed chosen: all the engine's request is made of (``call.run`` sends it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import anyio.to_thread

from rollwire.errors import InvalidRequest
from rollwire.proxy.call.base import Call
from rollwire.proxy.conversation import Conversation, Sampling
from rollwire.proxy.limits import OutputCap, fit_output
from rollwire.proxy.lines import call_line
from rollwire.proxy.splice.plan import Plan, PriorCall, continued_call, encode_work, plan_prompt
from rollwire.side_calls import MAIN, rules_of
from rollwire.store import now_ns
from rollwire.store.requests import SentRequest

if TYPE_CHECKING:
    from rollwire.proxy.call.path import CallPath

INLINE_PLAN_CHARS = 2048
"""Plans that render and encode at most this many characters run on the event loop: that costs well under
the ~0.1-0.3 ms of a hop to a worker thread and back (measured with bench/proxy.py); bigger ones (a long
first prompt, a re-render) run off the loop so they do not stall other requests."""

WHOLE_ANSWER_STREAM_INTERVAL = 32
"""Tokens a chunk of a whole (non-streamed) answer may hold, where the engine takes ``stream_interval``. Whole
answers are streamed from the engine too (``call.run``: a client that hangs up stops the generation and what was
sampled is recorded), and one token a chunk would wake the proxy once a token for an answer no one reads until
it ends; chunks of up to 32 take a third to a half less CPU a json call (``bench/proxy.py --pace-ms 1``; the
figures are in ``docs/bench-log.md``). The first chunk still comes at once; a partial record may miss the last
few tokens sampled (fewer than this many)."""


@dataclass(slots=True)
class Prepared:
    """A call ready for the engine (not frozen: made once a call, where a frozen ``__init__`` costs 3x)."""

    started: int
    prefill: str
    plan: Plan
    model: str
    """The served name the request goes to."""
    sampling: Sampling
    """As sent: the output cap fitted to the context, the seed where the run gives one."""
    stream_interval: int | None
    """Tokens an engine chunk may hold, where the engine takes the field (whole answers only)."""
    prompt_json: bytes
    """The prompt's ids as the request writes them (``Plan.json_prompt``): sent, then extended by what a later call
    splices onto (``PriorCall.prompt_json``)."""
    line: str = MAIN
    """The agent's main line, a sub-agent's ``agent:<n>``, or ``side:<rule>`` (``rollwire.side_calls``)."""
    cap: OutputCap = OutputCap(None, None)
    """The output cap asked for and the one sent (recorded on the call)."""
    base_request: SentRequest | None = None
    """The whole request of the call the plan continues, where held: this call's request is stored as an edit of
    it (``rollwire.store.requests``)."""


async def prepare(path: CallPath, call: Call) -> Prepared:
    """Model, prompt plan and sampling for ``call``."""
    started = now_ns()
    conv = call.conv
    served = await path.served.resolve(conv.model)
    wanted = conv.sampling.structured
    if wanted is not None and not path.served.structured_outputs:
        raise InvalidRequest(
            f"{wanted.param}: the upstream serving `{served}` cannot enforce an output format (its model card "
            "says it has no structured outputs): serve the model with vLLM or rollwire's engine for JSON output",
            param=wanted.param,
        )
    prefill = _prefill(path, conv)
    priors = await path.earlier_calls(call.caller.rollout_id)
    plan = await _plan(path, conv, priors, prefill)
    sampling, cap = _sampling(path, conv.sampling, plan.prompt_ids)
    interval = WHOLE_ANSWER_STREAM_INTERVAL if not conv.stream and path.served.stream_interval else None
    continued = _prior(priors, plan.spliced_from)
    line = call_line(conv, priors, rules_of(call.caller.meta), continued)
    base = continued.request_sent if continued is not None else None
    return Prepared(started, prefill, plan, served, sampling, interval, plan.json_prompt(), line, cap, base)


def _prefill(path: CallPath, conv: Conversation) -> str:
    """What the answer starts with when the request forces a tool call (the tool parser's opening)."""
    if conv.tool_choice == "required":
        return path.tools.prefill_required
    if conv.tool_choice.startswith("fn:"):
        return path.tools.prefill_named(conv.tool_choice[3:])
    return ""


async def _plan(path: CallPath, conv: Conversation, priors: list[PriorCall], prefill: str) -> Plan:
    policy = path.settings.splice_policy
    continued = continued_call(conv, priors) if policy == "splice" else None
    if encode_work(conv, priors, policy, path.renderer, prefill, continued) <= INLINE_PLAN_CHARS:
        return plan_prompt(conv, priors, path.renderer, policy, prefill, continued)
    return await anyio.to_thread.run_sync(plan_prompt, conv, priors, path.renderer, policy, prefill, continued)


def _sampling(path: CallPath, sampling: Sampling, prompt_ids: Sequence[int]) -> tuple[Sampling, OutputCap]:
    """The output cap fitted to what the context leaves (``limits``: the one rule of every dialect), and the
    seed of a request that brings none where the run has a seed (``seeds``)."""
    cap = fit_output(sampling.max_tokens, len(prompt_ids), path.served.max_model_len)
    seed = sampling.seed
    if seed is None and path.seeds is not None:
        seed = path.seeds.for_prompt(prompt_ids)
    return replace(sampling, max_tokens=cap.granted, seed=seed), cap


def _prior(priors: list[PriorCall], call_id: int | None) -> PriorCall | None:
    """The earlier call ``call_id`` (the one a plan continues), None for none."""
    if call_id is not None:
        for prior in reversed(priors):  # the call a plan continues is most often the latest
            if prior.call_id == call_id:
                return prior
    return None


__all__ = ["INLINE_PLAN_CHARS", "WHOLE_ANSWER_STREAM_INTERVAL", "Prepared", "prepare"]
