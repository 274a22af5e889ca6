"""The one error hierarchy; every boundary translates foreign exceptions into it.

    RollwireError                 500  internal_error
    ├── InvalidRequest            400  invalid_request_error   (param names the field)
    ├── Unauthorized              401  authentication_error
    ├── Forbidden                 403  permission_error        (a token whose rollout ended, a spent budget)
    ├── NotFound                  404  not_found_error
    ├── Conflict                  409  conflict_error
    ├── PayloadTooLarge           413  request_too_large
    ├── TooManyRequests           429  rate_limit_error        (too many requests at once on one token)
    ├── StoreError                500  store_error
    ├── UpstreamError             502  upstream_error
    └── UpstreamTimeout           504  upstream_timeout

Only the edge (an HTTP error handler, the CLI) renders one, in the shape its client expects: one of the two
bodies below, for every server in the project (proxy, engine, gateway, env servers, the demo's teacher).
"""

from __future__ import annotations

from typing import Any


class RollwireError(Exception):
    """Base of every error rollwire raises on purpose."""

    status_code: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(RollwireError):
    status_code = 400
    code = "invalid_request_error"


class Unauthorized(RollwireError):
    status_code = 401
    code = "authentication_error"


class Forbidden(RollwireError):
    status_code = 403
    code = "permission_error"


class NotFound(RollwireError):
    status_code = 404
    code = "not_found_error"


class Conflict(RollwireError):
    status_code = 409
    code = "conflict_error"


class PayloadTooLarge(RollwireError):
    status_code = 413
    code = "request_too_large"


class TooManyRequests(RollwireError):
    status_code = 429
    code = "rate_limit_error"


class StoreError(RollwireError):
    status_code = 500
    code = "store_error"


class UpstreamError(RollwireError):
    status_code = 502
    code = "upstream_error"


class UpstreamTimeout(RollwireError):
    status_code = 504
    code = "upstream_timeout"


ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
"""Anthropic's error type for each status it names (any other: ``api_error``)."""


def openai_error_body(
    message: str, kind: str, *, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    """OpenAI's error body, ``{"error": {"message", "type", "param", "code"}}``. vLLM puts the HTTP status in
    ``code`` (the bundled engine, which speaks vLLM's wire format, does too); the others the error's code."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def openai_error(exc: RollwireError) -> dict[str, Any]:
    """``exc`` as OpenAI's error body."""
    return openai_error_body(exc.message, exc.code, param=exc.param, code=exc.code)


def anthropic_error(exc: RollwireError) -> dict[str, Any]:
    """``exc`` as Anthropic's error body, ``{"type": "error", "error": {"type", "message"}}``."""
    kind = ANTHROPIC_ERROR_TYPES.get(exc.status_code, "api_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


__all__ = [
    "ANTHROPIC_ERROR_TYPES",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "RollwireError",
    "StoreError",
    "TooManyRequests",
    "Unauthorized",
    "UpstreamError",
    "UpstreamTimeout",
    "anthropic_error",
    "openai_error",
    "openai_error_body",
]
