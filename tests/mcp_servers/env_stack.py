"""The MCP tests' stack: the four env servers hosted in one real app on 127.0.0.1, and a gateway in front of them."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.types import CallToolResult, TextContent
from sqlalchemy.engine import Engine
from sqlmodel import col, select
from starlette.applications import Starlette

from rollwire.app.serving import ServerThread
from rollwire.mcp_servers.envs.app import SERVERS, build_app, runtime
from rollwire.mcp_servers.envs.rollout import EnvRuntime
from rollwire.mcp_servers.gateway.cluster_routes import SidecarRoutes
from rollwire.mcp_servers.gateway.server import build_gateway_app
from rollwire.mcp_servers.server_config import UpstreamSpec
from rollwire.mcp_servers.tasks.loader import task_initial
from rollwire.settings import GatewaySettings, McpSettings
from rollwire.store import Refusal, Rollout, RolloutStatus, Run, ToolEvent, session_scope
from rollwire.store.db import open_engine

ENV_SECRET = "mcp-tests-env-secret"
"""What the gateway under test and the env servers share (the env servers refuse calls without it)."""


@dataclass
class EnvServers:
    url: str
    env: EnvRuntime

    def server_url(self, name: str) -> str:
        return f"{self.url}/{name}/mcp"

    def folder(self, rollout_id: str) -> Path:
        return self.env.store.folder(rollout_id)


@contextmanager
def running_env_servers(home: Path) -> Iterator[EnvServers]:
    """The four env servers, with their state under ``home``, served until the block ends."""
    settings = McpSettings(max_payload_bytes=20_000)
    env = runtime(settings, home, task_initial)
    with ServerThread(build_app(list(SERVERS), env, settings.allowed_hosts, 1_000_000, secret=ENV_SECRET)) as server:
        yield EnvServers(server.url, env)


@dataclass
class GatewayStack:
    url: str
    engine: Engine
    env: EnvServers
    app: Starlette

    def add_rollout(
        self,
        rollout_id: str,
        task: str | None = None,
        servers: list[str] | None = None,
        budgets: dict[str, int] | None = None,
    ) -> str:
        """A rollout row (in a run) whose token opens ``/r/<token>/mcp``; ``task`` is suite:task_id."""
        token = f"tok-{rollout_id}-{secrets.token_hex(4)}"
        suite, _, task_id = (task or "").partition(":")
        meta: dict[str, object] = {"suite": suite} if suite else {}
        if servers:
            meta["mcp_servers"] = servers
        with session_scope(self.engine) as session:
            if session.get(Run, "run-1") is None:
                session.add(Run(id="run-1"))
                session.flush()
            session.add(
                Rollout(
                    id=rollout_id,
                    run_id="run-1",
                    token_hash=hashlib.sha256(token.encode()).hexdigest(),
                    task_id=task_id or None,
                    meta=meta,
                    status=RolloutStatus.RUNNING,  # a rollout whose token is handed out is running
                    budgets=dict(budgets or {}),
                )
            )
        return token

    def mcp_url(self, token: str) -> str:
        return f"{self.url}/r/{token}/mcp"

    def refusals(self, rollout_id: str) -> list[Refusal]:
        with session_scope(self.engine) as session:
            query = select(Refusal).where(Refusal.rollout_id == rollout_id).order_by(col(Refusal.id))
            return list(session.exec(query))

    def events(self, rollout_id: str) -> list[ToolEvent]:
        with session_scope(self.engine) as session:
            rows = session.exec(
                select(ToolEvent).where(ToolEvent.rollout_id == rollout_id).order_by(col(ToolEvent.started_ns))
            )
            return list(rows)


def gateway_stack(
    env: EnvServers, store_url: str, extra: dict[str, UpstreamSpec] | None = None,
    sidecars: SidecarRoutes | None = None, **overrides: object,
) -> tuple[ServerThread, GatewayStack]:  # fmt: skip
    settings = GatewaySettings(env_url=env.url, env_secret=ENV_SECRET, **overrides)
    engine = open_engine(store_url)
    app = build_gateway_app(settings, engine, extra, sidecars)
    server = ServerThread(app)
    return server, GatewayStack(server.url, engine, env, app)


def first_text(result: CallToolResult) -> str:
    """The text of an MCP tool result's first content block, which must be a text block."""
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def result_text(result: Any) -> str:
    """The text blocks of an MCP tool result (``CallToolResult.content``), joined."""
    return "".join(getattr(block, "text", "") for block in result.content)
