"""The gateway app: MCP streamable HTTP at ``/r/{token}/mcp``, a complete MCP proxy over a rollout's servers.
Each request is authenticated by its rollout token (``rollwire.rollouts``: 401 unknown, 403 once the rollout
ended; 400 when the rollout names an MCP server nobody declared), sees the tools, resources and prompts of its
task's servers (namespaced on clashes), is held to the rollout's budgets, and has every call recorded (a ToolEvent;
a refused one as a ``Refusal``; a result over the cap cut and marked truncated) with every message relayed."""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from sqlalchemy.engine import Engine
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from rollwire.errors import InvalidRequest, RollwireError, Unauthorized, openai_error
from rollwire.mcp_servers.envs.app import SERVERS, security
from rollwire.mcp_servers.gateway.cluster_routes import SidecarRoutes
from rollwire.mcp_servers.gateway.features import SEP, Features
from rollwire.mcp_servers.gateway.limits import RolloutLimits, cap_result
from rollwire.mcp_servers.gateway.messages import HARNESS_IN, HARNESS_OUT, MessageLog
from rollwire.mcp_servers.gateway.metrics import GatewayMetrics, classify
from rollwire.mcp_servers.gateway.pool import Connection, UpstreamPool, reap
from rollwire.mcp_servers.gateway.recorder import ToolCallRecord, ToolRecorder
from rollwire.mcp_servers.gateway.relay import declared
from rollwire.mcp_servers.gateway.replay import RecordedCall, ReplayBook, ReplaySpec
from rollwire.mcp_servers.gateway.rounds import RoundBook, Rounds, needs_rounds
from rollwire.mcp_servers.gateway.stdio_sandbox import StdioSandbox
from rollwire.mcp_servers.gateway.stdio_sandbox import require as require_sandbox
from rollwire.mcp_servers.server_config import UpstreamSpec, parse_servers
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.metrics import HttpMetricsMiddleware, metrics_endpoint
from rollwire.rollouts import Identity, TokenIndex
from rollwire.rollouts.budgets import Budgets
from rollwire.sandbox import state_folders
from rollwire.settings import GatewaySettings
from rollwire.store import RolloutStatus, now_ns

log = logging.getLogger(__name__)
SCOPE_KEY = "rollwire.rollout"
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"


@dataclass(frozen=True)
class RolloutInfo:
    rollout_id: str
    task_ref: str | None
    servers: tuple[str, ...]
    tools: frozenset[str] | None = None
    """The task's own tool allow-list (exposed names); None shows every tool of its servers."""
    identity: Identity | None = None
    specs: dict[str, UpstreamSpec] = field(default_factory=dict)
    """How to reach each of its servers (the gateway's, plus those its suite declares)."""
    error: str | None = None
    """Why the rollout cannot be served (it names an MCP server nobody declared)."""
    task_servers: frozenset[str] = frozenset()
    """The servers its task names: ``tools`` narrows these; servers added by ``meta.mcp_servers`` show in full."""
    replay: ReplaySpec | None = None
    """The recording its tool calls are answered from while they match it (``replay``), None for live tools."""


@dataclass
class ToolMap:
    tools: list[types.Tool] = field(default_factory=list)
    targets: dict[str, tuple[str, str]] = field(default_factory=dict)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _upstream_meta(ctx: ServerRequestContext[Any, Any] | None) -> dict[str, Any] | None:
    """The harness's log-level opt-in (2026-07-28 servers log only for requests that carry it), passed on."""
    meta = ctx.meta if ctx is not None else None
    level = meta.get(LOG_LEVEL_META) if isinstance(meta, dict) else getattr(meta, LOG_LEVEL_META, None)
    return {LOG_LEVEL_META: level} if level else None


def _wants_progress(ctx: ServerRequestContext[Any, Any] | None) -> bool:
    meta = ctx.meta if ctx is not None else None
    return isinstance(meta, dict) and (meta.get("progress_token") is not None or meta.get("progressToken") is not None)


class Gateway:
    """Rollout lookup, upstream connections, and recorded, limited calls."""

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
        self.messages = MessageLog(engine)
        self.tokens = TokenIndex(engine)
        self.budgets = Budgets(engine, "gateway")
        self.features = Features(self)
        self.rounds = RoundBook()
        self.replays = ReplayBook(engine)
        self.pool: UpstreamPool | None = None
        self._infos: dict[str, RolloutInfo] = {}

    def _info(self, identity: Identity) -> RolloutInfo:
        """The task's servers, tools and server specs (read once per rollout: a task does not change)."""
        suite_name = identity.meta.get("suite")
        ref = f"{suite_name}:{identity.task_id}" if suite_name and identity.task_id else None
        servers: list[str] = []
        tools: frozenset[str] | None = None
        specs = dict(self.specs)
        if ref:
            try:
                suite = load_suite(str(suite_name))
                task = suite.task(str(identity.task_id))
                servers, tools = list(task.servers), frozenset(task.tools) if task.tools is not None else None
                specs.update(parse_servers(suite.mcp_servers, f"suite {suite.name!r}"))
            except (RollwireError, KeyError):
                log.warning("rollout %s names an unknown task", identity.rollout_id)
                ref = None
        task_servers = frozenset(servers)
        servers += [s for s in identity.meta.get("mcp_servers", []) if s not in servers]
        unknown = [s for s in servers if s not in specs]
        error = None
        if unknown:
            error = (
                f"rollout {identity.rollout_id} names MCP server(s) {', '.join(map(repr, unknown))} that neither the "
                f"gateway (--mcp-config) nor its suite declares (known: {', '.join(sorted(specs))})"
            )
        known = {s: specs[s] for s in servers if s in specs}
        replay = None
        try:
            replay = ReplaySpec.of_meta(identity.meta)
        except InvalidRequest as exc:
            error = f"rollout {identity.rollout_id}: {exc.message}"
        return RolloutInfo(identity.rollout_id, ref, tuple(servers), tools, None, known, error, task_servers, replay)

    async def rollout_for(self, token: str) -> RolloutInfo:
        """The token's rollout: 401 unknown, 403 once it ended (``rollwire.rollouts``), 400 if it cannot be served."""
        identity = await self.tokens.resolve(token)
        info = self._infos.get(identity.rollout_id)
        if info is None:
            info = await anyio.to_thread.run_sync(self._info, identity)
            self._infos[identity.rollout_id] = info
        if info.error:
            raise InvalidRequest(info.error)
        return replace(info, identity=identity)

    def info_of(self, ctx: ServerRequestContext[Any, Any]) -> RolloutInfo:
        info = getattr(ctx.request, "scope", {}).get(SCOPE_KEY)
        if not isinstance(info, RolloutInfo):
            raise Unauthorized("no rollout on this request")
        return info

    def forget(self, rollout_id: str) -> None:
        """Drop what is cached for a rollout that ended."""
        self._infos.pop(rollout_id, None)
        self.features.forget(rollout_id)
        self.replays.forget(rollout_id)

    def _pool(self) -> UpstreamPool:
        if self.pool is None:
            raise RollwireError("the gateway is not running (no lifespan)")
        return self.pool

    async def connections(
        self, info: RolloutInfo, ctx: ServerRequestContext[Any, Any] | None = None
    ) -> dict[str, Connection]:
        """The rollout's live upstream connections, opened with the harness's capabilities; a server that cannot
        be reached is left out (and logged)."""
        caps = declared(ctx.session if ctx is not None else None)
        found: dict[str, Connection] = {}
        for name in info.servers:
            try:
                found[name] = await self._pool().get(info.rollout_id, info.task_ref, info.specs[name], caps)
            except RollwireError as exc:
                log.warning("rollout %s: %s", info.rollout_id, exc.message)
        return found

    async def tool_map(self, info: RolloutInfo, ctx: ServerRequestContext[Any, Any] | None = None) -> ToolMap:
        """The rollout's tools; a name served by two servers becomes ``server__tool`` for both."""
        per_server = {name: conn.tools for name, conn in (await self.connections(info, ctx)).items()}
        counts: dict[str, int] = {}
        for tools in per_server.values():
            for tool in tools:
                counts[tool.name] = counts.get(tool.name, 0) + 1
        result = ToolMap()
        for server, tools in per_server.items():
            for tool in tools:
                exposed = f"{server}{SEP}{tool.name}" if counts[tool.name] > 1 else tool.name
                narrowed = info.tools is not None and server in info.task_servers
                if self.limits.allows_tool(exposed) and (not narrowed or exposed in info.tools):  # type: ignore[operator]
                    result.tools.append(tool.model_copy(update={"name": exposed}))
                    result.targets[exposed] = (server, tool.name)
        return result

    async def call(
        self, info: RolloutInfo, name: str, arguments: dict[str, Any], ctx: ServerRequestContext[Any, Any] | None = None,
        params: types.CallToolRequestParams | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One budgeted, recorded call; every failure is a tool error the model can read. A refused call is
        recorded as a Refusal (why), not as a ToolEvent. A harness on 2026-07-28 gets the upstream's own requests
        as input-required rounds (``rounds``); its retry resumes the call."""
        if ctx is not None and params is not None and params.request_state is not None:
            return await self.rounds.resume(info.rollout_id, params.request_state, ctx, params.input_responses)
        started = now_ns()
        who = info.identity or Identity(info.rollout_id, "", RolloutStatus.RUNNING)
        target = (await self.tool_map(info, ctx)).targets.get(name)
        if not self.limits.allows_tool(name):
            return _error(await self.budgets.refuse_tool(who, "tool_not_allowed", name, f"tool {name!r} is not allowed for this rollout"))
        if target is None:
            return _error(await self.budgets.refuse_tool(who, "unknown_tool", name, f"unknown tool {name!r}"))
        refused = await self.budgets.tool_call(who, name, self.settings.max_tool_calls)
        if refused is not None:
            return _error(refused)
        server, tool = target
        replayed = None
        if info.replay is not None:
            decision = await self.replays.decide(info.rollout_id, info.replay, server, tool, arguments)
            if decision.refuse is not None:
                return _error(await self.budgets.refuse_tool(who, "replay_stopped", name, decision.refuse))
            replayed = decision.answer
        if ctx is not None and needs_rounds(ctx):
            rounds = Rounds(info.rollout_id, ctx, self.settings.call_timeout_s)
            run = partial(self._complete, info, server, tool, arguments, ctx, rounds, started, replayed)
            return await self.rounds.start(self._pool().task_group, rounds, run)
        return await self._complete(info, server, tool, arguments, ctx, ctx, started, replayed)

    async def _complete(
        self, info: RolloutInfo, server: str, tool: str, arguments: dict[str, Any],
        ctx: ServerRequestContext[Any, Any] | None, relay_to: ServerRequestContext[Any, Any] | Rounds | None,
        started: int, replayed: RecordedCall | None = None,
    ) -> types.CallToolResult:  # fmt: skip
        """Forward, cap and record one call; a replayed call runs live too, so the environment holds the state it
        leaves, and is answered with the recorded result (``replayed``)."""
        try:
            result = await self._forward(info, server, tool, arguments, ctx, relay_to)
            if replayed is not None:
                result = types.CallToolResult.model_validate(replayed.result)
        except anyio.get_cancelled_exc_class():  # the harness cancelled the call: it is recorded as such
            with anyio.CancelScope(shield=True):
                why = "cancelled by the harness"
                await self.recorder.record(
                    ToolCallRecord(info.rollout_id, server, tool, arguments, None, True, why, started, now_ns())
                )
            raise
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        capped = cap_result(dumped, self.settings.max_result_bytes)
        if capped.truncated:
            result = types.CallToolResult.model_validate(capped.result)
        error = "".join(getattr(b, "text", "") for b in result.content) if result.is_error else None
        recorded = await self.recorder.record(
            ToolCallRecord(
                info.rollout_id, server, tool, arguments, capped.result, bool(result.is_error), error, started, now_ns(),
                capped.size, capped.truncated, replayed.event_id if replayed is not None else None,
            )
        )  # fmt: skip
        if recorded is not None:  # the rollout ended during the call: nothing was recorded
            return _error(recorded)
        return result

    async def _forward(
        self, info: RolloutInfo, server: str, tool: str, arguments: dict[str, Any],
        ctx: ServerRequestContext[Any, Any] | None, relay_to: ServerRequestContext[Any, Any] | Rounds | None,
    ) -> types.CallToolResult:  # fmt: skip
        pool = self._pool()
        try:
            conn = await pool.get(info.rollout_id, info.task_ref, info.specs[server], declared(ctx.session if ctx else None))
        except RollwireError as exc:
            return _error(exc.message)
        assert conn.client is not None
        progress = conn.relay.progress if _wants_progress(ctx) else None
        try:
            with anyio.fail_after(self.settings.call_timeout_s):
                if relay_to is None:
                    return await conn.client.call_tool(tool, arguments)
                with conn.relay.serving(relay_to):
                    return await conn.client.call_tool(tool, arguments, progress_callback=progress, meta=_upstream_meta(ctx))  # type: ignore[arg-type]
        except TimeoutError:
            pool.drop(info.rollout_id, server)
            return _error(f"tool {tool!r} on {server!r} timed out after {self.settings.call_timeout_s:g}s")
        except MCPError as exc:
            if exc.error.code != types.CONNECTION_CLOSED:  # the upstream answered with an error: the model reads it
                return _error(f"MCP server {server!r} refused {tool!r}: {exc.error.message}")
            pool.drop(info.rollout_id, server)
            return _error(f"MCP server {server!r} failed during {tool!r}: {exc.error.message}")
        except Exception as exc:  # noqa: BLE001 - an upstream crash or protocol break: report it, reconnect next time
            pool.drop(info.rollout_id, server)
            log.info("upstream %s failed mid-call: %s", server, exc.__class__.__name__)
            return _error(f"MCP server {server!r} failed during {tool!r}: {exc.__class__.__name__}: {exc}")


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


class _Recording:
    """Server middleware: every message from the harness and every answer the gateway gives, in order."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        info = getattr(ctx.request, "scope", {}).get(SCOPE_KEY)
        if not isinstance(info, RolloutInfo):
            return await call_next(ctx)
        messages, rid = self.gateway.messages, info.rollout_id
        kind = "notification" if ctx.request_id is None else "request"
        messages.add(rid, HARNESS_IN, kind, ctx.method, dict(ctx.params or {}), request_id=ctx.request_id)
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            messages.add(rid, HARNESS_OUT, "error", ctx.method, _dump(exc.error), request_id=ctx.request_id)
            raise
        except RollwireError as exc:
            messages.add(rid, HARNESS_OUT, "error", ctx.method, {"message": exc.message}, request_id=ctx.request_id)
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message) from None
        except anyio.get_cancelled_exc_class():
            messages.add(rid, HARNESS_OUT, "cancelled", ctx.method, {}, request_id=ctx.request_id)
            raise
        else:
            if ctx.request_id is not None:
                messages.add(rid, HARNESS_OUT, "response", ctx.method, _dump(result), request_id=ctx.request_id)
            return result
        finally:
            with anyio.CancelScope(shield=True):
                await messages.flush()


def build_mcp(gateway: Gateway) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any], _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=(await gateway.tool_map(gateway.info_of(ctx), ctx)).tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        return await gateway.call(gateway.info_of(ctx), params.name, dict(params.arguments or {}), ctx, params)

    f = gateway.features
    with warnings.catch_warnings():  # logging/setLevel is deprecated in 2026-07-28, yet what today's harnesses send
        warnings.simplefilter("ignore")
        server: Server[Any] = Server(
            "rollwire-gateway", on_list_tools=list_tools, on_call_tool=call_tool,
            on_list_resources=f.list_resources, on_list_resource_templates=f.list_resource_templates,
            on_read_resource=f.read_resource, on_subscribe_resource=f.subscribe, on_unsubscribe_resource=f.unsubscribe,
            on_list_prompts=f.list_prompts, on_get_prompt=f.get_prompt, on_completion=f.complete,
            on_set_logging_level=f.set_level,
        )  # fmt: skip
    server.middleware.append(_Recording(gateway))
    return server


class _Endpoint:
    """``/r/{token}/mcp``: 401 for an unknown token, else the MCP transport with the rollout in the scope."""

    def __init__(self, gateway: Gateway, manager: StreamableHTTPSessionManager) -> None:
        self.gateway, self.manager = gateway, manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            info = await self.gateway.rollout_for(str(scope.get("path_params", {}).get("token", "")))
        except RollwireError as exc:
            await JSONResponse(openai_error(exc), status_code=exc.status_code)(scope, receive, send)
            return
        scope[SCOPE_KEY] = info
        await self.manager.handle_request(scope, receive, send)


def build_gateway_app(
    settings: GatewaySettings, engine: Engine, extra: dict[str, UpstreamSpec] | None = None,
    sidecars: SidecarRoutes | None = None,
) -> Starlette:  # fmt: skip
    """The gateway as a Starlette app (its own process, or mounted into the proxy). With the sandbox on (the default)
    and stdio servers among ``extra``, it refuses to be built where no sandbox can be made (``SandboxUnavailable``:
    one line with the way out); a suite's stdio servers are refused the same way when a rollout first needs them.
    ``sidecars``: on Kubernetes (``cluster_routes.kubernetes_routes``), where each rollout's own servers are; the
    gateway then starts no server itself."""
    if sidecars is None and settings.sandbox and any(spec.command for spec in (extra or {}).values()):
        require_sandbox(settings)
    gateway = Gateway(settings, engine, extra or {})
    metrics = GatewayMetrics()
    gateway.recorder.listeners.append(metrics.recorded)
    gateway.budgets.refused.append(metrics.refused)
    manager = StreamableHTTPSessionManager(app=build_mcp(gateway), security_settings=security(settings.allowed_hosts))

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "servers": sorted(gateway.specs)})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own_root = not settings.rollouts_dir
        root = Path(settings.rollouts_dir or tempfile.mkdtemp(prefix="rollwire-gateway-"))
        root.mkdir(parents=True, exist_ok=True)
        stdio = StdioSandbox(settings, root=root.resolve(), hidden=state_folders([_sqlite_file(engine)]))
        stdio.open()
        loops = anyio.CancelScope()

        async def background() -> None:
            with loops:
                async with anyio.create_task_group() as inner:
                    assert gateway.pool is not None
                    inner.start_soon(reap, gateway.pool, engine, settings.reap_interval_s, gateway.forget)
                    inner.start_soon(gateway.messages.run)

        try:
            async with anyio.create_task_group() as tg:  # waits, at stop, until every upstream has shut down
                async with manager.run():
                    gateway.pool = UpstreamPool(
                        tg, gateway.messages, root, settings.connect_timeout_s, settings.idle_close_s, stdio=stdio,
                        sidecars=sidecars,
                    )  # fmt: skip
                    tg.start_soon(background)
                    app.state.gateway = gateway
                    try:
                        yield
                    finally:
                        gateway.pool.close_all()
                        gateway.rounds.cancel_all()
                        loops.cancel()
                        await gateway.messages.flush()
        finally:
            stdio.close()
            if sidecars is not None:
                await sidecars.aclose()
            if own_root:
                shutil.rmtree(root, ignore_errors=True)

    routes = [
        Route("/health", health),
        Route("/metrics", metrics_endpoint(metrics.registry), methods=["GET"]),
        Route("/r/{token}/mcp", _Endpoint(gateway, manager)),
    ]
    middleware = [Middleware(HttpMetricsMiddleware, metrics=metrics.http, classify=classify)]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.metrics = metrics
    return app


def _sqlite_file(engine: Engine) -> str | None:
    """The store's database file when it is SQLite (its folder is hidden from stdio servers), else None."""
    url = engine.url
    database = url.database
    return database if url.get_backend_name() == "sqlite" and database not in (None, "", ":memory:") else None


__all__ = ["Gateway", "RolloutInfo", "build_gateway_app"]
