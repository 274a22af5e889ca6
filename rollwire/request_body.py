"""Reading a JSON request body under a size limit, shared by every HTTP service (engine, proxy).

The size is checked before parsing: a declared Content-Length over the limit is refused at once, and a
streamed body is cut off as soon as it passes the limit, so an oversized upload never sits in memory.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from rollwire.errors import InvalidRequest, PayloadTooLarge


async def read_json_body(request: Request, limit: int) -> Any:
    """The parsed JSON body; PayloadTooLarge (413) over ``limit`` bytes, InvalidRequest (400) if malformed."""
    return (await read_json_text(request, limit))[0]


async def read_json_text(request: Request, limit: int) -> tuple[Any, str | None]:
    """The parsed JSON body and its text as sent (None if not UTF-8), for callers that store the body: keeping
    the text saves serializing a large request again."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes is over the {limit}-byte limit")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise PayloadTooLarge(f"request body is over the {limit}-byte limit")
    try:
        parsed = json.loads(body)
    except ValueError as exc:
        raise InvalidRequest(f"malformed JSON body: {exc}") from None
    try:
        return parsed, body.decode()
    except UnicodeDecodeError:  # JSON in UTF-16/32: parsed fine, stored re-serialized
        return parsed, None


__all__ = ["read_json_body", "read_json_text"]
