"""ModelCall rows -> Segments -> Trajectory: the only code that builds trajectories.

Within a segment every call's prompt extends the tokens so far; its new prompt tokens get loss mask 0 and
its sampled tokens mask 1 with their behaviour logprobs and policy version. A call that does not extend
its segment (it should not happen: the proxy starts a new segment then) is split off with a reason rather
than silently mixed in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import select

from rollwire.errors import NotFound
from rollwire.side_calls import MAIN, is_side_call
from rollwire.store import ModelCall, Rollout, ToolEvent, decode_floats, decode_ids, session_scope
from rollwire.store.prompts import whole_prompts
from rollwire.store.requests import whole_requests
from rollwire.store.versions import check_current
from rollwire.timeline import build_timeline, load_tool_events
from rollwire.trajectory import Segment, Trajectory, failure_cause


@dataclass
class _Builder:
    break_reason: str | None
    line: str = MAIN
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    call_ids: list[int] = field(default_factory=list)
    truncated: bool = False
    temperature: list[float] = field(default_factory=list)
    top_p: list[float] = field(default_factory=list)

    def extends(self, prompt: list[int]) -> bool:
        return prompt[: len(self.tokens)] == self.tokens

    def add(self, call: ModelCall, prompt: list[int]) -> None:
        sampled = decode_ids(call.completion_ids)
        lps = decode_floats(call.completion_logprobs)
        if len(lps) != len(sampled):
            lps = (lps + [0.0] * len(sampled))[: len(sampled)]
        fresh = prompt[len(self.tokens) :]
        self.tokens += fresh + sampled
        self.mask += [0] * len(fresh) + [1] * len(sampled)
        self.logprobs += [0.0] * len(fresh) + lps
        self.versions += [-1] * len(fresh) + [call.policy_version] * len(sampled)
        self.call_ids.append(int(call.id or 0))
        self.truncated = call.finish_reason == "length"
        sampling = call.sampling or {}
        temperature = float(sampling.get("temperature", 1.0))
        self.temperature += [1.0] * len(fresh) + [temperature if temperature > 0 else 1.0] * len(sampled)
        self.top_p += [1.0] * len(fresh) + [float(sampling.get("top_p", 1.0)) if temperature > 0 else 1.0] * len(sampled)

    def segment(self) -> Segment:
        plain = all(t == 1.0 for t in self.temperature) and all(p == 1.0 for p in self.top_p)
        return Segment(
            self.tokens, self.mask, self.logprobs, self.versions, self.break_reason, self.call_ids,
            line=self.line, truncated=self.truncated,
            temperature=[] if plain else self.temperature, top_p=[] if plain else self.top_p,
        )  # fmt: skip


def segments_from_calls(calls: Sequence[ModelCall]) -> list[Segment]:
    """Group complete calls by segment (in call order) and lay out their tokens; a call of one line (main, a
    sub-agent's, a side call) never joins another line's segment, even where its prompt extends one."""
    builders: dict[tuple[int, str], _Builder] = {}
    order: list[_Builder] = []
    prompts = whole_prompts(calls)
    for call, whole in sorted(zip(calls, prompts), key=lambda cp: (cp[0].started_ns, cp[0].id or 0)):
        if call.status != "complete":
            continue
        line = call.line or MAIN
        builder = builders.get((call.segment_index, line))
        prompt = decode_ids(whole)
        if builder is None or not builder.extends(prompt):
            reason = call.segment_break if builder is None else f"call {call.id} does not extend its segment"
            if reason is None and line != MAIN:
                reason = f"a side call ({line})" if is_side_call(line) else f"a sub-agent ({line})"
            builder = _Builder(reason if order else None, line)
            builders[(call.segment_index, line)] = builder
            order.append(builder)
        builder.add(call, prompt)
    return [b.segment() for b in order]


def build_trajectory(rollout: Rollout, calls: Sequence[ModelCall], events: Sequence[ToolEvent] = ()) -> Trajectory:
    """The trajectory of a rollout; its ``metadata["timeline"]`` holds the model calls and tool events in causal
    order with timing (``rollwire.timeline``)."""
    return Trajectory(
        rollout_id=rollout.id,
        run_id=rollout.run_id,
        task_id=rollout.task_id,
        group_id=rollout.group_id,
        reward=rollout.reward,
        status=str(rollout.status.value if hasattr(rollout.status, "value") else rollout.status),
        segments=segments_from_calls(calls),
        cursor=rollout.finished_seq or 0,
        metadata={
            "sample_index": rollout.sample_index,
            "attempt": rollout.attempt,
            "reward_breakdown": rollout.reward_breakdown,
            "final_answer": rollout.final_answer,
            "exit_code": rollout.exit_code,
            "error": rollout.error,
            "failure_cause": failure_cause(str(getattr(rollout.status, "value", rollout.status)), rollout.error),
            **({"meta": rollout.meta} if rollout.meta else {}),
            "timeline": build_timeline(calls, events),
        },
    )


def load_calls(engine: Engine, rollout_id: str) -> list[ModelCall]:
    with session_scope(engine) as session:
        check_current(session.connection())
        query = select(ModelCall).where(ModelCall.rollout_id == rollout_id).order_by(ModelCall.id)  # type: ignore[arg-type]
        return list(session.exec(query).all())


def call_rows(engine: Engine, rollout_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Every model call of these rollouts as one flat row (``rollwire export --flavor calls``): the whole request
    as sent (JSON text), the whole prompt and the sampled ids as lists, the rollout's ids and reward beside;
    no nested values, so Parquet readers (DuckDB, pandas) take the columns as they are."""
    wanted = select(Rollout).where(Rollout.id.in_(rollout_ids))  # type: ignore[attr-defined]
    with session_scope(engine) as session:
        rollouts = {r.id: r for r in session.exec(wanted).all()}
    rows: list[dict[str, Any]] = []
    for rollout_id in rollout_ids:
        rollout, calls = rollouts[rollout_id], load_calls(engine, rollout_id)
        for call, request, prompt in zip(calls, whole_requests(calls), whole_prompts(calls)):
            rows.append({
                "call_id": call.id, "rollout_id": rollout.id, "run_id": rollout.run_id, "task_id": rollout.task_id,
                "group_id": rollout.group_id, "reward": rollout.reward, "rollout_status": str(rollout.status),
                "dialect": call.dialect, "line": call.line, "status": call.status, "served_model": call.served_model,
                "request_json": request, "prompt_ids": decode_ids(prompt),
                "completion_ids": decode_ids(call.completion_ids),
                "completion_logprobs": decode_floats(call.completion_logprobs), "finish_reason": call.finish_reason,
                "sampling_json": json.dumps(call.sampling), "policy_version": call.policy_version,
                "segment_index": call.segment_index, "started_ns": call.started_ns, "ended_ns": call.ended_ns,
            })  # fmt: skip
    return rows


def reconstruct(engine: Engine, rollout_id: str) -> Trajectory:
    """The trajectory of one rollout (finished or not) from the store."""
    with session_scope(engine) as session:
        rollout = session.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFound(f"no rollout {rollout_id!r}")
    return build_trajectory(rollout, load_calls(engine, rollout_id), load_tool_events(engine, rollout_id))


__all__ = ["build_trajectory", "call_rows", "load_calls", "reconstruct", "segments_from_calls"]
