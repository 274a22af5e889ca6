"""UpstreamShim: an ASGI wrapper around the bundled engine for tests of what the proxy sends upstream.

It can play an upstream whose model card says it cannot enforce structured outputs (an engine without
constrained decoding); the ``structured_outputs`` field of each completion is kept here, and the engine behind
enforces it. Each completion's ``stream_interval`` is kept too; the shim can play an engine
whose ``/openapi.json`` lists it or one that has no such schema (older vLLM ignores the field), where the engine
would answer itself. It also signals when a completion has started streaming tokens back.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollwire.app.serving import ServerThread
from rollwire.settings import EngineSettings


def _with_length(headers: list[tuple[bytes, bytes]], length: int) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k.lower() != b"content-length"] + [(b"content-length", str(length).encode())]


OPENAPI: dict[str, Any] = {"components": {"schemas": {"CompletionRequest": {"properties": {"stream_interval": {}}}}}}
"""What vLLM's OpenAPI schema says of its completions' ``stream_interval`` (the rest left out)."""


async def _json(send: Any, data: Any, status: int = 200) -> None:
    out = json.dumps(data).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": out})


class UpstreamShim:
    def __init__(self, app: Any, structured_outputs: bool | None = None, stream_interval: bool | None = None) -> None:
        self.app = app
        self.structured_outputs = structured_outputs
        """What the model card says of structured outputs; None: the engine's own card (it enforces them)."""
        self.stream_interval = stream_interval
        """True: ``/openapi.json`` lists ``stream_interval``; False: there is none (404); None: the engine's own."""
        self.formats: list[Any] = []
        """The ``structured_outputs`` value of every completion request (None where absent)."""
        self.intervals: list[Any] = []
        """The ``stream_interval`` value of every completion request (None where absent)."""
        self.streaming = threading.Event()
        """Set once a completion has sent its first streamed chunk."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path")
        if scope["type"] == "http" and path == "/v1/models" and self.structured_outputs is not None:
            await self._models(scope, receive, send)
        elif scope["type"] == "http" and path == "/openapi.json" and self.stream_interval is not None:
            await _json(
                send, OPENAPI if self.stream_interval else {"detail": "Not Found"}, 200 if self.stream_interval else 404
            )
        elif scope["type"] == "http" and path == "/v1/completions":
            await self._completion(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _models(self, scope: Any, receive: Any, send: Any) -> None:
        start: dict[str, Any] = {}
        body = bytearray()

        async def buffered(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                data = json.loads(body)
                for card in data["data"]:
                    card["structured_outputs"] = self.structured_outputs
                out = json.dumps(data).encode()
                await send({**start, "headers": _with_length(list(start["headers"]), len(out))})
                await send({"type": "http.response.body", "body": out})

        await self.app(scope, receive, buffered)

    async def _completion(self, scope: Any, receive: Any, send: Any) -> None:
        raw = bytearray()
        while True:
            message = await receive()
            raw.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        request = json.loads(raw)
        self.formats.append(request.get("structured_outputs"))
        self.intervals.append(request.get("stream_interval"))
        out = json.dumps(request).encode()
        sent = False

        async def replayed() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": out, "more_body": False}
            return await receive()

        async def tapped(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and message.get("more_body") and message.get("body"):
                self.streaming.set()

        headers = _with_length(list(scope["headers"]), len(out))
        await self.app({**scope, "headers": headers}, replayed, tapped)


@contextlib.contextmanager
def shimmed_engine(
    model_dir: Path, home: Path, structured_outputs: bool | None = None, stream_interval: bool | None = None
) -> Iterator[tuple[str, UpstreamShim]]:
    """A bundled engine behind an UpstreamShim, served on a loopback port: (its URL, the shim)."""
    from rollwire.engine import create_app as create_engine

    engine = create_engine(EngineSettings(model=str(model_dir), device="cpu"), home)
    shim = UpstreamShim(engine, structured_outputs, stream_interval)
    with ServerThread(shim) as server:
        yield server.url, shim
