"""Host the env servers: all of them in one Starlette app under ``/<name>/mcp`` (plus ``/health``), or one over stdio."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from rollwire.errors import InvalidRequest, Unauthorized, openai_error
from rollwire.mcp_servers.envs import calendar, mail, sqldb, workspace
from rollwire.mcp_servers.envs.metrics import EnvMetrics
from rollwire.mcp_servers.envs.rollout import EnvRuntime
from rollwire.mcp_servers.state import SECRET_HEADER, StateStore
from rollwire.metrics import HttpMetricsMiddleware, metrics_endpoint
from rollwire.settings import McpSettings

SERVERS: dict[str, ModuleType] = {m.NAME: m for m in (workspace, sqldb, calendar, mail)}
"""Env server name -> module (with NAME, seed(folder, initial) and build(env))."""


def runtime(settings: McpSettings, home: Path, task_initial: Callable[[str], dict[str, Any]] | None) -> EnvRuntime:
    """The shared runtime (state store, limits) for env servers from settings."""
    root = Path(settings.state_dir) if settings.state_dir else home / "mcp_state"
    store = StateStore(root, ttl_s=settings.state_ttl_s, task_initial=task_initial)
    return EnvRuntime(
        store,
        settings.stdio_rollout,
        settings.stdio_task or None,
        settings.max_payload_bytes,
        settings.workspace_quota_bytes,
        settings.sqldb_max_bytes,
        settings.sqldb_max_result_bytes,
    )


def build_server(name: str, env: EnvRuntime) -> MCPServer:
    """One env server by name."""
    if name not in SERVERS:
        raise InvalidRequest(f"unknown env server {name!r}; known: {', '.join(SERVERS)}", param="name")
    return SERVERS[name].build(env)


def security(allowed_hosts: list[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection for the given Host patterns; '*' turns the check off."""
    if "*" in allowed_hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"http://{h}" for h in allowed_hosts] + [f"https://{h}" for h in allowed_hosts]
    return TransportSecuritySettings(allowed_hosts=list(allowed_hosts), allowed_origins=origins)


class _GatewayOnly:
    """Refuses (401) every request but ``/health`` and ``/metrics`` that does not carry the secret shared with the
    gateway: the rollout and task headers are trusted only from it."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        self.app, self.secret = app, secret.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in ("/health", "/metrics"):
            given = dict(scope.get("headers") or []).get(SECRET_HEADER.encode(), b"")
            if not hmac.compare_digest(given, self.secret):
                refused = Unauthorized("env servers accept calls only from the gateway")
                await JSONResponse(openai_error(refused), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(names: list[str], env: EnvRuntime, allowed_hosts: list[str], max_body: int, *, secret: str) -> Starlette:
    """One app serving each named env server at ``/<name>/mcp``, ``GET /health`` and ``GET /metrics`` (Prometheus);
    calls need ``secret``."""
    if len(secret) < 16:
        raise InvalidRequest("the env servers need a shared secret of at least 16 characters (ROLLWIRE_MCP__ENV_SECRET)")
    servers = {name: build_server(name, env) for name in names}
    metrics = EnvMetrics(servers)
    for name, server in servers.items():
        server.middleware.append(metrics.tool_middleware(name))
    routes: list[Route | Mount] = [Route("/metrics", metrics_endpoint(metrics.registry), methods=["GET"])]
    for name, server in servers.items():
        sub = server.streamable_http_app(
            streamable_http_path="/mcp", transport_security=security(allowed_hosts), max_request_body_size=max_body
        )
        routes.append(Mount(f"/{name}", app=sub))

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "servers": list(servers)})

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for server in servers.values():
                await stack.enter_async_context(server.session_manager.run())
            yield

    app = Starlette(
        routes=[Route("/health", health), *routes],
        lifespan=lifespan,
        middleware=[
            Middleware(HttpMetricsMiddleware, metrics=metrics.http, classify=metrics.classify),
            Middleware(_GatewayOnly, secret=secret),
        ],
    )
    app.state.metrics = metrics
    return app


__all__ = ["SERVERS", "build_app", "build_server", "runtime", "security"]
