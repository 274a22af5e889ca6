"""Rollout tokens: minted once, stored only as their sha256, looked up (and cached) by every service that a
harness calls with one. A token works while its rollout is starting or running; when the rollout ends or the
token is revoked, this process's caches drop it at once and other processes' within ``ttl_s`` (the store's
write guard, ``guard``, keeps anything from being recorded in between)."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Engine
from sqlmodel import col

from rollwire.errors import Forbidden, Unauthorized
from rollwire.rollouts.states import TOKEN_WORKS
from rollwire.store.direct import DirectQuery
from rollwire.store.reads import RunQuery, point_query, point_read
from rollwire.store.schema import Rollout, RolloutStatus

PREFIX = "rw-"


def hash_token(token: str) -> str:
    """The stored form of a token (the store never holds a token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()


def mint() -> tuple[str, str]:
    """A fresh token and its hash."""
    token = PREFIX + secrets.token_urlsafe(24)
    return token, hash_token(token)


def unusable_hash() -> str:
    """A ``token_hash`` no token hashes to (pending and revoked rows): not hex, so never a sha256 digest."""
    return "none:" + secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling: the rollout a token belongs to, with what its callers need to serve it."""

    rollout_id: str
    run_id: str
    status: RolloutStatus
    task_id: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    budgets: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> Identity:
        """From a ``_BY_HASH`` row."""
        rollout_id, run_id, status, task_id, meta, budgets = row
        return cls(rollout_id, run_id, status, task_id, dict(meta or {}), dict(budgets or {}))


_BY_HASH = select(
    col(Rollout.id), col(Rollout.run_id), col(Rollout.status), col(Rollout.task_id), col(Rollout.meta),
    col(Rollout.budgets),
).where(col(Rollout.token_hash) == bindparam("token_hash"))
"""Built once and run on the driver's cursor (``DirectQuery``): every new rollout's first call looks it up."""


def check_active(identity: Identity) -> Identity:
    """The identity, or Forbidden (403) naming why its token no longer works."""
    if identity.status not in TOKEN_WORKS:
        raise Forbidden(
            f"rollout {identity.rollout_id} is {identity.status.value}: its token no longer works "
            "(nothing from this request is recorded)"
        )
    return identity


_INDEXES: weakref.WeakSet[TokenIndex] = weakref.WeakSet()
_INDEXES_LOCK = threading.Lock()


def forget(rollout_id: str) -> None:
    """Drop ``rollout_id`` from every token cache of this process (its state changed or its token was revoked)."""
    with _INDEXES_LOCK:
        indexes = list(_INDEXES)
    for index in indexes:
        index.forget(rollout_id)


class TokenIndex:
    """token -> Identity, cached for ``ttl_s``; Unauthorized for an unknown token, Forbidden for an ended rollout."""

    def __init__(self, engine: Engine, ttl_s: float = 1.0, read_inline: RunQuery | None = None) -> None:
        """``read_inline``: the event loop's store connection to look tokens up on (``point_query``)."""
        self._engine = engine
        self._ttl_s = ttl_s
        self._cache: dict[str, tuple[float, Identity]] = {}
        """token -> (when looked up, its rollout), keyed by the token, which every request carries anyway; the store
        holds only its hash."""
        self._by_hash = DirectQuery(_BY_HASH, engine.dialect)
        self._query = point_query(engine, read_inline)
        with _INDEXES_LOCK:
            _INDEXES.add(self)

    def lookup(self, token: str) -> Identity | None:
        """The token's rollout from the store (no cache)."""
        rows = self._query(self._by_hash, token_hash=hash_token(token))
        return Identity.of(rows[0]) if rows else None

    async def resolve(self, token: str | None) -> Identity:
        """The active rollout of ``token``: cached, else looked up (``point_read``)."""
        if not token:
            raise Unauthorized("missing rollout token: use /r/<token>/... or an Authorization: Bearer header")
        hit = self._cache.get(token)  # by the token itself: hashing it for every call cost ~1% of the call
        if hit is not None and time.monotonic() - hit[0] < self._ttl_s:
            return check_active(hit[1])
        found = await point_read(self._engine, self.lookup, token)
        if found is None:
            self._cache.pop(token, None)
            raise Unauthorized("unknown rollout token")
        self._cache[token] = (time.monotonic(), found)
        if len(self._cache) > 65536:
            self._cache.pop(next(iter(self._cache)))
        return check_active(found)

    def forget(self, rollout_id: str) -> None:
        for token, (_at, identity) in list(self._cache.items()):
            if identity.rollout_id == rollout_id:
                self._cache.pop(token, None)


__all__ = ["PREFIX", "Identity", "TokenIndex", "check_active", "forget", "hash_token", "mint", "unusable_hash"]
