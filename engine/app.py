"""The engine's Starlette app: routes, lifespan (model, batcher, reloads), body limits and OpenAI-shaped errors.

Every error leaves as ``{"error": {"message", "type", "param", "code"}}`` with its HTTP status, as vLLM's
``ErrorResponse`` (``code`` is the status number); unknown request fields are logged once by name.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rollwire.engine.protocol import CompletionRequest, DetokenizeRequest, ReloadRequest, TokenizeRequest, WireModel
from rollwire.engine.tokenize import detokenize, tokenize
from rollwire.errors import InvalidRequest, RollwireError, openai_error_body
from rollwire.request_body import read_json_body
from rollwire.settings import EngineSettings

logger = logging.getLogger(__name__)

WireT = TypeVar("WireT", bound=WireModel)


class _Engine:
    """What the routes share; built in lifespan, so nothing lives at module level."""

    def __init__(self, settings: EngineSettings, model_path: Path) -> None:
        from rollwire.engine.batcher import Batcher
        from rollwire.engine.completions import CompletionService
        from rollwire.engine.model import LanguageModel
        from rollwire.engine.prefix_cache import PrefixCache
        from rollwire.engine.weights import WeightManager

        self.settings = settings
        self.model = LanguageModel(model_path, settings.device, settings.max_model_len)
        self.served_name = settings.served_model_name or self.model.weights.path.name
        prefix_cache = PrefixCache(settings.prefix_cache_mib * 1024 * 1024)
        self.batcher = Batcher(self.model, settings.max_batch_size, prefix_cache)
        self.weights = WeightManager(self.model, self.batcher)
        self.completions = CompletionService(self.model, self.batcher, self.served_name)
        self.created = int(time.time())
        self.unknown_logged: set[str] = set()


def _engine(request: Request) -> _Engine:
    engine: _Engine = request.app.state.engine
    return engine


async def _read_json(request: Request, limit: int) -> Any:
    return await read_json_body(request, limit)


async def _parse(request: Request, model: type[WireT]) -> WireT:
    engine = _engine(request)
    data = await _read_json(request, engine.settings.max_body_bytes)
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        raise InvalidRequest(f"{where or 'body'}: {first['msg']}", param=where) from None
    fresh = [name for name in parsed.unknown_fields() if name not in engine.unknown_logged]
    if fresh:
        engine.unknown_logged.update(fresh)
        logger.info("ignoring unknown request fields: %s", ", ".join(fresh))
    return parsed


async def completions(request: Request) -> Response:
    body = await _parse(request, CompletionRequest)
    return await _engine(request).completions.respond(body, request.receive)


async def tokenize_route(request: Request) -> Response:
    engine = _engine(request)
    return JSONResponse(await tokenize(engine.model, engine.served_name, await _parse(request, TokenizeRequest)))


async def detokenize_route(request: Request) -> Response:
    engine = _engine(request)
    return JSONResponse(await detokenize(engine.model, engine.served_name, await _parse(request, DetokenizeRequest)))


async def models(request: Request) -> Response:
    engine = _engine(request)
    card = {
        "id": engine.served_name,
        "object": "model",
        "created": engine.created,
        "owned_by": "rollwire",
        "root": str(engine.model.weights.path),
        "parent": None,
        "max_model_len": engine.model.max_model_len,
        "permission": [],
        "structured_outputs": True,  # JSON schema and JSON object outputs, enforced token by token (``grammar``)
    }
    return JSONResponse({"object": "list", "data": [card]})


async def health(request: Request) -> Response:
    return Response(status_code=200)


OPENAPI = {
    "openapi": "3.1.0",
    "info": {"title": "rollwire engine", "version": "1"},
    "components": {"schemas": {"CompletionRequest": CompletionRequest.model_json_schema()}},
}
"""The completion request's fields where vLLM's OpenAPI schema has them: a client learns from it which optional
fields this engine takes (the proxy asks whether ``stream_interval`` is one)."""


async def openapi(request: Request) -> Response:
    return JSONResponse(OPENAPI)


async def metrics(request: Request) -> Response:
    """vLLM's scheduler gauges (sequences, not requests) and prefix-cache counters (tokens, under vLLM's names),
    plus what the prefix cache holds."""
    engine = _engine(request)
    label = f'{{model_name="{engine.served_name}"}}'
    cache = engine.batcher.prefix_cache.stats
    series = [
        ("vllm:num_requests_running", "gauge", engine.batcher.num_running),
        ("vllm:num_requests_waiting", "gauge", engine.batcher.num_waiting),
        ("vllm:prefix_cache_queries_total", "counter", cache.queried_tokens),
        ("vllm:prefix_cache_hits_total", "counter", cache.hit_tokens),
        ("rollwire_engine_prefix_cache_requests_total", "counter", cache.queries),
        ("rollwire_engine_prefix_cache_request_hits_total", "counter", cache.hits),
        ("rollwire_engine_prefix_cache_evicted_blocks_total", "counter", cache.evicted_blocks),
        ("rollwire_engine_prefix_cache_clears_total", "counter", cache.cleared),
        ("rollwire_engine_prefix_cache_blocks", "gauge", cache.blocks),
        ("rollwire_engine_prefix_cache_bytes", "gauge", cache.bytes),
    ]
    lines = [line for name, kind, value in series for line in (f"# TYPE {name} {kind}", f"{name}{label} {value}")]
    return PlainTextResponse("\n".join(lines) + "\n")


async def weight_version(request: Request) -> Response:
    weights = _engine(request).weights
    return JSONResponse({"weight_version": weights.version, "model_path": str(weights.path)})


async def reload_weights(request: Request) -> Response:
    body = await _parse(request, ReloadRequest)
    version, path = await _engine(request).weights.reload(body.model_path, body.weight_version)
    return JSONResponse({"weight_version": version, "model_path": str(path)})


async def _rollwire_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RollwireError)
    if exc.status_code >= 500:
        logger.error("engine error: %s", exc.message)
    body = openai_error_body(exc.message, exc.code, param=exc.param, code=exc.status_code)
    return JSONResponse(body, status_code=exc.status_code)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return JSONResponse(openai_error_body(str(exc.detail), kind, code=exc.status_code), status_code=exc.status_code)


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled engine error")
    message = f"internal error: {exc}".splitlines()[0]
    return JSONResponse(openai_error_body(message, "internal_error", code=500), status_code=500)


def resolve_model_path(settings: EngineSettings, home: Path) -> Path:
    """The checkpoint to serve: ``settings.model`` (a model name or a folder), or the tiny default model."""
    from rollwire.model_names import resolve_model

    return resolve_model(settings.model, home)


def create_app(settings: EngineSettings, home: Path) -> Starlette:
    """The engine app; the model loads in lifespan (off the event loop) and the batcher thread runs with it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        path = await anyio.to_thread.run_sync(resolve_model_path, settings, home)
        engine = await anyio.to_thread.run_sync(_Engine, settings, path)
        engine.batcher.start()
        app.state.engine = engine
        logger.info("engine serving %s (max_model_len %d)", engine.served_name, engine.model.max_model_len)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(engine.batcher.stop)

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/tokenize", tokenize_route, methods=["POST"]),
        Route("/detokenize", detokenize_route, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/weight_version", weight_version, methods=["GET"]),
        Route("/reload_weights", reload_weights, methods=["POST"]),
    ]
    handlers = {RollwireError: _rollwire_error, HTTPException: _http_error, Exception: _internal_error}
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)


__all__ = ["create_app", "resolve_model_path"]
