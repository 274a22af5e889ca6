"""Rollout states, the transitions allowed between them, and the store writes that make them: the only place a state changes.

Every change is a compare-and-set on ``Rollout.status`` (``UPDATE ... WHERE status = <from>``), so two
orchestrators, or one restarted mid-run, can never both start the same rollout: the store is the source
of truth. A rollout row is one attempt; an infrastructure retry is a new row (``attempt + 1``,
``meta.retry_of``) so a trajectory never mixes two attempts' model calls.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from rollwire.errors import Conflict, NotFound
from rollwire.store.db import session_scope
from rollwire.store.schema import Rollout, RolloutStatus, Run, now_ns

logger = logging.getLogger(__name__)

S = RolloutStatus
TRANSITIONS: dict[RolloutStatus, frozenset[RolloutStatus]] = {
    S.PENDING: frozenset({S.STARTING, S.FAILED}),
    S.STARTING: frozenset({S.RUNNING, S.FAILED, S.TIMED_OUT}),
    S.RUNNING: frozenset({S.SCORING, S.FAILED, S.TIMED_OUT}),
    S.SCORING: frozenset({S.FINISHED, S.FAILED}),
    S.FINISHED: frozenset(),
    S.FAILED: frozenset(),
    S.TIMED_OUT: frozenset(),
}
"""state -> states it may move to; final states move nowhere."""


def can_move(source: RolloutStatus, target: RolloutStatus) -> bool:
    return target in TRANSITIONS[source]


def new_token() -> tuple[str, str]:
    """A fresh rollout secret and its sha256 hex (only the hash is stored)."""
    token = secrets.token_urlsafe(24)
    return token, hashlib.sha256(token.encode()).hexdigest()


RUNTIME_META = ("runtime", "runtime_ref", "retry_of")
"""Meta keys that describe one attempt (where it ran, what it retries); a retry does not inherit them."""


@dataclass(frozen=True, slots=True)
class PlannedRollout:
    task_id: str
    group_id: str
    sample_index: int
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Task facts other services read from the row (``suite``: the gateway and env servers find the task by it)."""


class RolloutBook:
    """Store-backed rollout states of one process: create, claim, move, retry (sync; call off the event loop)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

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

    def plan(self, run_id: str, planned: Iterable[PlannedRollout]) -> list[str]:
        """Insert pending rows for ``planned`` (attempt 0); returns their ids."""
        ids: list[str] = []
        with session_scope(self._engine) as session:
            for item in planned:
                rollout_id = f"ro-{uuid.uuid4().hex[:16]}"
                _token, placeholder = new_token()  # pending rows hold an unusable hash until claimed
                session.add(
                    Rollout(
                        id=rollout_id,
                        run_id=run_id,
                        token_hash=placeholder,
                        task_id=item.task_id,
                        group_id=item.group_id,
                        sample_index=item.sample_index,
                        meta=dict(item.meta),
                    )
                )
                ids.append(rollout_id)
        return ids

    def rollouts(self, run_id: str) -> list[Rollout]:
        with session_scope(self._engine) as session:
            rows = session.exec(select(Rollout).where(Rollout.run_id == run_id).order_by(col(Rollout.created_ns)))
            return list(rows)

    def get(self, rollout_id: str) -> Rollout:
        with session_scope(self._engine) as session:
            row = session.get(Rollout, rollout_id)
            if row is None:
                raise NotFound(f"no rollout {rollout_id}")
            return row

    def claim(self, rollout_id: str, source: RolloutStatus = S.PENDING) -> str | None:
        """pending -> starting with a fresh token; returns the token, or None if someone else moved it first.

        ``source=STARTING`` re-issues the token of a rollout whose start never reached the runtime.
        """
        token, token_hash = new_token()
        values: dict[str, Any] = {"token_hash": token_hash, "status": S.STARTING, "started_ns": now_ns()}
        return token if self._compare_and_set(rollout_id, source, values, check=source != S.STARTING) else None

    def move(self, rollout_id: str, source: RolloutStatus, target: RolloutStatus, **fields: Any) -> bool:
        """source -> target plus ``fields`` (reward, exit_code, ...); False if the row is no longer in ``source``."""
        if not can_move(source, target):
            raise Conflict(f"rollout {rollout_id}: {source} -> {target} is not an allowed transition")
        values = dict(fields, status=target)
        if target.is_final:
            return self._finalize(rollout_id, source, values)
        return self._compare_and_set(rollout_id, source, values)

    def merge_meta(self, rollout_id: str, extra: dict[str, Any]) -> None:
        """Record runtime facts (pod name, pid) that a restarted orchestrator needs to re-attach."""
        with session_scope(self._engine) as session:
            row = session.get(Rollout, rollout_id)
            if row is None:
                raise NotFound(f"no rollout {rollout_id}")
            row.meta = {**row.meta, **extra}
            session.add(row)

    def retry(self, failed: Rollout) -> str:
        """A new pending attempt of a rollout that failed for infrastructure reasons (same task meta, no runtime facts)."""
        rollout_id = f"ro-{uuid.uuid4().hex[:16]}"
        _token, placeholder = new_token()
        with session_scope(self._engine) as session:
            session.add(
                Rollout(
                    id=rollout_id,
                    run_id=failed.run_id,
                    token_hash=placeholder,
                    task_id=failed.task_id,
                    group_id=failed.group_id,
                    sample_index=failed.sample_index,
                    attempt=failed.attempt + 1,
                    meta={**{k: v for k, v in failed.meta.items() if k not in RUNTIME_META}, "retry_of": failed.id},
                )
            )
        return rollout_id

    def _compare_and_set(
        self, rollout_id: str, source: RolloutStatus, values: dict[str, Any], *, check: bool = True
    ) -> bool:
        if check and "status" in values and not can_move(source, values["status"]):
            raise Conflict(f"rollout {rollout_id}: {source} -> {values['status']} is not an allowed transition")
        statement = update(Rollout).where(col(Rollout.id) == rollout_id, col(Rollout.status) == source).values(**values)
        with session_scope(self._engine) as session:
            changed = session.connection().execute(statement).rowcount == 1
        if changed:
            logger.debug("rollout %s: %s -> %s", rollout_id, source, values.get("status"), extra={"rollout_id": rollout_id})
        return changed

    def _finalize(self, rollout_id: str, source: RolloutStatus, values: dict[str, Any]) -> bool:
        """Final states also take the next stream cursor; a cursor clash (another writer) is retried."""
        for _ in range(20):
            try:
                with session_scope(self._engine) as session:
                    top = session.exec(select(func.max(Rollout.finished_seq))).one()
                    cursor = int(top or 0) + 1
                    statement = (
                        update(Rollout)
                        .where(col(Rollout.id) == rollout_id, col(Rollout.status) == source)
                        .values(**values, finished_ns=now_ns(), finished_seq=cursor)
                    )
                    return session.connection().execute(statement).rowcount == 1
            except Exception as exc:  # a unique-cursor clash surfaces as StoreError wrapping IntegrityError
                if not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise Conflict(f"rollout {rollout_id}: could not take a stream cursor")


def final_counts(rows: Sequence[Rollout]) -> dict[str, int]:
    """How many rows sit in each state (progress display, run summaries)."""
    counts: dict[str, int] = {status.value: 0 for status in RolloutStatus}
    for row in rows:
        counts[RolloutStatus(row.status).value] += 1
    return counts


__all__ = ["RUNTIME_META", "TRANSITIONS", "PlannedRollout", "RolloutBook", "can_move", "final_counts", "new_token"]
