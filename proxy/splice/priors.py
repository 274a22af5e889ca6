"""Each recent rollout's earlier calls, kept in memory so a call need not re-read and re-parse its history, and
kept exact when several proxy processes (``--workers``, replicas) write one store.

A rollout's calls may land on any process. Before a splice, a process asks the store which complete calls the
rollout has (one indexed query for ids); ids it has not seen were written by another process, and only those
rows are read and parsed. So every process plans from the same history a single process would, at the cost
of that one query (``bench/proxy.py --workers 2`` measures it). Without a shared store (``shared_store``
off) the query is skipped: the process's own writes are all there is.

Memory is bounded twice: by the number of rollouts kept and by the prompt + sampled token ids they hold
(an agent's calls each hold their whole context, so a long rollout weighs far more than a short one; a prompt is
held as its 4 stored bytes an id, ``PriorCall.prompt_blob``, made a list only where one is read id by id,
``EncodedIds``; each segment's latest call also holds its prompt as JSON text, ``PriorCall.prompt_json``, ~6
bytes an id); the least recently used rollouts go first and are read back from the store when they call again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio.to_thread
from sqlalchemy import bindparam, select
from sqlalchemy.engine import Engine
from sqlmodel import col

from rollwire.errors import StoreError
from rollwire.proxy.splice.learn import AnswerParser, RequestParser, from_row
from rollwire.proxy.splice.plan import PriorCall
from rollwire.store import ModelCall, session_scope
from rollwire.store.direct import DirectQuery
from rollwire.store.prompts import whole_prompts
from rollwire.store.reads import RunQuery, point_query, reads_in_place
from rollwire.store.requests import whole_requests
from rollwire.store.versions import check_current

Dialects = Mapping[str, tuple[RequestParser, AnswerParser]]
"""Dialect name -> how its stored requests and answers are read back (``proxy.dialects.registry.READERS``)."""


def _complete(rollout_id: Any) -> Any:
    return (col(ModelCall.rollout_id) == rollout_id) & (col(ModelCall.status) == "complete")


_IDS = select(col(ModelCall.id)).where(_complete(bindparam("rollout_id")))
"""Built once: building the statement per call cost more than running it on SQLite (py-spy)."""


def complete_ids(engine: Engine, rollout_id: str) -> list[int]:
    """Ids of the rollout's complete calls (the index on rollout_id answers it)."""
    with engine.connect() as conn:
        return [int(i) for i in conn.execute(_IDS, {"rollout_id": rollout_id}).scalars() if i is not None]


def read_calls(engine: Engine, rollout_id: str, ids: Iterable[int] | None = None) -> list[ModelCall]:
    """The rollout's complete calls (only ``ids`` when given), oldest first."""
    query = select(ModelCall).where(_complete(rollout_id))
    if ids is not None:
        query = query.where(col(ModelCall.id).in_(list(ids)))
    with session_scope(engine) as session:
        check_current(session.connection())
        return list(session.exec(query.order_by(col(ModelCall.id))).scalars())  # type: ignore[call-overload]


@dataclass(slots=True)
class Known:
    """What one process knows of a rollout's complete calls."""

    priors: list[PriorCall] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    """Ids of every complete call read or written, continuable or not."""
    last: dict[int, int] = field(default_factory=dict)
    """Segment index -> id of its latest call: every earlier call of the segment is ``continued``."""
    tokens: int = 0

    def opened(self) -> dict[int, bytes]:
        """Call id -> the ids a call continuing it starts with (its prompt + sampled ids, stored bytes)."""
        return {p.call_id: blob for p in self.priors if (blob := p.ids_blob()) is not None}

    def requests(self) -> dict[int, str]:
        """Call id -> its whole request, for the calls that hold it (each segment's latest)."""
        return {p.call_id: p.request_sent.data.decode() for p in self.priors if p.request_sent is not None}

    def learn(self, found: list[tuple[int, int, PriorCall | None]]) -> None:
        """Add (call id, segment index, prior or None) triples and mark what they continue."""
        for call_id, segment, prior in found:
            self.seen.add(call_id)
            if call_id > self.last.get(segment, -1):
                self.last[segment] = call_id
            if prior is not None:
                self.priors.append(replace(prior, call_id=call_id))
                self.tokens += len(prior.prompt_ids) + len(prior.sampled_ids)
        self.priors.sort(key=lambda p: p.call_id)
        self.priors = [
            p if p.continued == (self.last[p.segment_index] != p.call_id) else _flipped(p) for p in self.priors
        ]  # only the calls whose flag changed are copied (a long rollout holds many, and learns one per call)


def _flipped(prior: PriorCall) -> PriorCall:
    """``prior`` with its ``continued`` flag turned; a continued call lets go of its JSON ids (``prompt_json``) and its
    request: only a branch splices onto it again, and that one writes its prompt and request afresh."""
    if prior.continued:
        return replace(prior, continued=False)
    return replace(prior, continued=True, prompt_json=None, request_sent=None)


Found = list[tuple[int, int, PriorCall | None]]
"""(call id, segment index, the call as a prior or None when no dialect here can continue it)."""


def parse_calls(
    rows: list[ModelCall],
    dialects: Dialects,
    opened: Mapping[int, bytes] | None = None,
    requests: Mapping[int, str] | None = None,
) -> Found:
    """``rows`` as priors; ``opened`` and ``requests``: what calls read earlier hold (``whole_prompts``' and
    ``whole_requests``' ``known``), for rows that continue one of them. ``StoreError`` where a row continues a
    call in neither."""
    found: Found = []
    for row, prompt, request in zip(rows, whole_prompts(rows, opened), whole_requests(rows, requests)):
        pair = dialects.get(row.dialect)
        found.append((int(row.id or 0), row.segment_index, from_row(row, prompt, request, *pair) if pair else None))
    return found


def load_priors(engine: Engine, rollout_id: str, dialects: Dialects) -> list[PriorCall]:
    """A rollout's earlier calls as the planner reads them, straight from the store."""
    known = Known()
    known.learn(parse_calls(read_calls(engine, rollout_id), dialects))
    return known.priors


class PriorCache:
    """Recent rollouts' ``Known`` calls, least recently used dropped first past ``rollouts`` or ``tokens``."""

    def __init__(
        self,
        engine: Engine,
        dialects: Dialects,
        shared: bool,
        rollouts: int = 4096,
        tokens: int = 50_000_000,
        read_inline: RunQuery | None = None,
    ) -> None:
        self.engine = engine
        self.dialects = dialects
        self.shared = shared
        self.inline = reads_in_place(engine)
        """SQLite (WAL): readers never wait for the writer, so the ids query runs on the event loop."""
        self._ids_query = DirectQuery(_IDS, engine.dialect)
        self._read_inline = point_query(engine, read_inline)
        """On the store writer's own connection when given (the recorder's), else on a pooled one."""
        self.max_rollouts = rollouts
        self.max_tokens = tokens
        self._known: OrderedDict[str, Known] = OrderedDict()
        self.tokens = 0
        self.refreshed = 0
        """Calls read back because another process wrote them (a measure of cross-replica traffic)."""

    def __len__(self) -> int:
        return len(self._known)

    async def priors(self, rollout_id: str) -> list[PriorCall]:
        known = self._known.get(rollout_id)
        if known is None and not self.inline:
            found = await anyio.to_thread.run_sync(self._read, rollout_id, None, None)
        elif known is None or self.shared:
            # the ids first (on SQLite a local read of ~20 us, far cheaper than the hop to a thread): a new
            # rollout has none, and a held one only reads the calls another process wrote
            ids = await self._ids(rollout_id)
            seen = known.seen if known is not None else set()
            missing = [i for i in ids if i not in seen]
            held = (known.opened(), known.requests()) if known is not None and missing else None
            found = await anyio.to_thread.run_sync(self._read, rollout_id, missing, held) if missing else []
            self.refreshed += len(found) if known is not None else 0
        else:
            found = []
        known = self.remember(rollout_id, found, create=True)
        return list(known.priors)

    async def _ids(self, rollout_id: str) -> list[int]:
        if self.inline:
            return self._ids_inline(rollout_id)
        return await anyio.to_thread.run_sync(complete_ids, self.engine, rollout_id)

    def _ids_inline(self, rollout_id: str) -> list[int]:
        """``complete_ids`` on the event loop (SQLite: a SELECT opens no transaction, so each one sees every
        commit before it)."""
        return [int(row[0]) for row in self._read_inline(self._ids_query, rollout_id=rollout_id)]

    def _read(
        self, rollout_id: str, ids: list[int] | None, held: tuple[dict[int, bytes], dict[int, str]] | None
    ) -> Found:
        """The rollout's complete calls (only ``ids`` when given) as priors. Another process's call may continue one
        this process holds (``Known.opened``, ``Known.requests``); where it continues one held as no prior (no
        dialect here reads it back) or without its request (a branch of a continued call), the rollout is read
        whole."""
        rows = read_calls(self.engine, rollout_id, ids)
        try:
            return parse_calls(rows, self.dialects, *(held or ()))
        except StoreError:
            if ids is None:
                raise
        wanted = set(ids)
        return [f for f in parse_calls(read_calls(self.engine, rollout_id), self.dialects) if f[0] in wanted]

    def remember(self, rollout_id: str, found: Found, create: bool = False) -> Known:
        """Learn committed calls (the process's own, or read back); a rollout not held is only added if ``create``
        (its own calls alone would be a partial history: it is read whole from the store when it calls)."""
        known = self._known.get(rollout_id)
        if known is None:
            known = Known()
            if not create:
                return known
        held = known.tokens
        known.learn([f for f in found if f[0] not in known.seen])
        self.tokens += known.tokens - held
        self._put(rollout_id, known)
        return known

    def _put(self, rollout_id: str, known: Known) -> None:
        self._known[rollout_id] = known
        self._known.move_to_end(rollout_id)
        while len(self._known) > 1 and (len(self._known) > self.max_rollouts or self.tokens > self.max_tokens):
            _, dropped = self._known.popitem(last=False)
            self.tokens -= dropped.tokens


__all__ = ["Found", "Known", "PriorCache", "complete_ids", "load_priors", "parse_calls", "read_calls"]
