"""The gateway app: MCP streamable HTTP at ``/r/{token}/mcp``; each request is authenticated by its rollout token,
sees the tools of its task's servers (namespaced on clashes), is limited, and has every call recorded."""

from __future__ import annotations

import hashlib
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
from rollwire.mcp_servers.gateway.limits import LimitExceeded, RolloutLimits
from rollwire.mcp_servers.gateway.recorder import ToolCallRecord, ToolRecorder
from rollwire.mcp_servers.gateway.upstreams import UpstreamPool, UpstreamSpec
from rollwire.mcp_servers.tasks.loader import resolve_task
from sqlalchemy.engine import Engine
from sqlmodel import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from rollwire.errors import NotFound, RollwireError, Unauthorized
from rollwire.settings import GatewaySettings
from rollwire.store import Rollout, now_ns, session_scope

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
        self.specs = {n: UpstreamSpec(n, url=f"{env_url}/{n}/mcp", forward_identity=True) for n in SERVERS}
        self.specs.update(extra)
        self.limits = RolloutLimits(settings)
        self.recorder = ToolRecorder(engine)
        self.pool: UpstreamPool | None = None
        self._infos: dict[str, RolloutInfo] = {}

    def _lookup(self, digest: str) -> RolloutInfo | None:
        with session_scope(self._engine) as session:
            row = session.exec(select(Rollout).where(Rollout.token_hash == digest)).first()
            if row is None:
                return None
            suite = (row.meta or {}).get("suite")
            ref = f"{suite}:{row.task_id}" if suite and row.task_id else None
            servers: list[str] = []
            tools: frozenset[str] | None = None
            if ref:
                try:
                    task = resolve_task(ref)
                    servers, tools = list(task.servers), frozenset(task.tools) if task.tools is not None else None
                except NotFound:
                    log.warning("rollout %s names an unknown task", row.id)
            servers += [s for s in (row.meta or {}).get("mcp_servers", []) if s not in servers]
            return RolloutInfo(row.id, ref, tuple(servers), tools)

    async def rollout_for(self, token: str) -> RolloutInfo:
        digest = hashlib.sha256(token.encode()).hexdigest()
        info = self._infos.get(digest)
        if info is None:
            info = await anyio.to_thread.run_sync(self._lookup, digest)
            if info is None:
                raise Unauthorized("unknown rollout token")
            self._infos[digest] = info
        return info

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
        """One limited, recorded call; every failure is a tool error the model can read."""
        started = now_ns()
        server, tool = "", name
        try:
            self.limits.admit(info.rollout_id, name)
            target = (await self.tool_map(info)).targets.get(name)
            if target is None:
                raise LimitExceeded(f"unknown tool {name!r}")
            server, tool = target
            result = await self._forward(info, server, tool, arguments)
        except LimitExceeded as exc:
            result = _error(str(exc))
        error = "".join(getattr(b, "text", "") for b in result.content) if result.is_error else None
        await self.recorder.record(
            ToolCallRecord(
                info.rollout_id,
                server,
                tool,
                arguments,
                result.model_dump(mode="json", by_alias=True, exclude_none=True),
                bool(result.is_error),
                error,
                started,
                now_ns(),
            )
        )
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
    manager = StreamableHTTPSessionManager(app=build_mcp(gateway), security_settings=security(settings.allowed_hosts))

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "servers": sorted(gateway.specs)})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg, manager.run():
            gateway.pool = UpstreamPool(tg, settings.call_timeout_s, settings.idle_close_s)
            app.state.gateway = gateway
            try:
                yield
            finally:
                gateway.pool.close_all()

    return Starlette(
        routes=[Route("/health", health), Route("/r/{token}/mcp", _Endpoint(gateway, manager))], lifespan=lifespan
    )


__all__ = ["Gateway", "RolloutInfo", "build_gateway_app"]
