"""Replaying a recorded rollout's tool results (``rollwire replay``): the gateway answers a replay rollout's tool
calls from its recording while they match it, so two policies (or one, twice) are compared on identical tool
results.

A replay rollout's ``meta.replay`` names the recorded rollout (``of``) and what to do at the first call that does
not match (``on_divergence``: ``live`` goes on with live tools, ``stop`` refuses every call from there). A call
matches when it is the next recorded call of its server, by tool name and arguments (as parsed JSON: harnesses
re-serialise), in order, per server. Every call, matched or not, still runs on the live server, so the rollout's
environment holds the state the calls leave (what the checker scores, and what live tools continue from after a
divergence); a matched call's answer is the recorded one. Where it diverged is recorded once per rollout
(``ReplayDivergence``), with the recorded call expected there.

The recording is the platform's own record (``ToolEvent`` rows the gateway wrote), read once per replay rollout;
the calls compared with it are the policy's, kept as the gateway records any call (``ToolCallRecord``).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.to_thread
from sqlalchemy.engine import Engine
from sqlmodel import col, func, select

from rollwire.errors import InvalidRequest, NotFound
from rollwire.store import ModelCall, ReplayDivergence, Rollout, ToolEvent, session_scope
from rollwire.timeline import load_tool_events

ACTIONS = ("live", "stop")
CALL_CHARS = 4096
"""Longest call a divergence row keeps as it was made: the arguments are the policy's, and a longer call is kept as
its first characters (a string in place of the arguments) so the row stays small and valid JSON."""


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """What a replay rollout follows: ``meta.replay`` of its row."""

    of: str
    on_divergence: Literal["live", "stop"] = "live"

    @classmethod
    def of_meta(cls, meta: Mapping[str, Any]) -> ReplaySpec | None:
        """The spec in a rollout's meta (None: not a replay); an ``InvalidRequest`` naming the field when malformed."""
        raw = meta.get("replay")
        if raw is None:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("of"), str) or not raw["of"]:
            raise InvalidRequest('meta.replay must be an object naming the recorded rollout: {"of": ROLLOUT_ID}')
        action = raw.get("on_divergence", "live")
        if action not in ACTIONS:
            raise InvalidRequest(f"meta.replay.on_divergence must be one of {', '.join(ACTIONS)}, not {action!r}")
        return cls(raw["of"], action)

    def to_meta(self) -> dict[str, Any]:
        return {"replay": {"of": self.of, "on_divergence": self.on_divergence}}


@dataclass(frozen=True, slots=True)
class RecordedCall:
    event_id: int
    tool: str
    arguments: Any
    """As parsed JSON (the recorded text where it is not JSON)."""
    result: Any
    """The result the harness was answered with, as recorded (a ``CallToolResult`` dump)."""


def call_json(tool: str, arguments: Any) -> str:
    """A call as the divergence report shows it: ``{"tool", "arguments"}``, keys sorted, at most ~``CALL_CHARS``."""
    text = json.dumps({"tool": tool[:200], "arguments": arguments}, sort_keys=True, default=str)
    if len(text) <= CALL_CHARS:
        return text
    cut = json.dumps(arguments, sort_keys=True, default=str)[: CALL_CHARS // 2]
    return json.dumps({"tool": tool[:200], "arguments": f"{cut}... ({len(text)} characters)"}, sort_keys=True)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def answered_calls(engine: Engine, rollout_id: str) -> list[ToolEvent]:
    """The rollout's tool calls that were answered (a call cancelled mid-way has no result, and changed no state it
    reports), in the order they started: what a replay answers from and a rescore makes again."""
    return [e for e in load_tool_events(engine, rollout_id) if isinstance(_parsed(e.result_json), dict)]


def load_recording(engine: Engine, rollout_id: str) -> dict[str, deque[RecordedCall]]:
    """The recorded rollout's answered tool calls, per server, in the order they started (a ``NotFound`` for a
    rollout the store does not hold)."""
    with session_scope(engine) as session:
        if session.get(Rollout, rollout_id) is None:
            raise NotFound(f"the replay's recorded rollout {rollout_id!r} is not in the store")
    out: dict[str, deque[RecordedCall]] = {}
    for event in answered_calls(engine, rollout_id):
        recorded = RecordedCall(
            int(event.id or 0), event.tool, _parsed(event.arguments_json), _parsed(event.result_json)
        )
        out.setdefault(event.server, deque()).append(recorded)
    return out


@dataclass(slots=True)
class Decision:
    """What the gateway does with one call of a replay rollout: answer it with a recorded result (``answer``),
    refuse it (``refuse``: why, after a divergence under ``stop``), or neither (the live result answers)."""

    answer: RecordedCall | None = None
    refuse: str | None = None


@dataclass(slots=True)
class _Cursor:
    spec: ReplaySpec
    pending: dict[str, deque[RecordedCall]]
    """Per server, the recorded calls not replayed yet."""
    calls: int = 0
    """The rollout's tool calls decided so far."""
    diverged: str | None = None
    """Where the replay left its recording, in words (None while it follows it)."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class ReplayBook:
    """Each replay rollout's place in its recording (the one owner of that cursor). A cursor is rebuilt from the
    store when a rollout first calls this process (a restarted gateway carries on where the last one was)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._cursors: dict[str, _Cursor] = {}

    async def decide(self, rollout_id: str, spec: ReplaySpec, server: str, tool: str, arguments: Any) -> Decision:
        """The decision for the rollout's next call (calls of one rollout are decided one at a time, in order); a
        divergence is recorded before the decision returns."""
        cursor = self._cursors.get(rollout_id)
        if cursor is None:
            found = await anyio.to_thread.run_sync(self._cursor, rollout_id, spec)
            cursor = self._cursors.setdefault(rollout_id, found)
        arguments = json.loads(json.dumps(arguments, default=str))  # as the recording holds them
        async with cursor.lock:
            cursor.calls += 1
            if cursor.diverged is not None:
                return Decision(refuse=cursor.diverged if spec.on_divergence == "stop" else None)
            queue = cursor.pending.get(server)
            expected = queue[0] if queue else None
            if queue and expected is not None and expected.tool == tool and expected.arguments == arguments:
                return Decision(answer=queue.popleft())
            if expected is None:
                had = f"no further call on {server!r}"
            elif expected.tool != tool:
                had = f"{expected.tool!r} there"
            else:
                had = f"{tool!r} with other arguments there"
            cursor.diverged = f"tool call {cursor.calls} ({tool!r} on {server!r}) left the recording of rollout {spec.of}, which had {had}"
            row = ReplayDivergence(
                rollout_id=rollout_id, recorded_rollout_id=spec.of, tool_call=cursor.calls, server=server,
                expected_json=call_json(expected.tool, expected.arguments) if expected is not None else "",
                actual_json=call_json(tool, arguments), action=spec.on_divergence,
            )  # fmt: skip
            await anyio.to_thread.run_sync(self._record, row)
            return Decision(refuse=f"replay stopped: {cursor.diverged}" if spec.on_divergence == "stop" else None)

    def _cursor(self, rollout_id: str, spec: ReplaySpec) -> _Cursor:
        """The rollout's cursor as the store has it: its recording less the calls replayed already."""
        pending = load_recording(self._engine, spec.of)
        with session_scope(self._engine) as session:
            done = session.exec(select(ToolEvent).where(col(ToolEvent.rollout_id) == rollout_id)).all()
            diverged = session.exec(
                select(ReplayDivergence).where(col(ReplayDivergence.rollout_id) == rollout_id)
            ).first()
        for event in done:
            queue = pending.get(event.server)
            if event.replayed_from is not None and queue:
                queue.popleft()
        why = None if diverged is None else f"tool call {diverged.tool_call} left the recording of rollout {spec.of}"
        return _Cursor(spec, pending, calls=len(done), diverged=why)

    def _record(self, row: ReplayDivergence) -> None:
        """Write the divergence, with how many of the rollout's model calls had started before it."""
        with session_scope(self._engine) as session:
            query = select(func.count()).select_from(ModelCall).where(col(ModelCall.rollout_id) == row.rollout_id)
            row.turn = int(session.exec(query).one())
            session.add(row)

    def forget(self, rollout_id: str) -> None:
        """Drop the cursor of a rollout that ended."""
        self._cursors.pop(rollout_id, None)


__all__ = [
    "ACTIONS", "CALL_CHARS", "Decision", "RecordedCall", "ReplayBook", "ReplaySpec", "answered_calls", "call_json",
    "load_recording",
]  # fmt: skip
