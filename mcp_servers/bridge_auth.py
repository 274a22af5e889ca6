"""The bridge's door (``rollwire mcp bridge``): who may reach the MCP path, and how the bridge proves it is itself.

Only a request with ``Authorization: Bearer <key>`` (compared in constant time) passes; any other is answered 401
before the server sees a byte, and a 401 never carries a proof. A keyed request may carry ``X-Rollwire-Nonce``
(1 to 128 visible ASCII characters; the gateway sends a fresh one each time): every response to it, whatever its
status or body (JSON, an SSE stream, a 202, an error after the key was checked), then carries ``X-Rollwire-Proof:
placement.proof(key, nonce)``. A process that took the bridge's port after the bridge stopped (the harness shares
a rollout pod's network) is sent the key by the gateway, but cannot prove it for the nonce of a request that
already went to it, so the gateway records none of its answers.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollwire.mcp_servers.placement import proof

NONCE_HEADER = "X-Rollwire-Nonce"
PROOF_HEADER = "X-Rollwire-Proof"
MAX_NONCE = 128


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key == name), None)


def _nonce_ok(nonce: bytes) -> bool:
    return 0 < len(nonce) <= MAX_NONCE and all(0x21 <= byte <= 0x7E for byte in nonce)


@dataclass
class KeyRequired:
    """``app``, for requests with ``Authorization: Bearer <key>``, their responses proving the key when asked to;
    401 for the rest."""

    key: str
    app: ASGIApp
    _key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._key = self.key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scheme, _, token = (_header(scope, b"authorization") or b"").partition(b" ")
        if not (scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)):
            await JSONResponse({"error": "a bearer key is required, and this is not it"}, 401)(scope, receive, send)
            return
        nonce = _header(scope, NONCE_HEADER.lower().encode())
        if nonce is None:
            return await self.app(scope, receive, send)
        if not _nonce_ok(nonce):
            error = {"error": f"{NONCE_HEADER} must be 1 to {MAX_NONCE} visible ASCII characters"}
            return await JSONResponse(error, 400)(scope, receive, send)
        proven = (PROOF_HEADER.lower().encode(), proof(self.key, nonce.decode("ascii")).encode())

        async def proving(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), proven]}
            await send(message)

        await self.app(scope, receive, proving)


__all__ = ["MAX_NONCE", "NONCE_HEADER", "PROOF_HEADER", "KeyRequired"]
