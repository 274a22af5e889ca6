"""The bench's pass-through proxy: the server stack `rollwire proxy` is built on, doing none of rollwire's work.

    python bench/proxy_passthrough.py PORT UPSTREAM

uvicorn and Starlette configured as the proxy serves them (``rollwire.app.serving.serve``), and the proxy's own
upstream client (``rollwire.proxy.upstream_http``). Each chat call's body is read and parsed, sent as it came to
the upstream's ``/v1/chat/completions`` (the stub answers there too), and the answer goes back as it arrives:
whole, or as the upstream's event stream. No rendering, splicing, tokenizing, parsing of the answer, recording,
auth or metrics. Its row (``bench/proxy.py --passthrough``) is what a call costs before rollwire does anything:
the rest of rollwire's row is rollwire's own work. Compare CPU columns: its answers come from the stub's chat
route (as LiteLLM's do), which under ``--pace-ms`` streams fewer events than a completion and so ends sooner.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.responses import Response as HTTPResponse
from starlette.routing import Route

from rollwire.app.serving import listening_socket, serve
from rollwire.proxy.upstream import make_client
from rollwire.proxy.upstream_http import Response
from rollwire.settings import ProxySettings


def app(upstream: str) -> Starlette:
    pool = make_client(upstream, ProxySettings().upstream_timeout_s)  # as the proxy makes its own

    async def chat(request: Request) -> HTTPResponse:
        body = await request.body()
        stream = json.loads(body).get("stream") is True  # a proxy reads what it forwards
        answer = await pool.request("POST", "/v1/chat/completions", body)
        if not stream:
            return HTTPResponse(await answer.read(), answer.status_code, media_type="application/json")
        return StreamingResponse(_forwarded(answer), answer.status_code, media_type="text/event-stream")

    async def health(request: Request) -> HTTPResponse:
        return JSONResponse({"status": "ok"})

    routes = [Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes)


async def _forwarded(answer: Response) -> AsyncIterator[bytes]:
    """The upstream's event stream, passed on as its lines arrive."""
    try:
        async for lines in answer.batches():
            yield b"\n".join(lines) + b"\n"
    finally:
        answer.close()


if __name__ == "__main__":
    port, upstream = int(sys.argv[1]), sys.argv[2]
    raise SystemExit(serve(app(upstream), listening_socket("127.0.0.1", port)))
