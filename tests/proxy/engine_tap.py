"""EngineTap: an ASGI wrapper around the engine that keeps, independently of the proxy, each completion's
request and answer body, so tests can compare recorded trajectories with what the engine really saw and sampled."""

from __future__ import annotations

import json
from typing import Any


class EngineTap:
    """Records (request JSON, response JSON) of every /v1/completions call; other routes pass through."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/completions":
            await self.app(scope, receive, send)
            return
        request, response = bytearray(), bytearray()

        async def tap_receive() -> Any:
            message = await receive()
            request.extend(message.get("body", b""))
            return message

        async def tap_send(message: Any) -> None:
            if message["type"] == "http.response.body":
                response.extend(message.get("body", b""))
                if not message.get("more_body"):
                    self.calls.append((json.loads(request), json.loads(response)))
            await send(message)

        await self.app(scope, tap_receive, tap_send)
