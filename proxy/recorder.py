"""Model-call rows in the trace store: written (and committed) before a response's last byte leaves, read
back as the session's earlier calls. All database work runs off the event loop (inserts on the store's
writer thread, see ``rollwire.store.writer``)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from rollwire.proxy.priors import Dialects, PriorCache, load_priors
from rollwire.proxy.session import PriorCall
from rollwire.rollouts import TAKES_RECORDS, guard_active
from rollwire.store import ModelCall
from rollwire.store.writer import RowWriter

logger = logging.getLogger(__name__)


class Recorder:
    """Writes calls and keeps each recent rollout's earlier calls in memory (``priors``: bounded, and kept
    exact when other proxy processes write the same store)."""

    def __init__(self, engine: Engine, dialects: Dialects, shared: bool = False, **bounds: int) -> None:
        self.engine = engine
        self.dialects = dialects
        self.writer = RowWriter(
            engine, ModelCall.__table__, guard=guard_active, only_if=TAKES_RECORDS  # type: ignore[attr-defined]
        )
        self.cache = PriorCache(engine, dialects, shared, read_inline=self.writer.read_inline, **bounds)
        self.listeners: list[Callable[[str, list[dict[str, Any]]], None]] = []
        """Called with (rollout id, rows) once rows are committed (budget counting)."""
        self.late_listeners: list[Callable[[str, list[dict[str, Any]]], None]] = []
        """Called with (rollout id, rows) when the call is settled (``settle``): counting that no answer waits on."""
        self._unsettled: deque[Callable[[], None]] = deque()

    async def priors(self, rollout_id: str) -> list[PriorCall]:
        self.settle()  # a call recorded but not yet settled is a prior all the same
        return await self.cache.priors(rollout_id)

    async def record(self, rows: list[dict[str, Any]], learn: Callable[[], list[PriorCall | None]]) -> list[int]:
        """Insert ``rows`` (ModelCall columns) and commit; returns only once they are durable. What only later
        calls need is left for ``settle``: the in-memory priors learn ``learn()`` (one per row, None for a row
        that cannot be continued; the caller builds them from the request and answer it already holds, so
        nothing is re-serialized or re-parsed), and the late listeners count the rows."""
        ids = await self.writer.insert(rows)
        if not rows:
            return ids
        if logger.isEnabledFor(logging.DEBUG):
            first = rows[0]
            fields = {"rollout_id": first["rollout_id"], "call_id": ids[0] if ids else None, "dialect": first["dialect"]}
            logger.debug("model call recorded (%s, %s)", first["status"], first["finish_reason"], extra=fields)
        for listener in self.listeners:
            listener(rows[0]["rollout_id"], rows)
        self._unsettled.append(lambda: self._settle(rows, learn, ids))
        return ids

    def settle(self) -> None:
        """Finish the calls recorded since the last settle: their priors are learnt and late listeners run.
        The answer's route calls this once the answer has left, so a client's latency does not carry it (~5% of
        a call's CPU at concurrency 1); ``priors`` calls it too, so a later call always finds every committed one,
        whenever the route's turn comes. Runs on the event loop, in order, each call once."""
        while self._unsettled:
            self._unsettled.popleft()()

    async def after_answer(self) -> None:
        """``settle`` as an answer's background task (Starlette runs an async one on the event loop, not a
        worker thread)."""
        self.settle()

    def _settle(self, rows: list[dict[str, Any]], learn: Callable[[], list[PriorCall | None]], ids: list[int]) -> None:
        if any(row["status"] == "complete" for row in rows):
            self._remember(rows, learn(), ids)
        for listener in self.late_listeners:  # last: a listener finds the call's priors learnt
            listener(rows[0]["rollout_id"], rows)

    def close(self) -> None:
        self.writer.close()

    def _remember(self, rows: list[dict[str, Any]], learnt: list[PriorCall | None], ids: list[int]) -> None:
        found = [
            (call_id, int(row["segment_index"]), prior)
            for row, prior, call_id in zip(rows, learnt, ids)
            if row["status"] == "complete"
        ]
        self.cache.remember(rows[0]["rollout_id"], found)


__all__ = ["Recorder", "load_priors"]
