"""An ASGI wrapper that notes, in the server's own order of events, what a generation route hands its client."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

GENERATION_PATHS = ("/chat/completions", "/responses", "/messages")


class SentLog:
    """Appends ``("body", bytes, more_body)`` to ``log`` for each body message a generation route sends, once the
    server has taken it (each is one write to the client's socket); the test adds its own entries beside them."""

    def __init__(self, app: ASGIApp, log: list[tuple[Any, ...]]) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(GENERATION_PATHS):
            await self.app(scope, receive, send)
            return

        async def noted(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body":
                self.log.append(("body", message.get("body", b""), message.get("more_body", False)))

        await self.app(scope, receive, noted)
