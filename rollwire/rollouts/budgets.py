"""Per-rollout budgets: how many model calls, sampled tokens, requests at once and tool calls a rollout may use,
and the total time one model call may take. Set on a run (its default) or a rollout (admin API, suite file) and
stored on the rollout row, so they hold after a restart; what a rollout has used is counted from its recorded
rows when a process first sees it, then kept in memory. A refused call is recorded as a ``Refusal`` row
(kind, reason), never as a model call or tool event, and answered with a clear 4xx.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlalchemy import bindparam, func, select
from sqlalchemy.engine import Engine
from sqlmodel import col

from rollwire.errors import Forbidden, InvalidRequest, RollwireError, StoreError, TooManyRequests
from rollwire.rollouts.tokens import Identity
from rollwire.store.db import session_scope
from rollwire.store.direct import DirectQuery
from rollwire.store.reads import RunQuery, point_query, point_read
from rollwire.store.schema import ModelCall, Refusal, ToolEvent

LIMITS: dict[str, type] = {
    "model_calls": int,
    "sampled_tokens": int,
    "concurrent_requests": int,
    "call_deadline_s": float,
    "tool_calls": int,
}
"""Budget name -> its type; an absent budget is unlimited (tool calls fall back to the gateway's setting)."""
KEEP = 65_536
"""Rollouts whose usage one process keeps in memory."""


def parse_budgets(raw: Any) -> dict[str, int | float]:
    """A validated budgets object: known names, positive numbers; InvalidRequest naming the bad one."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest("budgets must be an object", param="budgets")
    out: dict[str, int | float] = {}
    for name, value in raw.items():
        kind = LIMITS.get(name)
        if kind is None:
            raise InvalidRequest(f"unknown budget {name!r}; known: {', '.join(LIMITS)}", param=f"budgets.{name}")
        ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
        if not ok or value <= 0:
            raise InvalidRequest(f"budgets.{name} must be a positive {kind.__name__}", param=f"budgets.{name}")
        out[name] = kind(value)
    return out


@dataclass
class Usage:
    model_calls: int = 0
    sampled_tokens: int = 0
    tool_calls: int = 0
    in_flight: int = 0


_USE = select(
    func.count(col(ModelCall.id)).filter(col(ModelCall.choice_index) == 0),
    func.coalesce(func.sum(func.length(ModelCall.completion_ids)), 0),
    select(func.count()).where(col(ToolEvent.rollout_id) == bindparam("rollout_id")).scalar_subquery(),
).where(col(ModelCall.rollout_id) == bindparam("rollout_id"))
"""Model calls, sampled id bytes and tool calls of one rollout: one statement (an aggregate always has a row)."""


class _UsageQuery:
    """What a rollout has used so far, from the store (built once per engine, run on the driver's cursor)."""

    def __init__(self, engine: Engine, read_inline: RunQuery | None = None) -> None:
        self._use = DirectQuery(_USE, engine.dialect)
        self._query = point_query(engine, read_inline)

    def __call__(self, rollout_id: str) -> Usage:
        ((calls, sampled, tools),) = self._query(self._use, rollout_id=rollout_id)
        return Usage(int(calls or 0), int(sampled or 0) // 4, int(tools or 0))  # ids are 4-byte int32 (codec)


def record_refusal(engine: Engine, rollout_id: str, source: str, kind: str, target: str, reason: str) -> None:
    with session_scope(engine) as session:
        session.add(Refusal(rollout_id=rollout_id, source=source, kind=kind, target=target, reason=reason))


class Ticket:
    """One admitted model call's slot among the rollout's concurrent requests."""

    def __init__(self, use: Usage) -> None:
        self.use = use
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.use.in_flight -= 1


class Budgets:
    """One process's budget keeper (the proxy's or the gateway's) over one store."""

    def __init__(self, engine: Engine, source: str, read_inline: RunQuery | None = None) -> None:
        """``read_inline``: the event loop's store connection to count usage on (``point_query``)."""
        self._engine = engine
        self._source = source
        self._usage: dict[str, Usage] = {}
        self._load_usage = _UsageQuery(engine, read_inline)
        self._locks: dict[str, asyncio.Lock] = {}
        self.refused: list[Callable[[str], None]] = []
        """Called with the budget's kind after each refusal is recorded (metrics)."""

    async def usage(self, rollout_id: str) -> Usage:
        found = self._usage.get(rollout_id)
        if found is None:
            lock = self._locks.setdefault(rollout_id, asyncio.Lock())
            async with lock:
                found = self._usage.get(rollout_id)
                if found is None:
                    found = await point_read(self._engine, self._load_usage, rollout_id)
                    self._usage[rollout_id] = found
            self._locks.pop(rollout_id, None)
            self._prune()
        return found

    def _prune(self) -> None:
        """Forget the oldest idle rollouts past ``KEEP`` (they are re-read from the store if they come back)."""
        over = len(self._usage) - KEEP
        if over > 0:  # (copying every key on each new rollout cost ~1% of the proxy's CPU before a cache was full)
            for rollout_id in list(itertools.islice(self._usage, over)):
                if self._usage[rollout_id].in_flight == 0:
                    del self._usage[rollout_id]

    async def refuse(self, who: Identity, kind: str, target: str, error: RollwireError) -> RollwireError:
        """Record why a call was refused; returns the error to raise (a store failure is the caller's 500)."""
        try:
            await anyio.to_thread.run_sync(
                record_refusal, self._engine, who.rollout_id, self._source, kind, target, error.message
            )
        except StoreError as exc:
            return exc
        for listener in self.refused:
            listener(kind)
        return error

    async def model_call(self, who: Identity, target: str) -> Ticket:
        """Admit one model call (counted at once, so concurrent ones cannot overshoot); ``release()`` it at its end."""
        use = await self.usage(who.rollout_id)
        limits = who.budgets
        refused: tuple[str, RollwireError] | None = None
        if "model_calls" in limits and use.model_calls >= limits["model_calls"]:
            refused = "model_calls", Forbidden(f"rollout {who.rollout_id} has used its {limits['model_calls']} model calls")
        elif "sampled_tokens" in limits and use.sampled_tokens >= limits["sampled_tokens"]:
            refused = "sampled_tokens", Forbidden(
                f"rollout {who.rollout_id} has used its {limits['sampled_tokens']} sampled tokens"
            )
        elif "concurrent_requests" in limits and use.in_flight >= limits["concurrent_requests"]:
            refused = "concurrent_requests", TooManyRequests(
                f"rollout {who.rollout_id} already has {use.in_flight} model calls in flight "
                f"(its limit is {limits['concurrent_requests']}); retry when one has ended"
            )
        if refused is not None:
            raise await self.refuse(who, refused[0], target, refused[1])
        use.model_calls += 1
        use.in_flight += 1
        return Ticket(use)

    def tokens_left(self, who: Identity, use: Usage) -> int | None:
        limit = who.budgets.get("sampled_tokens")
        return None if limit is None else max(int(limit) - use.sampled_tokens, 1)

    def recorded(self, rollout_id: str, rows: list[dict[str, Any]]) -> None:
        """Count the tokens a just-recorded call sampled (its ModelCall rows)."""
        use = self._usage.get(rollout_id)
        if use is not None:
            use.sampled_tokens += sum(len(row.get("completion_ids") or b"") // 4 for row in rows)

    def deadline(self, who: Identity, default_s: float | None) -> float | None:
        """The monotonic time by which a model call must be done (the loop clock), or None."""
        limit = who.budgets.get("call_deadline_s", default_s)
        return None if not limit else asyncio.get_running_loop().time() + float(limit)

    async def tool_call(self, who: Identity, tool: str, default_limit: int) -> str | None:
        """Count one tool call; the refusal text (recorded) when the budget is spent, else None."""
        use = await self.usage(who.rollout_id)
        limit = int(who.budgets.get("tool_calls", default_limit))
        if use.tool_calls >= limit:
            reason = f"tool-call limit reached: this rollout may make {limit} calls"
            error = await self.refuse(who, "tool_calls", tool, Forbidden(reason))
            return error.message
        use.tool_calls += 1
        return None

    async def refuse_tool(self, who: Identity, kind: str, tool: str, reason: str) -> str:
        """Record a tool call refused for another reason (not allowed, unknown); returns the text for the model."""
        return (await self.refuse(who, kind, tool, Forbidden(reason))).message


__all__ = ["LIMITS", "Budgets", "Ticket", "Usage", "parse_budgets", "record_refusal"]
