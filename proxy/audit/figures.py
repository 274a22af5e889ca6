"""How faithfully each harness version's calls were recorded, turn by turn: read from the store.

Every complete model call of the chosen rollouts is one of three kinds:

- ``opens``: the rollout's first main-line call (nothing earlier to continue);
- ``spliced``: its prompt is an earlier call's exact prompt + sampled ids, then new tokens (no break);
- ``break``: it opened a new segment, with a cause from ``causes.CAUSES``.

A turn is a call's place among its rollout's complete calls, in start order (1 = first). "Reused" counts the
prompt tokens taken verbatim from an earlier call; "prefilled again" counts, on a break, the tokens its prompt
shares with the main-line call before it: text the engine had seen, rendered and sent again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import col, select

from rollwire.clients import UNKNOWN_CLIENT, harness_of
from rollwire.errors import NotFound
from rollwire.proxy.audit.causes import CAUSES, Earlier, break_cause
from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.dialects.registry import READERS
from rollwire.proxy.splice.learn import UNREADABLE
from rollwire.side_calls import MAIN
from rollwire.store import ModelCall, Rollout, Run, session_scope
from rollwire.store.codec import ID_BYTES
from rollwire.store.prompts import whole_prompts
from rollwire.store.requests import common_prefix, whole_requests
from rollwire.store.versions import check_current


@dataclass(frozen=True, slots=True)
class CallAudit:
    """One complete call, as the audit sees it."""

    rollout_id: str
    call_id: int
    turn: int
    harness: str
    """The client's product name, from its User-Agent (``rollwire.clients``)."""
    version: str
    adapter: str
    """The harness adapter the run named (``rollwire run-harness``, ``rollwire rollouts``), empty for none."""
    line: str
    kind: str
    """opens, spliced or break."""
    cause: str | None
    reason: str | None
    """The proxy's recorded reason for a break (``ModelCall.segment_break``)."""
    prompt_tokens: int
    reused: int
    prefilled_again: int


@dataclass(slots=True)
class TurnFigures:
    calls: int = 0
    spliced: int = 0
    prompt_tokens: int = 0
    reused: int = 0
    prefilled_again: int = 0
    causes: Counter[str] = field(default_factory=Counter)

    def add(self, call: CallAudit) -> None:
        self.calls += 1
        self.spliced += call.kind == "spliced"
        self.prompt_tokens += call.prompt_tokens
        self.reused += call.reused
        self.prefilled_again += call.prefilled_again
        if call.cause is not None:
            self.causes[call.cause] += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls, "spliced": self.spliced, "prompt_tokens": self.prompt_tokens, "reused": self.reused,
            "prefilled_again": self.prefilled_again, "breaks": dict(_in_cause_order(self.causes)),
        }  # fmt: skip


@dataclass(slots=True)
class HarnessFigures:
    """One harness version's calls: in all, and per turn."""

    harness: str
    version: str
    adapters: set[str] = field(default_factory=set)
    rollouts: set[str] = field(default_factory=set)
    total: TurnFigures = field(default_factory=TurnFigures)
    turns: dict[int, TurnFigures] = field(default_factory=dict)

    def add(self, call: CallAudit) -> None:
        if call.adapter:
            self.adapters.add(call.adapter)
        self.rollouts.add(call.rollout_id)
        self.total.add(call)
        self.turns.setdefault(call.turn, TurnFigures()).add(call)

    def splice_rate(self) -> float:
        """Spliced calls over the main-line calls that could continue an earlier one: every call but each rollout's
        opening call and the side calls (a line of their own, never a continuation)."""
        could = self.total.spliced + self.total.causes.total() - self.total.causes["side_call"]
        return self.total.spliced / could if could else 1.0

    def as_json(self) -> dict[str, Any]:
        return {
            "harness": self.harness, "version": self.version, "adapters": sorted(self.adapters),
            "rollouts": len(self.rollouts), "splice_rate": round(self.splice_rate(), 4), **self.total.as_json(),
            "turns": [{"turn": t, **f.as_json()} for t, f in sorted(self.turns.items())],
        }  # fmt: skip


@dataclass(slots=True)
class Audit:
    calls: list[CallAudit]

    def harnesses(self) -> list[HarnessFigures]:
        """Per harness version, in the order first met."""
        found: dict[tuple[str, str], HarnessFigures] = {}
        for call in self.calls:
            key = (call.harness, call.version)
            found.setdefault(key, HarnessFigures(*key)).add(call)
        return list(found.values())

    def breaks(self) -> list[CallAudit]:
        return [c for c in self.calls if c.kind == "break"]

    def unknown(self) -> list[CallAudit]:
        return [c for c in self.calls if c.cause == "unknown"]

    def as_json(self) -> dict[str, Any]:
        return {
            "harnesses": [h.as_json() for h in self.harnesses()],
            "breaks": [
                {"rollout_id": c.rollout_id, "call_id": c.call_id, "turn": c.turn, "line": c.line,
                 "harness": c.harness, "version": c.version, "cause": c.cause, "reason": c.reason}
                for c in self.breaks()
            ],
            "causes": CAUSES,
        }  # fmt: skip


def _in_cause_order(counts: Counter[str]) -> list[tuple[str, int]]:
    return [(cause, counts[cause]) for cause in CAUSES if counts[cause]]


def audit(
    engine: Engine, *, run_id: str | None = None, rollout_id: str | None = None, harness: str | None = None
) -> Audit:
    """The audit of a run's rollouts (or one rollout's), optionally of one harness: its client name
    (``codex_cli_rs``) or its adapter's (``codex``). ``NotFound`` when nothing matches."""
    with session_scope(engine) as session:
        check_current(session.connection())
        query = select(Rollout)
        if run_id is not None:
            query = query.where(col(Rollout.run_id) == run_id)
        if rollout_id is not None:
            query = query.where(col(Rollout.id) == rollout_id)
        rollouts = list(session.exec(query.order_by(col(Rollout.created_ns), col(Rollout.id))).all())
        adapters = {r.id: str((r.config or {}).get("harness", "")) for r in session.exec(select(Run)).all()}
        calls_of: dict[str, list[ModelCall]] = {}
        ids = [r.id for r in rollouts]
        for chunk in range(0, len(ids), 500):
            part = select(ModelCall).where(col(ModelCall.rollout_id).in_(ids[chunk : chunk + 500]))
            for call in session.exec(part.order_by(col(ModelCall.id))).all():
                calls_of.setdefault(call.rollout_id, []).append(call)
    if not rollouts:
        raise NotFound(_nothing_found(run_id, rollout_id))
    found: list[CallAudit] = []
    for rollout in rollouts:
        found += rollout_audit(calls_of.get(rollout.id, []), adapters.get(rollout.run_id, ""))
    if harness is not None:
        found = [c for c in found if harness in (c.harness, c.adapter)]
        if not found:
            raise NotFound(f"no call of harness {harness!r} in {_scope(run_id, rollout_id)}")
    return Audit(found)


def _scope(run_id: str | None, rollout_id: str | None) -> str:
    return f"rollout {rollout_id}" if rollout_id else f"run {run_id}" if run_id else "the store"


def _nothing_found(run_id: str | None, rollout_id: str | None) -> str:
    return f"no {_scope(run_id, rollout_id)} in the store" if run_id or rollout_id else "the store holds no rollout"


@dataclass(slots=True)
class _Read:
    call: ModelCall
    conv: Conversation | None
    answer: Message | None
    prompt: bytes


def rollout_audit(calls: Sequence[ModelCall], adapter: str) -> list[CallAudit]:
    """Every complete call of one rollout (all its calls given: a call's request and prompt may be kept as an
    edit of an earlier call's, whatever that one's status)."""
    ordered = sorted(calls, key=lambda c: c.id or 0)
    reads = [_read(c, r, p) for c, r, p in zip(ordered, whole_requests(ordered), whole_prompts(ordered))]
    reads = sorted((r for r in reads if r.call.status == "complete"), key=lambda r: (r.call.started_ns, r.call.id or 0))
    out: list[CallAudit] = []
    latest: dict[str, _Read] = {}
    """Line -> its latest call so far (main, each sub-agent's; a side call is judged on its rule alone)."""
    previous = MAIN
    for turn, read in enumerate(reads, start=1):
        line = read.call.line or MAIN
        out.append(_judged(read, turn, latest.get(line), latest.get(MAIN), previous, adapter))
        latest[line], previous = read, line
    return out


def _read(call: ModelCall, request: str, prompt: bytes) -> _Read:
    parse, answer = READERS.get(call.dialect, READERS["chat"])
    try:
        conv: Conversation | None = parse(json.loads(request))
    except UNREADABLE:
        conv = None
    try:
        message: Message | None = answer(json.loads(call.response_json), call.choice_index)
    except UNREADABLE:
        message = None
    return _Read(call, conv, message, prompt)


def _judged(
    read: _Read, turn: int, same_line: _Read | None, main: _Read | None, previous_line: str, adapter: str
) -> CallAudit:
    """One call judged against the latest earlier call of its own line (``same_line``) and of the main line."""
    call, line = read.call, read.call.line or MAIN
    name, version = harness_of(call.client) if call.client else (UNKNOWN_CLIENT, "")
    prompt_tokens = len(read.prompt) // ID_BYTES
    reused = call.reused_prefix_len if call.segment_break is None else 0
    if line == MAIN and main is None:
        kind, cause = "opens", None
    elif call.segment_break is None and reused > 0:
        kind, cause = "spliced", None
    else:
        earlier = None
        if same_line is not None and same_line.conv is not None and same_line.answer is not None:
            earlier = Earlier(same_line.conv, same_line.answer, same_line.call.requested_model)
        recorded = call.segment_break
        kind = "break"
        cause = (
            break_cause(read.conv, line, recorded, call.requested_model, earlier, previous_line)
            if recorded or line != MAIN
            else "unknown"
        )
    again = 0
    against = same_line or main
    if kind == "break" and against is not None:
        opened = against.prompt + bytes(against.call.completion_ids or b"")
        again = common_prefix(read.prompt, opened) // ID_BYTES
    return CallAudit(
        call.rollout_id, int(call.id or 0), turn, name, version, adapter, line, kind, cause, call.segment_break,
        prompt_tokens, reused, again,
    )  # fmt: skip


__all__ = ["Audit", "CallAudit", "HarnessFigures", "TurnFigures", "audit", "rollout_audit"]
