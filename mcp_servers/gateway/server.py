"""The gateway app: MCP streamable HTTP at ``/r/{token}/mcp``; each request is authenticated by its rollout token
(``rollwire.rollouts``: 401 unknown, 403 once the rollout ended), sees the tools of its task's servers
(namespaced on clashes), is held to the rollout's budgets, and has every call recorded (a refused one as a
``Refusal``, a result over the cap cut and marked truncated)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rollwire.mcp_servers.envs.app import SERVERS, security
from rollwire.mcp_servers.gateway.limits import RolloutLimits, cap_result
from rollwire.mcp_servers.gateway.metrics import GatewayMetrics, classify
from rollwire.mcp_servers.gateway.recorder import ToolCallRecord, ToolRecorder
from rollwire.mcp_servers.gateway.upstreams import UpstreamPool, UpstreamSpec
from rollwire.mcp_servers.tasks.loader import resolve_task
from sqlalchemy.engine import Engine
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from rollwire.errors import RollwireError, Unauthorized
from rollwire.metrics import HttpMetricsMiddleware, metrics_endpoint
from rollwire.rollouts import Identity, TokenIndex
from rollwire.rollouts.budgets import Budgets
from rollwire.settings import GatewaySettings
from rollwire.store import RolloutStatus, now_ns

log = logging.getLogger(__name__)
SCOPE_KEY = "rollwire.rollout"
SEP = "__"


@dataclass(frozen=True)
class RolloutInfo:
    rollout_id: str
    task_ref: str | None
    servers: tuple[str, ...]
    tools: frozenset[str] | None = None
    """The task's own tool allow-list (exposed names); None shows every tool of its servers."""
    identity: Identity | None = None


@dataclass
class ToolMap:
    tools: list[types.Tool] = field(default_factory=list)
    targets: dict[str, tuple[str, str]] = field(default_factory=dict)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class Gateway:
    """Rollout lookup, tool aggregation and recorded, limited tool calls."""

    def __init__(self, settings: GatewaySettings, engine: Engine, extra: dict[str, UpstreamSpec]) -> None:
        self.settings = settings
        self._engine = engine
        env_url = settings.env_url.rstrip("/")
        self.specs = {
            n: UpstreamSpec(n, url=f"{env_url}/{n}/mcp", forward_identity=True, secret=settings.env_secret)
            for n in SERVERS
        }
        self.specs.update(extra)
        self.limits = RolloutLimits(settings)
        self.recorder = ToolRecorder(engine)
        self.tokens = TokenIndex(engine)
        self.budgets = Budgets(engine, "gateway")
        self.pool: UpstreamPool | None = None
        self._infos: dict[str, RolloutInfo] = {}

    def _info(self, identity: Identity) -> RolloutInfo:
        """The task's servers and tools (read once per rollout: a task does not change)."""
        suite = identity.meta.get("suite")
        ref = f"{suite}:{identity.task_id}" if suite and identity.task_id else None
        servers: list[str] = []
        tools: frozenset[str] | None = None
        if ref:
            try:
                task = resolve_task(ref)
                servers, tools = list(task.servers), frozenset(task.tools) if task.tools is not None else None
            except RollwireError:
                log.warning("rollout %s names an unknown task", identity.rollout_id)
                ref = None
        servers += [s for s in identity.meta.get("mcp_servers", []) if s not in servers]
        return RolloutInfo(identity.rollout_id, ref, tuple(servers), tools)

    async def rollout_for(self, token: str) -> RolloutInfo:
        """The token's rollout: 401 unknown, 403 once it ended (``rollwire.rollouts``)."""
        identity = await self.tokens.resolve(token)
        info = self._infos.get(identity.rollout_id)
        if info is None:
            info = await anyio.to_thread.run_sync(self._info, identity)
            self._infos[identity.rollout_id] = info
        return RolloutInfo(info.rollout_id, info.task_ref, info.servers, info.tools, identity)

    def _pool(self) -> UpstreamPool:
        if self.pool is None:
            raise RollwireError("the gateway is not running (no lifespan)")
        return self.pool

    async def tool_map(self, info: RolloutInfo) -> ToolMap:
        """The rollout's tools; a name served by two servers becomes ``server__tool`` for both."""
        per_server: dict[str, list[types.Tool]] = {}
        for name in info.servers:
            spec = self.specs.get(name)
            if spec is None:
                log.warning("rollout %s needs unknown MCP server %r", info.rollout_id, name)
                continue
            try:
                per_server[name] = (await self._pool().get(info.rollout_id, info.task_ref, spec)).tools
            except RollwireError as exc:
                log.warning("rollout %s: %s", info.rollout_id, exc.message)
        counts: dict[str, int] = {}
        for tools in per_server.values():
            for tool in tools:
                counts[tool.name] = counts.get(tool.name, 0) + 1
        result = ToolMap()
        for server, tools in per_server.items():
            for tool in tools:
                exposed = f"{server}{SEP}{tool.name}" if counts[tool.name] > 1 else tool.name
                if self.limits.allows_tool(exposed) and (info.tools is None or exposed in info.tools):
                    result.tools.append(tool.model_copy(update={"name": exposed}))
                    result.targets[exposed] = (server, tool.name)
        return result

    async def call(self, info: RolloutInfo, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One budgeted, recorded call; every failure is a tool error the model can read. A refused call is
        recorded as a Refusal (why), not as a ToolEvent."""
        started = now_ns()
        who = info.identity or Identity(info.rollout_id, "", RolloutStatus.RUNNING)
        target = (await self.tool_map(info)).targets.get(name)
        if not self.limits.allows_tool(name):
            return _error(await self.budgets.refuse_tool(who, "tool_not_allowed", name, f"tool {name!r} is not allowed for this rollout"))
        if target is None:
            return _error(await self.budgets.refuse_tool(who, "unknown_tool", name, f"unknown tool {name!r}"))
        refused = await self.budgets.tool_call(who, name, self.settings.max_tool_calls)
        if refused is not None:
            return _error(refused)
        server, tool = target
        result = await self._forward(info, server, tool, arguments)
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        capped = cap_result(dumped, self.settings.max_result_bytes)
        if capped.truncated:
            result = types.CallToolResult.model_validate(capped.result)
        error = "".join(getattr(b, "text", "") for b in result.content) if result.is_error else None
        recorded = await self.recorder.record(
            ToolCallRecord(
                info.rollout_id, server, tool, arguments, capped.result, bool(result.is_error), error, started, now_ns(),
                capped.size, capped.truncated,
            )
        )  # fmt: skip
        if recorded is not None:  # the rollout ended during the call: nothing was recorded
            return _error(recorded)
        return result

    async def _forward(
        self, info: RolloutInfo, server: str, tool: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        pool = self._pool()
        try:
            conn = await pool.get(info.rollout_id, info.task_ref, self.specs[server])
        except RollwireError as exc:
            return _error(exc.message)
        assert conn.client is not None
        try:
            with anyio.fail_after(self.settings.call_timeout_s):
                return await conn.client.call_tool(tool, arguments)
        except TimeoutError:
            pool.drop(info.rollout_id, server)
            return _error(f"tool {tool!r} on {server!r} timed out after {self.settings.call_timeout_s:g}s")
        except Exception as exc:  # noqa: BLE001 - an upstream crash or protocol break: report it, reconnect next time
            pool.drop(info.rollout_id, server)
            log.info("upstream %s failed mid-call: %s", server, exc.__class__.__name__)
            return _error(f"MCP server {server!r} failed during {tool!r}: {exc.__class__.__name__}: {exc}")


def _info(ctx: ServerRequestContext[Any, Any]) -> RolloutInfo:
    request = ctx.request
    info = getattr(request, "scope", {}).get(SCOPE_KEY)
    if not isinstance(info, RolloutInfo):
        raise Unauthorized("no rollout on this request")
    return info


def build_mcp(gateway: Gateway) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any], _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=(await gateway.tool_map(_info(ctx))).tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await gateway.call(_info(ctx), params.name, dict(params.arguments or {}))

    return Server("rollwire-gateway", on_list_tools=list_tools, on_call_tool=call_tool)


class _Endpoint:
    """``/r/{token}/mcp``: 401 for an unknown token, else the MCP transport with the rollout in the scope."""

    def __init__(self, gateway: Gateway, manager: StreamableHTTPSessionManager) -> None:
        self.gateway, self.manager = gateway, manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            info = await self.gateway.rollout_for(str(scope.get("path_params", {}).get("token", "")))
        except RollwireError as exc:
            body = {"error": {"type": exc.code, "message": exc.message}}
            await JSONResponse(body, status_code=exc.status_code)(scope, receive, send)
            return
        scope[SCOPE_KEY] = info
        await self.manager.handle_request(scope, receive, send)


def build_gateway_app(
    settings: GatewaySettings, engine: Engine, extra: dict[str, UpstreamSpec] | None = None
) -> Starlette:
    """The gateway as a Starlette app (its own process, or mounted into the proxy)."""
    gateway = Gateway(settings, engine, extra or {})
    metrics = GatewayMetrics()
    gateway.recorder.listeners.append(metrics.recorded)
    gateway.budgets.refused.append(metrics.refused)
    manager = StreamableHTTPSessionManager(app=build_mcp(gateway), security_settings=security(settings.allowed_hosts))

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "servers": sorted(gateway.specs)})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg, manager.run():
            gateway.pool = UpstreamPool(tg, settings.connect_timeout_s, settings.idle_close_s)
            app.state.gateway = gateway
            try:
                yield
            finally:
                gateway.pool.close_all()

    routes = [
        Route("/health", health),
        Route("/metrics", metrics_endpoint(metrics.registry), methods=["GET"]),
        Route("/r/{token}/mcp", _Endpoint(gateway, manager)),
    ]
    middleware = [Middleware(HttpMetricsMiddleware, metrics=metrics.http, classify=classify)]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.metrics = metrics
    return app


__all__ = ["Gateway", "RolloutInfo", "build_gateway_app"]
