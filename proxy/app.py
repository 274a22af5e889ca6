"""The proxy's apps: rollout routes (``/r/{token}/v1/...`` or a Bearer token on ``/v1/...``) on its main
listener, the operator API (``/admin/v1``), the trace viewer (``/ui``) and ``/metrics`` on its admin listener
(``ProxyApp``); body limits and errors in each dialect's shape (``edge``); one lifespan owns the upstream pool,
store and tokenizer for both."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from rollwire.errors import InvalidRequest, NotFound, RollwireError
from rollwire.listeners import Listeners
from rollwire.metrics import HttpMetricsMiddleware, metrics_endpoint
from rollwire.proxy import admin
from rollwire.proxy.auth import TokenAuth
from rollwire.proxy.dialects.chat import ChatDialect
from rollwire.proxy.dialects.routes import DIALECTS as FRONT_DIALECTS
from rollwire.proxy.dialects.routes import answer_response, dialect_routes
from rollwire.proxy.edge import ErrorEdge, http_error, rollwire_error
from rollwire.proxy.generate import Generator
from rollwire.proxy.metrics import ProxyMetrics, classify
from rollwire.proxy.parsers import reasoning_parser, tool_parser
from rollwire.proxy.recorder import Recorder
from rollwire.proxy.render import Renderer
from rollwire.proxy.session import POLICIES
from rollwire.proxy.stream import stream_route
from rollwire.proxy.ui.data import ViewerState
from rollwire.proxy.ui.routes import ui_routes
from rollwire.proxy.upstream import make_client
from rollwire.request_body import read_json_body, read_json_text
from rollwire.rollouts.budgets import Budgets
from rollwire.settings import ProxySettings
from rollwire.store import open_engine

CHAT = ChatDialect()
DIALECTS = {CHAT.name: (CHAT.parse_request, CHAT.answer_message), **FRONT_DIALECTS}


class ProxyState:
    """What the routes share; built in lifespan."""

    def __init__(
        self, settings: ProxySettings, engine: Any, generator: Generator, auth: TokenAuth,
        ports: Mapping[str, int] | None = None,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.ports = ports if ports is not None else {}
        """The port each listener serves on (``Listeners.ports``): rollouts' links name the main one."""
        self.engine = engine
        self.generator = generator
        self.auth = auth
        self.budgets = Budgets(engine, "proxy", read_inline=generator.recorder.writer.read_inline)
        generator.recorder.listeners.append(self.budgets.recorded)
        self.after_answer = BackgroundTask(generator.recorder.after_answer)
        """Every generation route's background task: settles the call once its answer has left (one for all)."""
        self._finished = anyio.Event()

    async def read_json(self, request: Request) -> Any:
        return await read_json_body(request, self.settings.max_body_bytes)

    async def read_json_text(self, request: Request) -> tuple[Any, str | None]:
        """The body and its text as sent (stored as the call's request without serializing it again)."""
        return await read_json_text(request, self.settings.max_body_bytes)

    def rollout_base(self, request: Request) -> str:
        """The base URL of the rollouts an admin request creates: the host it was sent to, on the main listener's
        port (an admin request arrives on the admin port, which no rollout can reach)."""
        url = request.base_url
        main = self.ports.get(Listeners.MAIN)
        if main is not None and url.port != main:
            url = url.replace(port=main)
        return str(url)

    def notify_finished(self) -> None:
        self._finished.set()
        self._finished = anyio.Event()

    def finished_event(self) -> anyio.Event:
        return self._finished


def _state(request: Request) -> ProxyState:
    state: ProxyState = request.app.state.proxy
    return state


async def chat_completions(request: Request) -> Response:
    state = _state(request)
    caller = await state.auth.caller(request)
    raw, text = await state.read_json_text(request)
    return await answer_response(state, caller, CHAT.parse_request(raw), CHAT, raw, text, request)


async def models(request: Request) -> Response:
    state = _state(request)
    await state.auth.caller(request)
    served = await state.generator.served_name()
    names = [served] + [a for a in state.settings.model_aliases if a not in ("*", served)]
    card = {"object": "model", "created": 0, "owned_by": "rollwire"}
    if state.generator.served.max_model_len:  # as vLLM reports it: clients size their prompts by it
        card["max_model_len"] = state.generator.served.max_model_len
    cards = [{"id": n, **card} for n in names]
    return JSONResponse({"object": "list", "data": cards})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def root(request: Request) -> Response:
    """Claude Code probes ``HEAD /`` before its first call (a 404 there reads as an unreachable API)."""
    return JSONResponse({"status": "ok", "service": "rollwire proxy"})


def _settled(scrape: Any) -> Any:
    """The metrics endpoint, counting the calls whose answers have just left too (``Recorder.settle``)."""

    async def metrics(request: Request) -> Response:
        proxy: ProxyState | None = getattr(request.app.state, "proxy", None)
        if proxy is not None:
            proxy.generator.recorder.settle()
        response: Response = await scrape(request)
        return response

    return metrics


def _admin(handler: Any) -> Any:
    async def guarded(request: Request) -> Response:
        _state(request).auth.check_operator(request)
        response: Response = await handler(request)
        return response

    return guarded


async def elsewhere(request: Request) -> Response:
    """What the main listener answers for the admin listener's paths, with or without the operator key: they do
    not exist here (404, never 401, so this port is no oracle for the key)."""
    raise NotFound("the operator API, the trace viewer and /metrics are served on the proxy's admin listener")


ADMIN_PATHS = ("/admin", "/ui", "/metrics")
"""Path prefixes served on the admin listener only."""
ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
"""What the refusal answers 404 to (a method it left out would get 405 instead)."""


def _rollout_routes() -> list[BaseRoute]:
    """The main listener's routes: all a rollout may call."""
    rollout = [
        Route("/r/{token}/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/r/{token}/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/r/{token}", root, methods=["GET", "HEAD"]),  # a rollout's Anthropic base URL, probed the same way
        Route("/r/{token}/", root, methods=["GET", "HEAD"]),
    ]
    refused = [Route(path, elsewhere, methods=ANY_METHOD) for p in ADMIN_PATHS for path in (p, p + "/{rest:path}")]
    return rollout + dialect_routes() + refused


def _admin_routes(metrics: ProxyMetrics) -> list[BaseRoute]:
    """The admin listener's routes: the operator API, the viewer, the Prometheus scrape and a health probe."""
    a = "/admin/v1"
    operator = [
        Route(f"{a}/runs", _admin(admin.runs_route), methods=["POST"]),
        Route(f"{a}/runs/{{run}}/rollouts", _admin(admin.rollouts_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}/finish", _admin(admin.finish_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}/status", _admin(admin.status_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}/revoke", _admin(admin.revoke_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}", _admin(admin.rollout_route), methods=["GET"]),
        Route(f"{a}/rollouts/{{id}}/trajectory", _admin(admin.trajectory_route), methods=["GET"]),
        Route(f"{a}/policy_version", _admin(admin.policy_version_route), methods=["POST"]),
        Route(f"{a}/trajectories/stream", _admin(stream_route), methods=["GET"]),
    ]
    # /metrics counts every rollout's calls, tokens and budget refusals: nothing a rollout needs, and a view of
    # the other rollouts it should not have
    scrape = Route("/metrics", _settled(metrics_endpoint(metrics.registry)), methods=["GET"])
    return [Route("/health", health, methods=["GET"]), scrape, *operator, Mount("/ui", routes=ui_routes())]


class ProxyApp(Listeners):
    """The proxy's two listeners over one lifespan and one state: ``main`` for rollouts, ``admin`` for the
    trainer, operators and the viewer (see ``Listeners`` for why one server serves both). ``state`` is shared."""

    ADMIN = "admin"

    def __init__(self, main: Starlette, admin: Starlette) -> None:
        super().__init__(main, **{self.ADMIN: admin})
        admin.state = main.state
        self.state = main.state


def model_folder(settings: ProxySettings, home: Path) -> Path:
    """The tokenizer + template folder: ``settings.model`` or the tiny default model (what the engine serves)."""
    if settings.model:
        return Path(settings.model).expanduser()
    from rollwire.tiny_model import ensure_tiny_model

    return ensure_tiny_model(home)


def create_app(settings: ProxySettings, store_url: str, home: Path, operator_key: str | None = None) -> ProxyApp:
    """The proxy app (serve it with ``rollwire.app.serving``: a socket per listener). Parsers and the splice policy are
    checked here, so a bad name fails at start-up."""
    if settings.splice_policy not in POLICIES:
        raise InvalidRequest(f"unknown splice policy {settings.splice_policy!r}; known: {', '.join(POLICIES)}")
    tools, reasoning = tool_parser(settings.tool_parser), reasoning_parser(settings.reasoning_parser)
    client = make_client(settings.upstream, settings.upstream_timeout_s)
    key = operator_key or settings.operator_key or secrets.token_urlsafe(24)
    metrics = ProxyMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine = await anyio.to_thread.run_sync(open_engine, store_url)
        folder = await anyio.to_thread.run_sync(model_folder, settings, home)
        renderer = await anyio.to_thread.run_sync(Renderer.from_folder, folder)
        recorder = Recorder(
            engine,
            DIALECTS,
            shared=settings.shared_store,
            rollouts=settings.cache_rollouts,
            tokens=settings.cache_tokens,
        )
        generator = Generator(settings, client, renderer, recorder, tools, reasoning)
        auth = TokenAuth(engine, key, read_inline=recorder.writer.read_inline)
        app.state.proxy = ProxyState(settings, engine, generator, auth, proxy.ports)
        app.state.viewer = ViewerState(key, engine, renderer)
        recorder.late_listeners.append(metrics.recorded)
        app.state.proxy.budgets.refused.append(metrics.refused)
        try:
            yield
        finally:
            await client.close()
            await anyio.to_thread.run_sync(recorder.close)
            engine.dispose()

    handlers = {RollwireError: rollwire_error, HTTPException: http_error}
    middleware = [Middleware(HttpMetricsMiddleware, metrics=metrics.http, classify=classify), Middleware(ErrorEdge)]
    main = Starlette(routes=_rollout_routes(), lifespan=lifespan, exception_handlers=handlers, middleware=middleware)
    admin = Starlette(routes=_admin_routes(metrics), exception_handlers=handlers, middleware=middleware)
    proxy = ProxyApp(main, admin)
    proxy.state.operator_key = key
    proxy.state.metrics = metrics
    return proxy


__all__ = ["ADMIN_PATHS", "DIALECTS", "ProxyApp", "ProxyState", "create_app", "model_folder"]
