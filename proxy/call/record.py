"""Recording a call: one ModelCall row per choice, committed before the answer's last byte leaves (the recorder
writes them). What only later calls need is deferred until the answer has left (``settle``): the splice state
learns the call (built from the request and answer already held, so nothing is re-serialized or re-parsed), then
the counters that no answer waits on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rollwire.proxy.call.base import Call
from rollwire.proxy.call.prepare import Prepared
from rollwire.proxy.conversation import Generation, Sampling
from rollwire.proxy.splice.learn import from_answer
from rollwire.proxy.splice.plan import PriorCall
from rollwire.store import encode_floats, encode_ids, now_ns
from rollwire.store.prompts import stored_prompt
from rollwire.store.requests import SentRequest, StoredRequest, stored_request
from rollwire.store.schema import ENGINE_FAILED

if TYPE_CHECKING:
    from rollwire.proxy.call.path import CallPath


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


async def record_answer(
    path: CallPath,
    call: Call,
    prepared: Prepared,
    body: dict[str, Any],
    body_text: str,
    generation: Generation,
    status: str = "complete",
    error: str | None = None,
) -> list[int]:
    """One committed row per choice of ``generation`` (``body`` its answer as sent); the ids of the rows."""
    plan, ended = prepared.plan, now_ns()
    prompt_blob = plan.encoded_prompt()
    kept = stored_request(call.request.sent, plan.spliced_from, prepared.base_request)
    shared = _call_fields(path, call, prepared, prompt_blob, ended, kept)
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
                "segment_break": plan.segment_break if first else f"choice {choice.index} of {len(generation.choices)}",
                "status": status,
                "error": error,
            }
        )
    ids = await path.recorder.write(rows)

    def learnt() -> list[PriorCall | None]:
        conv, answer = call.conv, call.dialect.answer_message
        request = (conv.message_keys(), conv.tools_key(), SentRequest(call.request.sent, kept.chars))
        return [
            from_answer(
                answer, body, choice.index, request, plan.prompt_ids, choice.sampled_ids, row["segment_index"],
                (prompt_blob, prepared.prompt_json), prepared.line,
            )  # fmt: skip
            for choice, row in zip(generation.choices, rows)
        ]

    learn_later(path, rows, ids, learnt)
    return ids


def learn_later(
    path: CallPath, rows: list[dict[str, Any]], ids: list[int], learnt: Callable[[], list[PriorCall | None]]
) -> None:
    """Once the answer has left (``Settling``): the splice state learns the call's complete choices (``learnt()``:
    one prior or None per row), then the recorder's late listeners run (and find the call's priors learnt)."""

    def settle() -> None:
        if rows and any(row["status"] == "complete" for row in rows):
            found = [
                (call_id, int(row["segment_index"]), prior)
                for row, prior, call_id in zip(rows, learnt(), ids)
                if row["status"] == "complete"
            ]
            path.splice.remember(rows[0]["rollout_id"], found)
        path.recorder.settled(rows)

    path.settling.defer(settle)


def _call_fields(
    path: CallPath, call: Call, prepared: Prepared, prompt_blob: bytes, ended: int, kept: StoredRequest
) -> dict[str, Any]:
    """What every row of one call records alike: who asked, what was sent (the request as ``kept``, an edit of its
    base; the prompt as the rest of the call it continues), the sampling asked for, its line, cap and timing."""
    plan, conv = prepared.plan, call.conv
    return {
        "rollout_id": call.caller.rollout_id,
        "dialect": call.dialect.name,
        "requested_model": conv.model,
        "served_model": path.served.name or "",
        "client": call.client,
        "request_json": kept.text,
        "request_base": kept.base,
        "request_head": kept.head,
        "request_tail": kept.tail,
        "prompt_ids": stored_prompt(prompt_blob, plan.spliced_from, plan.reused_prefix_len),
        "prompt_base": plan.spliced_from,
        "sampling": sampling_record(replace(conv.sampling, seed=prepared.sampling.seed)),  # the seed sent
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


async def record_engine_failure(path: CallPath, call: Call, prepared: Prepared | None, error: str) -> None:
    """The engine failed this call before it sampled anything (``prepared`` is None when it failed before the
    prompt was built: listing its models): one committed row with the request, the prompt if there was one,
    and no completion, the platform's evidence that the rollout did not get a fair run (``Scheduler``)."""
    ended = now_ns()
    conv = call.conv
    row: dict[str, Any] = {
        "rollout_id": call.caller.rollout_id,
        "dialect": call.dialect.name,
        "requested_model": conv.model,
        "served_model": path.served.name or "",
        "request_json": call.request.sent.decode(),
        "prompt_ids": b"",
        "sampling": sampling_record(conv.sampling),
        "started_ns": ended,
        "ended_ns": ended,
    }
    if prepared is not None:
        kept = stored_request(call.request.sent, prepared.plan.spliced_from, prepared.base_request)
        row = _call_fields(path, call, prepared, prepared.plan.encoded_prompt(), ended, kept)
    row |= {
        "response_json": "",
        "completion_ids": b"",
        "completion_logprobs": b"",
        "finish_reason": None,
        "policy_version": path.served.version(None),
        "status": ENGINE_FAILED,
        "error": error,
    }
    rows = [row]
    ids = await path.recorder.write(rows)
    learn_later(path, rows, ids, lambda: [None])


__all__ = ["learn_later", "record_answer", "record_engine_failure", "sampling_record"]
