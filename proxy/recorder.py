"""Model-call rows in the trace store: written and committed before a response's last byte leaves. All database
work runs off the event loop (inserts on the store's writer thread, see ``rollwire.store.writer``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from rollwire.rollouts import TAKES_RECORDS, guard_active
from rollwire.store import ModelCall
from rollwire.store.writer import RowWriter

logger = logging.getLogger(__name__)

Listener = Callable[[str, list[dict[str, Any]]], None]
"""Called with (rollout id, rows) of one call."""


class Recorder:
    """Writes calls (only for rollouts that still take records) and tells who counts them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.writer = RowWriter(
            engine, ModelCall.__table__, guard=guard_active, only_if=TAKES_RECORDS  # type: ignore[attr-defined]
        )
        self.listeners: list[Listener] = []
        """Called once a call's rows are committed (budget counting: the next call is admitted by them)."""
        self.late_listeners: list[Listener] = []
        """Called once the call is settled, after its answer has left (``settled``): counting no answer waits on."""

    async def write(self, rows: list[dict[str, Any]]) -> list[int]:
        """Insert ``rows`` (ModelCall columns) and commit; returns their ids only once they are durable."""
        ids = await self.writer.insert(rows)
        if not rows:
            return ids
        if logger.isEnabledFor(logging.DEBUG):
            first = rows[0]
            fields = {"rollout_id": first["rollout_id"], "call_id": ids[0] if ids else None, "dialect": first["dialect"]}
            logger.debug("model call recorded (%s, %s)", first["status"], first["finish_reason"], extra=fields)
        for listener in self.listeners:
            listener(rows[0]["rollout_id"], rows)
        return ids

    def settled(self, rows: list[dict[str, Any]]) -> None:
        """The late listeners, for a call whose answer has left."""
        if rows:
            for listener in self.late_listeners:
                listener(rows[0]["rollout_id"], rows)

    def close(self) -> None:
        self.writer.close()


__all__ = ["Recorder"]
