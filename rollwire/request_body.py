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
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes is over the {limit}-byte limit")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise PayloadTooLarge(f"request body is over the {limit}-byte limit")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise InvalidRequest(f"malformed JSON body: {exc}") from None


__all__ = ["read_json_body"]
