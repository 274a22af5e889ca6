"""HttpForward: an ASGI app that forwards every request to a server over HTTP, streaming the answer back.

It lets ``EngineTap`` (an ASGI wrapper) sit in front of an engine running in another process (real vLLM)
exactly as it sits in front of the bundled engine's ASGI app.
"""

from __future__ import annotations

from typing import Any

import httpx

HOP_HEADERS = {b"host", b"content-length", b"transfer-encoding", b"connection"}


class HttpForward:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]
                if kind == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif kind == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = bytearray()
        while True:
            message = await receive()
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_HEADERS]
        url = self.base_url + scope["path"] + (("?" + scope["query_string"].decode()) if scope["query_string"] else "")
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
            request = client.build_request(scope["method"], url, headers=headers, content=bytes(body))
            response = await client.send(request, stream=True)
            try:
                out = [(k.encode(), v.encode()) for k, v in response.headers.items() if k.encode() not in HOP_HEADERS]
                await send({"type": "http.response.start", "status": response.status_code, "headers": out})
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()
