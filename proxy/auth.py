"""Who is calling: a rollout's secret token (path segment, Bearer or x-api-key) -> its active rollout (looked
up and cached by ``rollwire.rollouts``), and the operator key for admin routes."""

from __future__ import annotations

import hmac

from sqlalchemy.engine import Engine
from starlette.requests import Request

from rollwire.errors import Unauthorized
from rollwire.rollouts import Identity, TokenIndex, hash_token
from rollwire.store.reads import RunQuery

Caller = Identity
"""The calling rollout (its id, run, task, budgets)."""


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
    def __init__(self, engine: Engine, operator_key: str, read_inline: RunQuery | None = None) -> None:
        self.tokens = TokenIndex(engine, read_inline=read_inline)
        self.operator_key = operator_key

    async def caller(self, request: Request) -> Caller:
        """The request's rollout: 401 for a missing or unknown token, 403 once the rollout has ended."""
        return await self.tokens.resolve(request_token(request))

    def check_operator(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        given = header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        if not given or not hmac.compare_digest(given.encode(), self.operator_key.encode()):
            raise Unauthorized("admin routes need Authorization: Bearer <operator key>")


__all__ = ["Caller", "TokenAuth", "hash_token", "request_token"]
