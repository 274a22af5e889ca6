"""The one place the proxy talks to the engine: token-id prompts to ``/v1/completions``; httpx errors become
``UpstreamError`` (502) or ``UpstreamTimeout`` (504) here, once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from rollwire.proxy.conversation import Sampling

from rollwire.errors import InvalidRequest, NotFound, UpstreamError, UpstreamTimeout


def make_client(timeout_s: float) -> httpx.AsyncClient:
    """One pooled client for the proxy's lifetime, with explicit timeouts."""
    timeout = httpx.Timeout(connect=10.0, read=timeout_s, write=30.0, pool=30.0)
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
    return httpx.AsyncClient(timeout=timeout, limits=limits)


@dataclass(frozen=True, slots=True)
class Sampled:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    top_logprobs: list[dict[str, float]] | None
    tokens: list[str] | None


@dataclass(frozen=True, slots=True)
class UpstreamResult:
    prompt_ids: list[int]
    """What the engine says it was prompted with (checked against what was sent)."""
    choices: list[Sampled]
    weight_version: int | None


def completion_body(model: str, prompt: list[int], sampling: Sampling, stop_ids: list[int]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "return_token_ids": True,
        "logprobs": sampling.top_logprobs or 0,
        "n": sampling.n,
        "skip_special_tokens": False,
        "stop_token_ids": stop_ids,
    }
    if sampling.max_tokens is not None:
        body["max_tokens"] = sampling.max_tokens
    for name in ("temperature", "top_p", "seed"):
        value = getattr(sampling, name)
        if value is not None:
            body[name] = value
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    return body


def _raise_for(response: httpx.Response) -> None:
    try:
        message = str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = response.text[:300]
    if response.status_code == 404:
        raise NotFound(f"upstream: {message}", param="model")
    if response.status_code in (400, 422):
        raise InvalidRequest(f"upstream rejected the request: {message}")
    raise UpstreamError(f"upstream answered HTTP {response.status_code}: {message}")


def _parse(data: dict[str, Any]) -> UpstreamResult:
    choices = sorted(data["choices"], key=lambda c: c["index"])
    out = []
    for c in choices:
        lp = c.get("logprobs") or {}
        logprobs = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
        ids = [int(t) for t in c["token_ids"]]
        if len(logprobs) != len(ids):
            raise UpstreamError("upstream logprobs do not align with its token ids")
        out.append(Sampled(ids, logprobs, c.get("finish_reason") or "stop", lp.get("top_logprobs"), lp.get("tokens")))
    prompt_ids = data.get("prompt_token_ids") or choices[0].get("prompt_token_ids") or []
    version = data.get("weight_version")
    return UpstreamResult([int(t) for t in prompt_ids], out, int(version) if version is not None else None)


async def complete(client: httpx.AsyncClient, base_url: str, body: dict[str, Any]) -> UpstreamResult:
    """POST one token-id completion and return what the engine saw and sampled."""
    url = base_url.rstrip("/") + "/v1/completions"
    try:
        response = await client.post(url, json=body)
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(f"upstream at {base_url} timed out ({exc.__class__.__name__})") from None
    except httpx.HTTPError as exc:
        raise UpstreamError(f"cannot reach the upstream at {base_url}: {exc.__class__.__name__}") from None
    if response.status_code != 200:
        _raise_for(response)
    try:
        return _parse(response.json())
    except (ValueError, KeyError, TypeError) as exc:
        raise UpstreamError(f"upstream answer is not a completion with token ids: {exc}") from None


__all__ = ["Sampled", "UpstreamResult", "complete", "completion_body", "make_client"]
