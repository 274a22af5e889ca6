"""Errors at the proxy's edge: every reply to a request that failed is in the shape of its dialect (Anthropic's
``{"type": "error", ...}`` for Messages, OpenAI's ``{"error": {...}}`` elsewhere): the matched route's dialect
(``routes``), else the dialect whose paths the request is on; an unexpected exception becomes a 500 reply
without dropping the connection.

Starlette's own last-resort handler re-raises after replying, and the server then closes the keep-alive
connection, so a client's next request on it fails; ``ErrorEdge`` replies and returns instead. An exception
after the reply has started (a stream) still propagates: only closing the connection tells that client.
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollwire.errors import InvalidRequest, NotFound, RollwireError, Unauthorized
from rollwire.proxy.dialects.base import Dialect
from rollwire.proxy.dialects.registry import dialect_for_path

logger = logging.getLogger(__name__)


def error_response(dialect: Dialect, exc: RollwireError, path: str) -> Response:
    """``exc`` as ``dialect``'s clients parse it (logged when it is the proxy's fault)."""
    if exc.status_code >= 500:
        logger.error("proxy error on %s: %s", path, exc.message)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return JSONResponse(dialect.error_body(exc), status_code=exc.status_code, headers=headers)


async def rollwire_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RollwireError)
    path = request.url.path
    return error_response(dialect_for_path(path), exc, path)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) in the dialect's shape."""
    assert isinstance(exc, HTTPException)
    error = NotFound(str(exc.detail)) if exc.status_code == 404 else InvalidRequest(str(exc.detail))
    error.status_code = exc.status_code
    path = request.url.path
    response = error_response(dialect_for_path(path), error, path)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


class ErrorEdge:
    """ASGI middleware: an exception nothing else handled becomes a 500 in the dialect's shape (logged with its
    traceback); the connection stays open for the client's next request. A client that hung up before its body
    was read is no error: it is noted, and nothing is sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except ClientDisconnect:  # the client left before its request was read: nobody to answer, nothing recorded
            if started:
                raise
            logger.info("client left before its request was read (%s)", scope.get("path", ""))
        except Exception as exc:
            if started:
                raise
            logger.exception("unhandled proxy error on %s", scope.get("path", ""))
            error = exc if isinstance(exc, RollwireError) else RollwireError(f"internal error: {type(exc).__name__}")
            body = dialect_for_path(scope.get("path", "")).error_body(error)
            await JSONResponse(body, status_code=error.status_code)(scope, receive, send)


__all__ = ["ErrorEdge", "error_response", "http_error", "rollwire_error"]
