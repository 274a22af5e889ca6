"""The proxy's route table. The main listener answers rollouts: each dialect of the registry at its paths (under
``/v1`` with a Bearer token, and under a rollout's ``/r/{token}/v1``), the model list, health. The admin listener
answers the trainer and operators: the operator API, the trajectory stream, the viewer and ``/metrics``.

A dialect's routes render their errors in that dialect's shape; the route is the same for every dialect: auth,
read the body, the dialect's reading of it (``Dialect.accept``), and the call path's answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from rollwire.errors import NotFound, RollwireError
from rollwire.metrics import metrics_endpoint
from rollwire.proxy import admin
from rollwire.proxy.dialects.base import Dialect, History
from rollwire.proxy.dialects.messages import parse_messages
from rollwire.proxy.dialects.registry import DIALECTS
from rollwire.proxy.edge import error_response
from rollwire.proxy.metrics import ProxyMetrics
from rollwire.proxy.render import Renderer
from rollwire.proxy.trajectory_stream import stream_route
from rollwire.proxy.ui.routes import ui_routes

if TYPE_CHECKING:
    from rollwire.proxy.app import ProxyState

Handler = Callable[[Request], Awaitable[Response]]
PREFIXES = ("/r/{token}/v1", "/v1")
"""Where a rollout calls: its own base URL (the token in the path), or ``/v1`` with the token as Bearer key."""
ADMIN_PATHS = ("/admin", "/ui", "/metrics")
"""Path prefixes served on the admin listener only."""
ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
"""What the main listener's refusal of the admin paths answers 404 to (a method left out would get 405)."""


def _state(request: Request) -> ProxyState:
    state: ProxyState = request.app.state.proxy
    return state


def _in_shape(dialect: Dialect, handler: Handler) -> Handler:
    """``handler`` with its errors in ``dialect``'s shape."""

    async def rendered(request: Request) -> Response:
        try:
            return await handler(request)
        except RollwireError as exc:
            return error_response(dialect, exc, request.url.path)

    return rendered


def generate(dialect: Dialect) -> Handler:
    """A dialect's generation route."""

    async def route(request: Request) -> Response:
        state = _state(request)
        caller = await state.auth.caller(request)
        raw, sent = await state.read_json_sent(request, caller.rollout_id, dialect.entries_key)
        accepted = await dialect.accept(raw, sent, History(state.engine, caller.rollout_id, state.parsed))
        return await state.calls.answer(caller, accepted, request)

    return _in_shape(dialect, route)


def _count(renderer: Renderer, raw: Any) -> int:
    conv = parse_messages(raw, need_max_tokens=False)
    text = renderer.render([m.to_template() for m in conv.messages], list(conv.tools), True, **conv.template_kwargs())
    return len(renderer.encode(text))


def count_tokens(dialect: Dialect) -> Handler:
    """The prompt's length in the served model's tokens, exactly as the template renders it (Messages'
    ``count_tokens``)."""

    async def route(request: Request) -> Response:
        state = _state(request)
        await state.auth.caller(request)
        raw = await state.read_json(request)
        if isinstance(raw, dict) and isinstance(raw.get("model"), str):
            await state.calls.served.resolve(raw["model"])
        count = await anyio.to_thread.run_sync(_count, state.calls.renderer, raw)
        return JSONResponse({"input_tokens": count})

    return _in_shape(dialect, route)


async def models(request: Request) -> Response:
    state = _state(request)
    await state.auth.caller(request)
    served = state.calls.served
    name = await served.served_name()
    names = [name] + [a for a in state.settings.model_aliases if a not in ("*", name)]
    card: dict[str, Any] = {"object": "model", "created": 0, "owned_by": "rollwire"}
    if served.max_model_len:  # as vLLM reports it: clients size their prompts by it
        card["max_model_len"] = served.max_model_len
    return JSONResponse({"object": "list", "data": [{"id": n, **card} for n in names]})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def root(request: Request) -> Response:
    """Claude Code probes ``HEAD /`` before its first call (a 404 there reads as an unreachable API)."""
    return JSONResponse({"status": "ok", "service": "rollwire proxy"})


async def elsewhere(request: Request) -> Response:
    """What the main listener answers for the admin listener's paths, with or without the operator key: they do
    not exist here (404, never 401, so this port is no oracle for the key)."""
    raise NotFound("the operator API, the trace viewer and /metrics are served on the proxy's admin listener")


def rollout_routes() -> list[BaseRoute]:
    """The main listener's routes: all a rollout may call."""
    routes: list[BaseRoute] = []
    for prefix in PREFIXES:
        for dialect in DIALECTS:
            routes.append(Route(f"{prefix}{dialect.path}", generate(dialect), methods=["POST"]))
            if dialect.count_tokens_path is not None:
                routes.append(Route(f"{prefix}{dialect.count_tokens_path}", count_tokens(dialect), methods=["POST"]))
        routes.append(Route(f"{prefix}/models", models, methods=["GET"]))
    routes += [
        Route("/health", health, methods=["GET"]),
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/r/{token}", root, methods=["GET", "HEAD"]),  # a rollout's Anthropic base URL, probed the same way
        Route("/r/{token}/", root, methods=["GET", "HEAD"]),
    ]
    return routes + [Route(path, elsewhere, methods=ANY_METHOD) for p in ADMIN_PATHS for path in (p, p + "/{rest:path}")]


def _settled(scrape: Handler) -> Handler:
    """The metrics endpoint, counting the calls whose answers have just left too (``Settling``)."""

    async def metrics(request: Request) -> Response:
        proxy: ProxyState | None = getattr(request.app.state, "proxy", None)
        if proxy is not None:
            proxy.calls.settling.settle()
        return await scrape(request)

    return metrics


def _operator(handler: Handler) -> Handler:
    async def guarded(request: Request) -> Response:
        _state(request).auth.check_operator(request)
        return await handler(request)

    return guarded


def admin_routes(metrics: ProxyMetrics) -> list[BaseRoute]:
    """The admin listener's routes: the operator API, the viewer, the Prometheus scrape and a health probe."""
    a = "/admin/v1"
    operator = [
        Route(f"{a}/runs", _operator(admin.runs_route), methods=["POST"]),
        Route(f"{a}/runs/{{run}}/rollouts", _operator(admin.rollouts_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}/finish", _operator(admin.finish_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}/status", _operator(admin.status_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}/revoke", _operator(admin.revoke_route), methods=["POST"]),
        Route(f"{a}/rollouts/{{id}}", _operator(admin.rollout_route), methods=["GET"]),
        Route(f"{a}/rollouts/{{id}}/trajectory", _operator(admin.trajectory_route), methods=["GET"]),
        Route(f"{a}/policy_version", _operator(admin.policy_version_route), methods=["GET", "POST"]),
        Route(f"{a}/trajectories/stream", _operator(stream_route), methods=["GET"]),
    ]
    # /metrics counts every rollout's calls, tokens and budget refusals: nothing a rollout needs, and a view of
    # the other rollouts it should not have
    scrape = Route("/metrics", _settled(metrics_endpoint(metrics.registry)), methods=["GET"])
    return [Route("/health", health, methods=["GET"]), scrape, *operator, Mount("/ui", routes=ui_routes())]


__all__ = ["ADMIN_PATHS", "admin_routes", "rollout_routes"]
