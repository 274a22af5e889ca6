"""The proxy's apps: rollout routes on its main listener, the operator API, trajectory stream, trace viewer and
``/metrics`` on its admin listener (``ProxyApp``; the route table is ``routes``); errors in each dialect's shape
(``edge``); one lifespan builds what both share: the store, the template, the call path."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request

from rollwire.errors import InvalidRequest, RollwireError
from rollwire.listeners import Listeners
from rollwire.metrics import HttpMetricsMiddleware
from rollwire.proxy.auth import TokenAuth
from rollwire.proxy.cache_salt import CacheSalts
from rollwire.proxy.call import CallPath
from rollwire.proxy.dialects.parsed import ParsedMessages
from rollwire.proxy.dialects.registry import READERS
from rollwire.proxy.edge import ErrorEdge, http_error, rollwire_error
from rollwire.proxy.metrics import ProxyMetrics, classify
from rollwire.proxy.parsers import reasoning_parser, tool_parser
from rollwire.proxy.recorder import Recorder
from rollwire.proxy.render import Renderer
from rollwire.proxy.resent_body import ResentBodies
from rollwire.proxy.routes import ADMIN_PATHS, admin_routes, rollout_routes
from rollwire.proxy.splice.plan import POLICIES
from rollwire.proxy.splice.priors import PriorCache
from rollwire.proxy.ui.data import ViewerState
from rollwire.proxy.upstream import make_client
from rollwire.request_body import read_json_body, read_json_sent
from rollwire.rollouts.budgets import Budgets
from rollwire.settings import ProxySettings
from rollwire.store import open_engine


class ProxyState:
    """What the routes share; built in lifespan."""

    def __init__(
        self, settings: ProxySettings, engine: Any, calls: CallPath, auth: TokenAuth,
        ports: Mapping[str, int] | None = None,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.ports = ports if ports is not None else {}
        """The port each listener serves on (``Listeners.ports``): rollouts' links name the main one."""
        self.engine = engine
        self.calls = calls
        self.auth = auth
        self.parsed = ParsedMessages(settings.cache_message_bytes)
        """Each rollout's latest messages, parsed (``dialects.parsed``)."""
        self.bodies = ResentBodies(settings.cache_message_bytes)
        """Each rollout's latest body, and where its conversation lies in it (``resent_body``)."""
        self._finished = anyio.Event()

    async def read_json(self, request: Request) -> Any:
        return await read_json_body(request, self.settings.max_body_bytes)

    async def read_json_sent(self, request: Request, rollout_id: str, entries_key: str) -> tuple[Any, bytes | None]:
        """The body and its bytes as sent (stored as the call's request without serializing it again), the
        conversation's entries the rollout sent last time taken as parsed then (``resent_body``)."""
        return await read_json_sent(
            request, self.settings.max_body_bytes, partial(self.bodies.parse, rollout_id, entries_key)
        )

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


class ProxyApp(Listeners):
    """The proxy's two listeners over one lifespan and one state: ``main`` for rollouts, ``admin`` for the
    trainer, operators and the viewer (see ``Listeners`` for why one server serves both). ``state`` is shared."""

    ADMIN = "admin"

    def __init__(self, main: Starlette, admin: Starlette) -> None:
        super().__init__(main, **{self.ADMIN: admin})
        admin.state = main.state
        self.state = main.state


def model_folder(settings: ProxySettings, home: Path) -> Path:
    """The tokenizer + template folder: ``settings.model`` (a model name or a folder) or the tiny default model
    (what the engine serves)."""
    from rollwire.model_names import resolve_model

    return resolve_model(settings.model, home)


def create_app(settings: ProxySettings, store_url: str, home: Path, operator_key: str | None = None) -> ProxyApp:
    """The proxy app (serve it with ``rollwire.app.serving``: a socket per listener). Parsers and the splice policy are
    checked here, so a bad name fails at start-up."""
    if settings.splice_policy not in POLICIES:
        raise InvalidRequest(f"unknown splice policy {settings.splice_policy!r}; known: {', '.join(POLICIES)}")
    tools, reasoning = tool_parser(settings.tool_parser), reasoning_parser(settings.reasoning_parser)
    client = make_client(settings.upstream, settings.upstream_timeout_s)
    key = operator_key or settings.operator_key or secrets.token_urlsafe(24)
    salts = CacheSalts(settings.prefix_cache_scope, key.encode())
    metrics = ProxyMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine = await anyio.to_thread.run_sync(open_engine, store_url)
        folder = await anyio.to_thread.run_sync(model_folder, settings, home)
        renderer = await anyio.to_thread.run_sync(Renderer.from_folder, folder)
        recorder = Recorder(engine)
        read_inline = recorder.writer.read_inline  # point reads on the writer's own connection
        priors = PriorCache(
            engine, READERS, settings.shared_store, settings.cache_rollouts, settings.cache_tokens, read_inline
        )
        budgets = Budgets(engine, "proxy", read_inline=read_inline)
        recorder.listeners.append(budgets.recorded)
        recorder.late_listeners.append(metrics.recorded)
        budgets.refused.append(metrics.refused)
        calls = CallPath(settings, client, renderer, recorder, priors, budgets, tools, reasoning, salts)
        auth = TokenAuth(engine, key, read_inline=read_inline)
        app.state.proxy = ProxyState(settings, engine, calls, auth, proxy.ports)
        app.state.viewer = ViewerState(key, engine, renderer)
        try:
            yield
        finally:
            await calls.close()
            await anyio.to_thread.run_sync(recorder.close)
            engine.dispose()

    handlers = {RollwireError: rollwire_error, HTTPException: http_error}
    middleware = [Middleware(HttpMetricsMiddleware, metrics=metrics.http, classify=classify), Middleware(ErrorEdge)]
    main = Starlette(routes=rollout_routes(), lifespan=lifespan, exception_handlers=handlers, middleware=middleware)
    admin = Starlette(routes=admin_routes(metrics), exception_handlers=handlers, middleware=middleware)
    proxy = ProxyApp(main, admin)
    proxy.state.operator_key = key
    proxy.state.metrics = metrics
    return proxy


__all__ = ["ADMIN_PATHS", "ProxyApp", "ProxyState", "create_app", "model_folder"]
