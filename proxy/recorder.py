"""Model-call rows in the trace store: written (and committed) before a response's last byte leaves, read
back as the session's earlier calls. All database work runs off the event loop."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.session import PriorCall
from sqlalchemy.engine import Engine
from sqlmodel import select

from rollwire.errors import InvalidRequest
from rollwire.store import ModelCall, decode_ids, session_scope

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


def _insert(engine: Engine, rows: list[ModelCall]) -> list[int]:
    with session_scope(engine) as session:
        for row in rows:
            session.add(row)
        session.flush()
        ids = [int(row.id or 0) for row in rows]
    return ids


class Recorder:
    def __init__(self, engine: Engine, dialects: dict[str, tuple[RequestParser, AnswerParser]]) -> None:
        self.engine = engine
        self.dialects = dialects

    async def priors(self, rollout_id: str) -> list[PriorCall]:
        return await anyio.to_thread.run_sync(load_priors, self.engine, rollout_id, self.dialects)

    async def record(self, rows: list[ModelCall]) -> list[int]:
        """Insert and commit; returns only once the rows are durable."""
        return await anyio.to_thread.run_sync(_insert, self.engine, rows)


__all__ = ["Recorder", "load_priors"]
