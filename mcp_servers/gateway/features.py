"""Everything besides tools that the gateway proxies for a rollout: resources (lists, templates, reads,
subscriptions), prompts, completions and the log level, merged over the rollout's servers. A name served by two
servers becomes ``server__name`` as tools do; a resource goes back to the server that listed it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

if TYPE_CHECKING:
    from rollwire.mcp_servers.gateway.pool import Connection
    from rollwire.mcp_servers.gateway.server import Gateway, RolloutInfo

SEP = "__"
MAX_PAGES = 20
"""Pages read from one upstream for one listing (a server that pages forever still answers)."""


@dataclass
class Routes:
    """Which server serves what the rollout was shown, learnt from its listings."""

    resources: dict[str, str] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, tuple[str, str]] = field(default_factory=dict)


def _invalid(message: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=message)


async def _pages(fetch: Callable[[str | None], Awaitable[Any]], items: str) -> list[Any]:
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        found += list(getattr(page, items))
        cursor = page.next_cursor
        if not cursor:
            break
    return found


def _template_prefix(template: str) -> str:
    return template.split("{", 1)[0]


class Features:
    """The non-tool handlers of the gateway's MCP server. Subscriptions and the log level go out as plain requests:
    the SDK's helpers for them are deprecated for 2026-07-28, yet 2025-era servers need them."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.routes: dict[str, Routes] = {}

    def forget(self, rollout_id: str) -> None:
        self.routes.pop(rollout_id, None)

    def _routes(self, info: RolloutInfo) -> Routes:
        return self.routes.setdefault(info.rollout_id, Routes())

    async def _with(self, ctx: ServerRequestContext[Any, Any], need: str) -> list[tuple[str, Connection]]:
        info = self.gateway.info_of(ctx)
        conns = await self.gateway.connections(info, ctx)
        return [(name, c) for name, c in conns.items() if getattr(c.capabilities, need) is not None]

    async def _one(self, ctx: ServerRequestContext[Any, Any], server: str) -> Connection:
        conns = await self.gateway.connections(self.gateway.info_of(ctx), ctx)
        if server not in conns:
            raise _invalid(f"MCP server {server!r} is not available to this rollout")
        return conns[server]

    # -- resources -----------------------------------------------------------------------------------------

    async def list_resources(self, ctx: ServerRequestContext[Any, Any], _params: Any) -> types.ListResourcesResult:
        routes = self._routes(self.gateway.info_of(ctx))
        merged: list[types.Resource] = []
        for name, conn in await self._with(ctx, "resources"):
            assert conn.client is not None
            client = conn.client
            with conn.relay.serving(ctx):
                found = await _pages(lambda c: client.list_resources(cursor=c, cache_mode="bypass"), "resources")
            for resource in found:
                routes.resources[str(resource.uri)] = name
            merged += found
        return types.ListResourcesResult(resources=merged)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], _params: Any
    ) -> types.ListResourceTemplatesResult:
        routes = self._routes(self.gateway.info_of(ctx))
        merged: list[types.ResourceTemplate] = []
        for name, conn in await self._with(ctx, "resources"):
            assert conn.client is not None
            client = conn.client
            with conn.relay.serving(ctx):
                found = await _pages(
                    lambda c: client.list_resource_templates(cursor=c, cache_mode="bypass"), "resource_templates"
                )
            for template in found:
                routes.templates[template.uri_template] = name
            merged += found
        return types.ListResourceTemplatesResult(resource_templates=merged)

    async def _resource_server(self, ctx: ServerRequestContext[Any, Any], uri: str) -> Connection:
        routes = self._routes(self.gateway.info_of(ctx))
        server = routes.resources.get(uri)
        if server is None:
            matches = [s for t, s in routes.templates.items() if uri.startswith(_template_prefix(t))]
            server = max(matches, key=len) if matches else None
        if server is None:
            serving = await self._with(ctx, "resources")
            if len(serving) != 1:
                raise _invalid(f"no MCP server of this rollout listed resource {uri!r} (list resources first)")
            return serving[0][1]
        return await self._one(ctx, server)

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        conn = await self._resource_server(ctx, params.uri)
        assert conn.client is not None
        with conn.relay.serving(ctx):
            return await conn.client.read_resource(params.uri, cache_mode="bypass")

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        conn = await self._resource_server(ctx, params.uri)
        if conn.client is None or not (conn.capabilities.resources and conn.capabilities.resources.subscribe):
            raise _invalid(f"the MCP server of {params.uri!r} does not take subscriptions")
        with conn.relay.serving(ctx):
            return await conn.client.session.send_request(types.SubscribeRequest(params=params), types.EmptyResult)

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        conn = await self._resource_server(ctx, params.uri)
        if conn.client is None or not (conn.capabilities.resources and conn.capabilities.resources.subscribe):
            raise _invalid(f"the MCP server of {params.uri!r} does not take subscriptions")
        with conn.relay.serving(ctx):
            return await conn.client.session.send_request(types.UnsubscribeRequest(params=params), types.EmptyResult)

    # -- prompts and completions ---------------------------------------------------------------------------

    async def list_prompts(self, ctx: ServerRequestContext[Any, Any], _params: Any) -> types.ListPromptsResult:
        routes = self._routes(self.gateway.info_of(ctx))
        per_server: dict[str, list[types.Prompt]] = {}
        for name, conn in await self._with(ctx, "prompts"):
            assert conn.client is not None
            client = conn.client
            with conn.relay.serving(ctx):
                per_server[name] = await _pages(lambda c: client.list_prompts(cursor=c, cache_mode="bypass"), "prompts")
        counts: dict[str, int] = {}
        for prompts in per_server.values():
            for prompt in prompts:
                counts[prompt.name] = counts.get(prompt.name, 0) + 1
        merged: list[types.Prompt] = []
        for server, prompts in per_server.items():
            for prompt in prompts:
                exposed = f"{server}{SEP}{prompt.name}" if counts[prompt.name] > 1 else prompt.name
                routes.prompts[exposed] = (server, prompt.name)
                merged.append(prompt.model_copy(update={"name": exposed}))
        return types.ListPromptsResult(prompts=merged)

    async def _prompt(self, ctx: ServerRequestContext[Any, Any], exposed: str) -> tuple[Connection, str]:
        routes = self._routes(self.gateway.info_of(ctx))
        if exposed not in routes.prompts:
            await self.list_prompts(ctx, None)
        if exposed not in routes.prompts:
            raise _invalid(f"unknown prompt {exposed!r}")
        server, name = routes.prompts[exposed]
        return await self._one(ctx, server), name

    async def get_prompt(self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
        conn, name = await self._prompt(ctx, params.name)
        assert conn.client is not None
        with conn.relay.serving(ctx):
            return await conn.client.get_prompt(name, params.arguments)

    async def complete(self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            conn, name = await self._prompt(ctx, ref.name)
            ref = ref.model_copy(update={"name": name})
        else:
            conn = await self._template_server(ctx, ref.uri)
        if conn.client is None or conn.capabilities.completions is None:
            raise _invalid("the MCP server of this reference does not complete arguments")
        context = params.context.arguments if params.context is not None else None
        with conn.relay.serving(ctx):
            return await conn.client.complete(ref, {"name": params.argument.name, "value": params.argument.value}, context)

    async def _template_server(self, ctx: ServerRequestContext[Any, Any], template: str) -> Connection:
        routes = self._routes(self.gateway.info_of(ctx))
        if template not in routes.templates:
            await self.list_resource_templates(ctx, None)
        server = routes.templates.get(template)
        if server is None:
            raise _invalid(f"no MCP server of this rollout listed resource template {template!r}")
        return await self._one(ctx, server)

    # -- logging -------------------------------------------------------------------------------------------

    async def set_level(self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        """The harness's log level, passed to every server of the rollout that logs."""
        for _name, conn in await self._with(ctx, "logging"):
            assert conn.client is not None
            with conn.relay.serving(ctx):
                await conn.client.session.send_request(types.SetLevelRequest(params=params), types.EmptyResult)
        return types.EmptyResult()


__all__ = ["Features", "Routes"]
