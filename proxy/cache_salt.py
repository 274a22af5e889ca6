"""Which calls may share the engine's cached prompt prefixes: the ``cache_salt`` each engine request carries.

An engine with prefix caching answers a prompt it has cached faster than one it has not, so a caller that can time
its own calls can test guesses at other callers' prompts. A rollout is such a caller (it reaches the proxy), and
its siblings' conversations are what it must not read. With scope ``rollout`` every rollout's calls carry a salt of
their own (a keyed hash of its id, so nobody can choose another's), and only its own calls reuse each other's
keys and values: a turn continues the previous one, which is where the reuse is. Scope ``shared`` sends none, so
calls of every rollout also share their common system prompt; it suits a suite whose rollouts hold no secret
from each other.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from rollwire.errors import InvalidRequest

if TYPE_CHECKING:
    from rollwire.rollouts import Identity

SCOPES = ("rollout", "shared")


class CacheSalts:
    """The salt of each caller's engine requests under one scope; the key makes salts unforgeable."""

    def __init__(self, scope: str, key: bytes) -> None:
        if scope not in SCOPES:
            raise InvalidRequest(f"unknown prefix cache scope {scope!r}; known: {', '.join(SCOPES)}")
        self.scope = scope
        self._key = hashlib.sha256(b"rollwire cache salt\0" + key).digest()

    def salt(self, caller: Identity) -> str | None:
        """32 hex characters (within vLLM's 128 and its character rules), or None when calls share the cache."""
        if self.scope == "shared":
            return None
        return hmac.new(self._key, caller.rollout_id.encode(), hashlib.sha256).hexdigest()[:32]


__all__ = ["SCOPES", "CacheSalts"]
