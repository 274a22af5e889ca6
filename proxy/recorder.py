"""Model-call rows in the trace store: written (and committed) before a response's last byte leaves, read
back as the session's earlier calls. All database work runs off the event loop (inserts on the store's
writer thread, see ``rollwire.store.writer``)."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio.to_thread
from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.session import PriorCall
from sqlalchemy.engine import Engine
from sqlmodel import select

from rollwire.errors import InvalidRequest
from rollwire.rollouts import guard_active
from rollwire.store import ModelCall, decode_ids, session_scope
from rollwire.store.writer import RowWriter

logger = logging.getLogger(__name__)
RequestParser = Callable[[dict[str, Any]], Conversation]
AnswerParser = Callable[[dict[str, Any], int], Message]


def _rows(engine: Engine, rollout_id: str) -> list[ModelCall]:
    with session_scope(engine) as session:
        query = select(ModelCall).where(ModelCall.rollout_id == rollout_id, ModelCall.status == "complete")
        return list(session.exec(query.order_by(ModelCall.id)).all())  # type: ignore[arg-type]


def _prior(row: ModelCall, parse: RequestParser, answer: AnswerParser, continued: bool) -> PriorCall | None:
    try:
        conv = parse(json.loads(row.request_json))
        message = answer(json.loads(row.response_json), row.choice_index)
    except (ValueError, KeyError, TypeError, StopIteration, InvalidRequest):  # an unreadable row is just not a prior
        return None
    return PriorCall(
        call_id=int(row.id or 0),
        request_keys=tuple(m.key() for m in conv.messages),
        tools_key=conv.tools_key(),
        answer_key=message.key(),
        prompt_ids=decode_ids(row.prompt_ids),
        sampled_ids=decode_ids(row.completion_ids),
        segment_index=row.segment_index,
        continued=continued,
    )


def load_priors(
    engine: Engine, rollout_id: str, dialects: dict[str, tuple[RequestParser, AnswerParser]]
) -> list[PriorCall]:
    rows = _rows(engine, rollout_id)
    last_in_segment = {row.segment_index: row.id for row in rows}
    out = []
    for row in rows:
        if row.dialect not in dialects:
            continue
        parse, answer = dialects[row.dialect]
        prior = _prior(row, parse, answer, continued=last_in_segment[row.segment_index] != row.id)
        if prior is not None:
            out.append(prior)
    return out


class Recorder:
    """Writes calls and keeps each recent rollout's earlier calls in memory (read from the store once, e.g.
    after a restart), so a call does not re-read and re-parse its whole history. One proxy process per store."""

    def __init__(
        self, engine: Engine, dialects: dict[str, tuple[RequestParser, AnswerParser]], cached: int = 4096
    ) -> None:
        self.engine = engine
        self.dialects = dialects
        self._cached = cached
        self._priors: OrderedDict[str, list[PriorCall]] = OrderedDict()
        self.writer = RowWriter(engine, ModelCall.__table__, guard=guard_active)  # type: ignore[attr-defined]
        self.listeners: list[Callable[[str, list[dict[str, Any]]], None]] = []
        """Called with (rollout id, rows) once rows are committed (budget counting)."""

    async def priors(self, rollout_id: str) -> list[PriorCall]:
        found = self._priors.get(rollout_id)
        if found is None:
            found = await anyio.to_thread.run_sync(load_priors, self.engine, rollout_id, self.dialects)
            self._priors[rollout_id] = found
            while len(self._priors) > self._cached:
                self._priors.popitem(last=False)
        self._priors.move_to_end(rollout_id)
        return list(found)

    async def record(self, rows: list[dict[str, Any]], learnt: list[PriorCall | None]) -> list[int]:
        """Insert ``rows`` (ModelCall columns) and commit; returns only once they are durable. Then the in-memory
        priors learn ``learnt`` (one per row, None for a row that cannot be continued), which the caller built
        from the request and answer it already holds, so nothing is re-serialized or re-parsed here."""
        ids = await self.writer.insert(rows)
        if rows and logger.isEnabledFor(logging.DEBUG):
            first = rows[0]
            fields = {"rollout_id": first["rollout_id"], "call_id": ids[0] if ids else None, "dialect": first["dialect"]}
            logger.debug("model call recorded (%s, %s)", first["status"], first["finish_reason"], extra=fields)
        for listener in self.listeners if rows else ():
            listener(rows[0]["rollout_id"], rows)
        self._remember(rows, learnt, ids)
        return ids

    def close(self) -> None:
        self.writer.close()

    def _remember(self, rows: list[dict[str, Any]], learnt: list[PriorCall | None], ids: list[int]) -> None:
        if not rows or rows[0]["rollout_id"] not in self._priors:
            return
        known = self._priors[rows[0]["rollout_id"]]
        for row, prior, call_id in zip(rows, learnt, ids):
            if prior is None or row["status"] != "complete":
                continue
            known[:] = [replace(p, continued=True) if p.segment_index == prior.segment_index else p for p in known]
            known.append(replace(prior, call_id=call_id))


__all__ = ["Recorder", "load_priors"]
