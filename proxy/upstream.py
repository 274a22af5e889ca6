"""The one place the proxy talks to the engine: token-id prompts to ``/v1/completions`` (over the lean
keep-alive client in ``upstream_http``); transport errors become ``UpstreamError`` (502) or ``UpstreamTimeout``
(504) here, once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from rollwire.compact_json import json_bytes
from rollwire.errors import InvalidRequest, NotFound, RollwireError, UpstreamError, UpstreamTimeout
from rollwire.proxy.conversation import Sampling
from rollwire.proxy.upstream_http import TRANSPORT_ERRORS, Pool, Response, Timeouts


def make_client(upstream: str, timeout_s: float) -> Pool:
    """One keep-alive pool for the proxy's lifetime, with explicit timeouts; a bad URL is refused here."""
    try:
        return Pool(upstream, Timeouts(connect=10.0, read=timeout_s, total=timeout_s))
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="upstream") from None


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


def completion_body(
    model: str,
    prompt: Sequence[int],
    sampling: Sampling,
    stop_ids: list[int],
    stream_interval: int | None = None,
    cache_salt: str | None = None,
) -> dict[str, Any]:
    """The engine's completion request; ``stream_interval``: tokens a streamed chunk may hold (vLLM's per-request
    field, sent only to an engine that takes it: ``takes_stream_interval``); ``cache_salt``: which requests may
    share cached prefixes (``rollwire.proxy.cache_salt``)."""
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
    for name in ("temperature", "top_p", "top_k", "seed"):
        value = getattr(sampling, name)
        if value is not None:
            body[name] = value
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.structured is not None:
        body["structured_outputs"] = sampling.structured.spec
    if stream_interval is not None:
        body["stream_interval"] = stream_interval
    if cache_salt is not None:
        body["cache_salt"] = cache_salt
    return body


def _raise_for(status: int, data: bytes) -> None:
    try:
        message = str(orjson.loads(data)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = data[:300].decode(errors="replace")
    if status == 404:
        raise NotFound(f"upstream: {message}", param="model")
    if status in (400, 422):
        raise InvalidRequest(f"upstream rejected the request: {message}")
    raise UpstreamError(f"upstream answered HTTP {status}: {message}")


def _sampled(ids: Any, logprobs: Any) -> tuple[list[int], list[float]]:
    """Sampled ids and their logprobs as the engine sent them, converted (a null logprob reads as 0.0)."""
    return [int(t) for t in ids], [float(x) if x is not None else 0.0 for x in logprobs]


def _choice(c: dict[str, Any]) -> tuple[list[int], list[float], dict[str, Any]]:
    lp = c.get("logprobs") or {}
    ids, logprobs = _sampled(c.get("token_ids") or (), lp.get("token_logprobs") or ())
    if len(logprobs) != len(ids):
        raise UpstreamError("upstream logprobs do not align with its token ids")
    return ids, logprobs, lp


def _prompt(ids: Any) -> list[int]:
    """The prompt ids an engine echoes (vLLM: on a choice's first chunk), kept as parsed: they are only compared
    with what was sent, and a list of anything else is just a different prompt. A long context runs to tens of
    thousands of ids, and converting each through ``int()`` cost ~40 ns an id (~1.3 ms at 32k) for nothing."""
    return ids if type(ids) is list else list(ids)


def _version(data: dict[str, Any]) -> int | None:
    version = data.get("weight_version")
    return int(version) if version is not None else None


def _parse(data: dict[str, Any]) -> UpstreamResult:
    choices = sorted(data["choices"], key=lambda c: c["index"])
    out = []
    for c in choices:
        if c.get("token_ids") is None:
            raise KeyError("token_ids")
        ids, logprobs, lp = _choice(c)
        out.append(Sampled(ids, logprobs, c.get("finish_reason") or "stop", lp.get("top_logprobs"), lp.get("tokens")))
    prompt_ids = data.get("prompt_token_ids") or choices[0].get("prompt_token_ids") or []
    return UpstreamResult(_prompt(prompt_ids), out, _version(data))


@dataclass(slots=True)
class ChoiceChunk:
    """What one streamed chunk adds to one choice (not frozen: made once per sampled token, and a frozen
    dataclass's ``__init__`` costs several times a plain one's)."""

    index: int
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    tokens: list[str] | None
    finish_reason: str | None
    prompt_ids: list[int] | None
    """Only on a choice's first chunk (vLLM's place for them)."""


@dataclass(slots=True)
class Chunk:
    choices: list[ChoiceChunk]
    weight_version: int | None


def _choice_chunk(c: dict[str, Any]) -> ChoiceChunk:
    ids, logprobs, lp = _choice(c)
    prompt = c.get("prompt_token_ids")
    prompt_ids = _prompt(prompt) if prompt is not None else None
    return ChoiceChunk(
        int(c["index"]), ids, logprobs, lp.get("top_logprobs"), lp.get("tokens"), c.get("finish_reason"), prompt_ids
    )


def _chunk(data: dict[str, Any]) -> Chunk:
    if "error" in data:
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise UpstreamError(f"upstream failed mid-stream: {message}")
    return Chunk([_choice_chunk(c) for c in data["choices"]], _version(data))


class _Unfoldable(Exception):
    """A batch that does not fold into one chunk (an error, a second prompt for a choice)."""


def _folded(datas: list[Any]) -> Chunk:
    """A batch of parsed chunks as one: each choice's ids, logprobs, top logprobs and tokens in order, its last
    finish reason, its prompt ids, the first chunk's weight version (the one a reader takes). The reader takes a
    batch in one pass of the loop, so nothing it sends could go out between the chunks; ``_Unfoldable`` where
    chunk by chunk would read differently. Later chunks' ids and logprobs are gathered as sent and converted once
    at the end (one token a chunk: a conversion per chunk was most of the fold); anything that fails to convert
    fails the fold, and chunk by chunk then names it."""
    parts: dict[int, ChoiceChunk] = {}
    later: dict[int, tuple[list[Any], list[Any]]] = {}
    for data in datas:
        if "error" in data:
            raise _Unfoldable
        for c in data["choices"]:
            index = int(c["index"])
            part = parts.get(index)
            if part is None:
                parts[index] = _choice_chunk(c)
                later[index] = ([], [])
                continue
            if c.get("prompt_token_ids") is not None:
                raise _Unfoldable
            lp = c.get("logprobs") or {}
            ids, logprobs = c.get("token_ids") or (), lp.get("token_logprobs") or ()
            if len(ids) != len(logprobs):
                raise _Unfoldable
            more_ids, more_logprobs = later[index]
            more_ids += ids
            more_logprobs += logprobs
            if lp.get("top_logprobs"):
                part.top_logprobs = part.top_logprobs if part.top_logprobs is not None else []
                part.top_logprobs += lp["top_logprobs"]
            if lp.get("tokens"):
                part.tokens = part.tokens if part.tokens is not None else []
                part.tokens += lp["tokens"]
            part.finish_reason = c.get("finish_reason") or part.finish_reason
    for index, (more_ids, more_logprobs) in later.items():
        if more_ids:
            part = parts[index]
            ids, logprobs = _sampled(more_ids, more_logprobs)
            part.token_ids += ids
            part.logprobs += logprobs
    return Chunk(list(parts.values()), _version(datas[0]))


_ECHO = b'"prompt_token_ids":'


def _without_echo(payload: bytes, prompt: bytes) -> bytes:
    """``payload`` with its prompt echo made ``null`` where the echo is, byte for byte, the prompt as sent: then it
    parses to exactly the ids sent, so there is nothing to check. An engine echoes the whole context on a choice's
    first chunk (vLLM, in the same compact JSON), and parsing and comparing ~13k ids cost ~0.25 ms a call. Any other
    echo is left in place, parsed and compared. Outside a JSON string a quote is never escaped, so the key's bytes
    only match a key."""
    at = payload.find(_ECHO)
    if at < 0:
        return payload
    start = at + len(_ECHO)
    end = start + len(prompt)
    if not payload.startswith(prompt, start) or payload[end : end + 1] not in (b",", b"}"):
        return payload
    return payload[:start] + b"null" + payload[end:]


def _batch(payloads: list[bytes]) -> tuple[list[Chunk], Exception | None]:
    """One batch's chunks, and the error that cut it short (the chunks before it still count: what was sampled
    is recorded). The chunks of a batch arrived together and are read in one pass, so they are parsed in one and
    folded (``_folded``): a packet of ~30 token chunks then costs ~40% less than chunk by chunk, and a stream
    sends their text as one delta. A batch that does not fold goes chunk by chunk, which also finds the bad one."""
    if len(payloads) > 1:
        try:
            return [_folded(orjson.loads(b"[" + b",".join(payloads) + b"]"))], None
        except (_Unfoldable, ValueError, KeyError, TypeError, UpstreamError):
            pass
    return _one_by_one(payloads)


def _one_by_one(payloads: list[bytes]) -> tuple[list[Chunk], Exception | None]:
    """``_batch`` chunk by chunk: what a fold must read the same as (``tests/proxy/test_upstream_chunks.py``)."""
    out: list[Chunk] = []
    for payload in payloads:
        try:
            out.append(_chunk(orjson.loads(payload)))
        except (ValueError, KeyError, TypeError, UpstreamError) as exc:
            return out, exc
    return out, None


def _whole(result: UpstreamResult) -> Chunk:
    """A non-streamed answer (an upstream that ignores ``stream``) as one chunk that finishes every choice."""
    choices = [
        ChoiceChunk(i, s.token_ids, s.logprobs, s.top_logprobs, s.tokens, s.finish_reason, result.prompt_ids)
        for i, s in enumerate(result.choices)
    ]
    return Chunk(choices, result.weight_version)


class engine_failures:  # lower case: used as a function is, ``with engine_failures(url):``
    """The one translation of the engine client's failures: a wait past its deadline is ``UpstreamTimeout`` (504),
    a connection that cannot be made or breaks is ``UpstreamError`` (502). A class, not a generator: it wraps every
    exchange, and costs a few hundred nanoseconds a use where ``contextlib.contextmanager`` costs microseconds."""

    __slots__ = ("base_url",)

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, TimeoutError):
            raise UpstreamTimeout(f"upstream at {self.base_url} timed out ({exc.__class__.__name__})") from None
        if isinstance(exc, TRANSPORT_ERRORS):
            raise UpstreamError(f"cannot reach the upstream at {self.base_url}: {_transport_reason(exc)}") from None


def _transport_reason(exc: BaseException) -> str:
    """The failure's class and, for a system call's, what the system said: "OSError" alone hides whether the
    engine refused the connection or this process ran out of file descriptors."""
    reason = getattr(exc, "strerror", None) if isinstance(exc, OSError) else None
    return f"{exc.__class__.__name__} ({reason})" if reason else exc.__class__.__name__


async def exchange(client: Pool, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """One whole exchange: (status, body bytes)."""
    with engine_failures(client.base_url):
        response = await client.request(method, path, json_bytes(body) if body is not None else None)
        return response.status_code, await response.read()


async def takes_stream_interval(client: Pool) -> bool:
    """Whether the engine takes a per-request ``stream_interval`` on completions (vLLM's since mid-2026): its
    OpenAPI schema lists the field. Older vLLM ignores unknown fields but logs a warning on every request that
    carries one, so it is only sent where listed (the bundled engine lists it too)."""
    try:
        status, data = await exchange(client, "GET", "/openapi.json")
        if status != 200:
            return False
        return "stream_interval" in orjson.loads(data)["components"]["schemas"]["CompletionRequest"]["properties"]
    except (RollwireError, ValueError, KeyError, TypeError):
        return False


@dataclass(frozen=True, slots=True)
class Opened:
    """A streamed completion the upstream accepted, and its prompt's ids as the request carried them (JSON)."""

    response: Response
    prompt: bytes


def _request_bytes(body: dict[str, Any], prompt: bytes | None = None) -> tuple[list[bytes], bytes]:
    """The streamed request's body in parts, and the prompt's ids as they appear in it: ``prompt`` where the caller
    has them written already (``json_bytes(body["prompt"])``), between the other fields. The parts are sent as
    they are: joined, a 128k-token prompt (~700 kB) was copied twice a call."""
    prompt = json_bytes(body["prompt"]) if prompt is None else prompt
    head = json_bytes({**body, "prompt": 0, "stream": True})  # "model" comes first: the first "prompt":0 is ours
    at = head.index(b'"prompt":0') + len(b'"prompt":')
    return [head[:at], prompt, head[at + 1 :]], prompt


async def open_stream(client: Pool, body: dict[str, Any], prompt: bytes | None = None) -> Opened:
    """Send a streamed completion and wait for its status; the caller reads ``chunks`` and closes the response.
    ``prompt``: ``body``'s prompt as JSON, where the caller has it written already."""
    data, prompt = _request_bytes(body, prompt)
    with engine_failures(client.base_url):
        response = await client.request("POST", "/v1/completions", data)
        if response.status_code != 200:
            _raise_for(response.status_code, await response.read())
    return Opened(response, prompt)


async def chunks(response: Response, base_url: str, prompt: bytes | None = None) -> AsyncIterator[list[Chunk]]:
    """The engine's server-sent events as chunks, up to ``[DONE]``: each batch holds every chunk that had arrived
    (an engine often sends several in one packet; a batch costs one pass of the event loop, not one each).
    A batch comes folded into one chunk where it folds (``_batch``).
    ``prompt``: the prompt's ids as sent (``Opened.prompt``); an echo of exactly those bytes is not parsed."""
    try:
        with engine_failures(base_url):
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                yield [_whole(_parse(orjson.loads(await response.read())))]
                return
            done = False
            async for lines in response.batches():
                payloads: list[bytes] = []
                for line in lines:
                    if done or not line.startswith(b"data:"):
                        continue  # after [DONE], read to the body's end: the connection then goes back to the pool
                    # the echo goes first: what remains of a first chunk is short to cut and strip
                    payload = (_without_echo(line, prompt) if prompt is not None else line)[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    payloads.append(payload)
                batch, bad = _batch(payloads)
                if batch:
                    yield batch
                if bad is not None:
                    raise bad
    except (ValueError, KeyError, TypeError) as exc:
        raise UpstreamError(f"upstream stream is not completion chunks with token ids: {exc}") from None


__all__ = [
    "ChoiceChunk",
    "Chunk",
    "Opened",
    "Sampled",
    "UpstreamResult",
    "chunks",
    "completion_body",
    "engine_failures",
    "make_client",
    "open_stream",
    "takes_stream_interval",
]
