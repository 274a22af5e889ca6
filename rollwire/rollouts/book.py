"""The store's rollout rows: create (with a token, or pending for the orchestrator), claim, move, finish with
the stream cursor, revoke. The only code that writes ``Rollout.status`` or ``Rollout.token_hash``.

Every change is a compare-and-set on ``status`` (``UPDATE ... WHERE status = <from>``) checked against the one
transition table, so two writers (the admin API, an orchestrator, a restarted one, another replica) never
both move a rollout. A final state takes the next stream cursor, ``max + 1`` under a unique index, in the same
statement: two finishers clash on the index and the loser retries, so cursors are gap-free and committed in
order in any number of processes, on SQLite and on Postgres. A rollout row is one attempt; an infrastructure
retry is a new row (``attempt + 1``, ``meta.retry_of``) so a trajectory never mixes two attempts' calls.
"""

from __future__ import annotations

import functools
import logging
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import col

from rollwire.errors import Conflict, Forbidden, NotFound, StoreError
from rollwire.rollouts import tokens
from rollwire.rollouts.states import TOKEN_WORKS, check_move
from rollwire.store.db import session_scope
from rollwire.store.direct import Condition, DirectQuery
from rollwire.store.schema import ENGINE_FAILED, ModelCall, Rollout, RolloutStatus, Run, now_ns

logger = logging.getLogger(__name__)
S = RolloutStatus

RUNTIME_META = ("runtime", "runtime_ref", "retry_of")
"""Meta keys that describe one attempt (where it ran, what it retries); a retry does not inherit them."""
CURSOR_TRIES = 50


@dataclass(frozen=True, slots=True)
class PlannedRollout:
    task_id: str
    group_id: str
    sample_index: int
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Task facts other services read from the row (``suite``: the gateway and env servers find the task by it)."""
    budgets: Mapping[str, Any] = field(default_factory=dict)


def live_rows(rows: Sequence[Rollout]) -> list[Rollout]:
    """The latest attempt of every planned rollout: rows no infrastructure retry (``retry``) has replaced."""
    replaced = {row.meta.get("retry_of") for row in rows}
    return [row for row in rows if row.id not in replaced]


def new_rollout_id() -> str:
    return f"ro-{uuid.uuid4().hex[:16]}"


def _next_attempt(failed: Rollout, rollout_id: str) -> Rollout:
    """The pending row that retries ``failed``: same task and group, the attempt after it, no runtime facts."""
    return Rollout(
        id=rollout_id,
        run_id=failed.run_id,
        token_hash=tokens.unusable_hash(),
        task_id=failed.task_id,
        group_id=failed.group_id,
        sample_index=failed.sample_index,
        attempt=failed.attempt + 1,
        meta={**{k: v for k, v in failed.meta.items() if k not in RUNTIME_META}, "retry_of": failed.id},
        budgets=dict(failed.budgets or {}),
    )


_STATUS_FOR_SHARE = (
    select(col(Rollout.status)).where(col(Rollout.id) == bindparam("rollout_id")).with_for_update(read=True)
)
"""Built once, run on the driver's cursor: on every model call's write, and SQLAlchemy's statement building
and execute cost several times the lookup itself (SQLite, measured with py-spy)."""
_DIRECT: dict[str, DirectQuery] = {}


TAKES_RECORDS = Condition(
    Rollout.__table__,  # type: ignore[attr-defined]
    (col(Rollout.id) == bindparam("rollout_id")) & or_(*(col(Rollout.status) == s for s in sorted(TOKEN_WORKS))),
)
"""``guard_active`` as a condition of the insert itself (``RowWriter(only_if=...)``): the rows' rollout exists
and still takes records, its row share-locked as the guard's is; the guard then only says why a row was kept out."""


def guard_active(conn: Connection, rollout_id: str) -> None:
    """Inside a write transaction: Forbidden unless the rollout still takes records. On Postgres the row is
    share-locked, so a concurrent finish waits for this transaction (or this one sees the finish)."""
    query = _DIRECT.get(conn.dialect.name)
    if query is None:
        query = _DIRECT.setdefault(conn.dialect.name, DirectQuery(_STATUS_FOR_SHARE, conn.dialect))
    rows = query.rows(conn.connection.dbapi_connection, rollout_id=rollout_id)  # in this transaction
    if not rows:
        raise Forbidden(f"no rollout {rollout_id}: nothing is recorded for it")
    status = rows[0][0]  # the member, converted from its stored name (``STATUS_TYPE``)
    if status not in TOKEN_WORKS:
        raise Forbidden(f"rollout {rollout_id} is {status.value}: nothing more is recorded for it")


class RolloutBook:
    """Store-backed rollout identity and state (sync; call off the event loop)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # -- runs ---------------------------------------------------------------------------------------------
    def create_run(self, run_id: str | None, name: str = "", kind: str = "adhoc", config: dict[str, Any] | None = None) -> Run:
        run = Run(id=run_id or "run-" + secrets.token_hex(6), name=name, kind=kind, config=dict(config or {}))
        with session_scope(self._engine) as session:
            if session.get(Run, run.id) is not None:
                raise Conflict(f"run {run.id!r} exists")
            session.add(run)
        return run

    def ensure_run(self, run_id: str, name: str, config: dict[str, Any]) -> Run:
        with session_scope(self._engine) as session:
            run = session.get(Run, run_id)
            if run is None:
                run = Run(id=run_id, name=name, kind="rollouts", config=config)
                session.add(run)
            return run

    def find_run(self, run_id: str) -> Run | None:
        with session_scope(self._engine) as session:
            return session.get(Run, run_id)

    # -- creating rollouts ----------------------------------------------------------------------------------
    def create(
        self, run_id: str, count: int, template: Mapping[str, Any], budgets: Mapping[str, Any] | None = None
    ) -> list[tuple[Rollout, str]]:
        """``count`` rollouts that are running at once, each with its token (handed out by the admin API)."""
        out: list[tuple[Rollout, str]] = []
        with session_scope(self._engine) as session:
            run = session.get(Run, run_id)
            if run is None:
                raise NotFound(f"no run {run_id!r}")
            merged = {**dict((run.config or {}).get("budgets") or {}), **dict(budgets or {})}
            for i in range(count):
                token, digest = tokens.mint()
                rollout = Rollout(
                    id=new_rollout_id(),
                    run_id=run_id,
                    token_hash=digest,
                    task_id=template.get("task_id"),
                    group_id=template.get("group_id"),
                    sample_index=int(template.get("sample_index_start", 0)) + i,
                    attempt=int(template.get("attempt", 0)),
                    meta=dict(template.get("meta") or {}),
                    budgets=merged,
                    status=S.RUNNING,
                    started_ns=now_ns(),
                )
                session.add(rollout)
                out.append((rollout, token))
        return out

    def plan(self, run_id: str, planned: Iterable[PlannedRollout]) -> list[str]:
        """Pending rows (attempt 0, no usable token until claimed); returns their ids."""
        ids: list[str] = []
        with session_scope(self._engine) as session:
            run = session.get(Run, run_id)
            defaults = dict(((run.config if run else {}) or {}).get("budgets") or {})
            for item in planned:
                rollout_id = new_rollout_id()
                session.add(
                    Rollout(
                        id=rollout_id,
                        run_id=run_id,
                        token_hash=tokens.unusable_hash(),
                        task_id=item.task_id,
                        group_id=item.group_id,
                        sample_index=item.sample_index,
                        meta=dict(item.meta),
                        budgets={**defaults, **dict(item.budgets)},
                    )
                )
                ids.append(rollout_id)
        return ids

    def fail_and_retry(self, failed: Rollout, source: RolloutStatus, **fields: Any) -> str | None:
        """``source -> FAILED`` and the next attempt's pending row in one transaction, so no stop between the two
        leaves a lost rollout with no retry; None if the row is no longer in ``source`` (nothing is written)."""
        check_move(failed.id, source, S.FAILED)
        rollout_id = new_rollout_id()
        retry = functools.partial(_next_attempt, failed, rollout_id)
        if not self._finalize(failed.id, source, dict(fields, status=S.FAILED), also=retry):
            return None
        tokens.forget(failed.id)
        return rollout_id

    # -- reading ----------------------------------------------------------------------------------------------
    def rollouts(self, run_id: str) -> list[Rollout]:
        with session_scope(self._engine) as session:
            query = select(Rollout).where(col(Rollout.run_id) == run_id).order_by(col(Rollout.created_ns))
            return list(session.execute(query).scalars())

    def get(self, rollout_id: str) -> Rollout:
        with session_scope(self._engine) as session:
            row = session.get(Rollout, rollout_id)
            if row is None:
                raise NotFound(f"no rollout {rollout_id}")
            return row

    def engine_failures(self, rollout_id: str, limit: int = 3) -> list[str]:
        """What the proxy recorded of the engine failing this rollout's model calls (``ENGINE_FAILED``): the
        platform's own evidence, which no harness can produce, that the rollout did not get a fair run."""
        statement = (
            select(col(ModelCall.error))
            .where(col(ModelCall.rollout_id) == rollout_id, col(ModelCall.status) == ENGINE_FAILED)
            .order_by(col(ModelCall.id))
            .limit(limit)
        )
        with session_scope(self._engine) as session:
            return [str(error or "the engine failed") for error in session.connection().execute(statement).scalars()]

    def call_versions(self, rollout_ids: Iterable[str]) -> dict[str, set[int]]:
        """The policy versions each rollout's model calls sampled from (the proxy records one per call); a rollout
        that made no call has none."""
        ids = list(rollout_ids)
        out: dict[str, set[int]] = {rollout_id: set() for rollout_id in ids}
        if not ids:
            return out
        statement = (
            select(col(ModelCall.rollout_id), col(ModelCall.policy_version))
            .where(col(ModelCall.rollout_id).in_(ids))
            .distinct()
        )
        with session_scope(self._engine) as session:
            for rollout_id, version in session.connection().execute(statement):
                out[rollout_id].add(int(version))
        return out

    # -- state changes ------------------------------------------------------------------------------------------
    def claim(self, rollout_id: str, source: RolloutStatus = S.PENDING) -> str | None:
        """pending -> starting with a fresh token; the token, or None if someone else moved it first.

        ``source=STARTING`` re-issues the token of a rollout whose start never reached the runtime.
        """
        if source != S.STARTING:
            check_move(rollout_id, source, S.STARTING)
        token, digest = tokens.mint()
        values: dict[str, Any] = {"token_hash": digest, "status": S.STARTING, "started_ns": now_ns()}
        changed = self._compare_and_set(rollout_id, source, values)
        if changed and source == S.STARTING:
            tokens.forget(rollout_id)
        return token if changed else None

    def move(self, rollout_id: str, source: RolloutStatus, target: RolloutStatus, **fields: Any) -> bool:
        """source -> target plus ``fields`` (reward, exit_code, ...); False if the row is no longer in ``source``."""
        check_move(rollout_id, source, target)
        values = dict(fields, status=target)
        changed = self._finalize(rollout_id, source, values) if target.is_final else self._compare_and_set(rollout_id, source, values)
        if changed:
            tokens.forget(rollout_id)
        return changed

    def set_status(self, rollout_id: str, target: RolloutStatus, **fields: Any) -> Rollout:
        """Move from whatever state the rollout is in now (the admin API); Conflict if the table forbids it."""
        for _ in range(CURSOR_TRIES):
            current = RolloutStatus(self.get(rollout_id).status)
            check_move(rollout_id, current, target)
            if target == S.RUNNING:
                fields.setdefault("started_ns", now_ns())
            if self.move(rollout_id, current, target, **fields):
                return self.get(rollout_id)
        raise Conflict(f"rollout {rollout_id} kept changing state; try again")

    def revoke(self, rollout_id: str) -> None:
        """Make the rollout's token unusable now (the rollout keeps its state)."""
        with session_scope(self._engine) as session:
            statement = update(Rollout).where(col(Rollout.id) == rollout_id).values(token_hash=tokens.unusable_hash())
            if session.connection().execute(statement).rowcount != 1:
                raise NotFound(f"no rollout {rollout_id}")
        tokens.forget(rollout_id)

    def merge_meta(self, rollout_id: str, extra: dict[str, Any]) -> None:
        """Record runtime facts (pod name, pid) that a restarted orchestrator needs to re-attach."""
        with session_scope(self._engine) as session:
            row = session.get(Rollout, rollout_id)
            if row is None:
                raise NotFound(f"no rollout {rollout_id}")
            row.meta = {**row.meta, **extra}
            session.add(row)

    def _compare_and_set(self, rollout_id: str, source: RolloutStatus, values: dict[str, Any]) -> bool:
        statement = update(Rollout).where(col(Rollout.id) == rollout_id, col(Rollout.status) == source).values(**values)
        with session_scope(self._engine) as session:
            changed = session.connection().execute(statement).rowcount == 1
        if changed:
            logger.debug("rollout %s: %s -> %s", rollout_id, source, values.get("status"), extra={"rollout_id": rollout_id})
        return changed

    def _finalize(
        self, rollout_id: str, source: RolloutStatus, values: dict[str, Any], also: Callable[[], Rollout] | None = None
    ) -> bool:
        """The final state and the next stream cursor in one statement (and ``also``, a row added in the same
        transaction when the move happens); a clash with another finisher is retried."""
        for _ in range(CURSOR_TRIES):
            try:
                with session_scope(self._engine) as session:
                    top = session.connection().execute(select(func.max(Rollout.finished_seq))).scalar()
                    statement = (
                        update(Rollout)
                        .where(col(Rollout.id) == rollout_id, col(Rollout.status) == source)
                        .values(**values, finished_ns=now_ns(), finished_seq=int(top or 0) + 1)
                    )
                    moved = session.connection().execute(statement).rowcount == 1
                    if moved and also is not None:
                        session.add(also())  # a fresh object each try: a failed try's session is spent
                    return moved
            except StoreError as exc:  # a cursor clash (unique index), or SQLite's stale read snapshot
                if not isinstance(exc.__cause__, (IntegrityError, OperationalError)):
                    raise
        raise Conflict(f"rollout {rollout_id}: could not take a stream cursor")


__all__ = ["RUNTIME_META", "TAKES_RECORDS", "PlannedRollout", "RolloutBook", "guard_active", "new_rollout_id"]
