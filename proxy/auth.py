"""Who is calling: a rollout's secret token (path segment, Bearer or x-api-key) -> its rollout, and the
operator key for admin routes. Tokens are looked up by sha256 (the store never holds them) and cached."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine
from sqlmodel import select
from starlette.requests import Request

from rollwire.errors import InvalidRequest, Unauthorized
from rollwire.side_calls import DEFAULT_RULES, SideCallRule, rules_from
from rollwire.store import Rollout, session_scope


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "rw-" + secrets.token_urlsafe(24)


@dataclass(frozen=True, slots=True)
class Caller:
    rollout_id: str
    run_id: str
    side_call_rules: tuple[SideCallRule, ...] = DEFAULT_RULES
    """How this rollout's calls are told apart as main line or side calls (its meta can replace the defaults)."""


def _rules(meta: dict[str, Any]) -> tuple[SideCallRule, ...]:
    """The rollout's own rules (checked when it was created), else the defaults."""
    try:
        return rules_from(meta["side_call_rules"]) if "side_call_rules" in meta else DEFAULT_RULES
    except InvalidRequest:
        return DEFAULT_RULES


def request_token(request: Request) -> str | None:
    """The token from ``/r/{token}/...``, ``Authorization: Bearer`` or ``x-api-key``."""
    token = request.path_params.get("token")
    if token:
        return str(token)
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return request.headers.get("x-api-key") or None


class TokenAuth:
    def __init__(self, engine: Engine, operator_key: str) -> None:
        self._engine = engine
        self._cache: dict[str, Caller] = {}
        self.operator_key = operator_key

    def _lookup(self, digest: str) -> Caller | None:
        with session_scope(self._engine) as session:
            row = session.exec(select(Rollout).where(Rollout.token_hash == digest)).first()
            return Caller(row.id, row.run_id, _rules(row.meta or {})) if row else None

    async def caller(self, request: Request) -> Caller:
        token = request_token(request)
        if not token:
            raise Unauthorized("missing rollout token: use /r/<token>/v1 or an Authorization: Bearer header")
        digest = hash_token(token)
        cached = self._cache.get(digest)
        if cached is not None:
            return cached
        found = await anyio.to_thread.run_sync(self._lookup, digest)
        if found is None:
            raise Unauthorized("unknown rollout token")
        self._cache[digest] = found
        return found

    def check_operator(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        given = header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        if not given or not hmac.compare_digest(given.encode(), self.operator_key.encode()):
            raise Unauthorized("admin routes need Authorization: Bearer <operator key>")


__all__ = ["Caller", "TokenAuth", "hash_token", "new_token", "request_token"]
