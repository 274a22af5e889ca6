"""One live set of upstream connections per rollout, each owned by its own task in the gateway's task group.
A rollout's connections (and the stdio processes behind them) close when the rollout ends (``reap``, which
asks the store), when they sit idle, and when the gateway stops (``close_all``, then the task group waits)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from rollwire.errors import UpstreamError
from rollwire.mcp_servers.gateway.cluster_routes import SidecarRoutes, proving
from rollwire.mcp_servers.gateway.messages import MessageLog
from rollwire.mcp_servers.gateway.relay import Relay
from rollwire.mcp_servers.gateway.stdio_sandbox import StdioSandbox
from rollwire.mcp_servers.server_config import RolloutVars, UpstreamSpec, rollout_folder
from rollwire.rollouts import TOKEN_WORKS
from rollwire.store import Rollout, session_scope

log = logging.getLogger(__name__)


@dataclass
class Connection:
    """One open client to one upstream, kept alive by its owner task until ``closed`` is set."""

    spec: UpstreamSpec
    relay: Relay
    client: Client | None = None
    tools: list[types.Tool] = field(default_factory=list)
    ready: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    """Set once the owner task has closed the client (a stdio process has exited)."""
    error: str | None = None
    tools_stale: bool = False
    """The upstream said its tools changed: list them again before the next use."""
    last_used: float = field(default_factory=time.monotonic)

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.closed.is_set()

    @property
    def capabilities(self) -> types.ServerCapabilities:
        return self.client.server_capabilities if self.client is not None else types.ServerCapabilities()

    def mark_stale(self) -> None:
        self.tools_stale = True

    async def refresh_tools(self) -> None:
        if self.client is not None:
            self.tools = list((await self.client.list_tools(cache_mode="refresh")).tools)


async def _own(conn: Connection, spec: UpstreamSpec, options: dict[str, Any], rollout_id: str, task_ref: str | None,
               cwd: Path | None, stdio: StdioSandbox, sidecars: SidecarRoutes | None) -> None:  # fmt: skip
    """Open, list tools, hold the connection until closed; every failure becomes ``conn.error``. A stdio server
    starts in its sandbox (``stdio_sandbox``), whose tmp folder goes once the server has stopped; a server in the
    rollout's pod is called where that pod is (``cluster_routes``)."""
    try:
        if spec.in_rollout_pod:
            if sidecars is None:
                raise UpstreamError("a rollout-scoped server runs in a rollout pod: the gateway is not on Kubernetes")
            spec = await sidecars.resolve(spec, rollout_id)
        if spec.command:
            assert cwd is not None
            launch = await anyio.to_thread.run_sync(stdio.launch, spec, cwd, rollout_id)
            try:
                async with Client(launch.params, **options) as client:
                    await _hold(conn, client)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(launch.cleanup)
        else:
            http = create_mcp_http_client(headers=spec.http_headers(rollout_id, task_ref))
            if spec.proof_key:  # our bridge: it proves, on every answer, that it is the server the key is for
                http = proving(http, spec.proof_key)
            async with http, Client(streamable_http_client(spec.url, http_client=http), **options) as client:
                await _hold(conn, client)
    except Exception as exc:  # noqa: BLE001 - any transport failure is recorded on the connection, never raised
        conn.error = f"upstream {conn.spec.name!r} failed: {exc.__class__.__name__}: {exc}".strip()
        log.info("upstream %s closed: %s", conn.spec.name, exc.__class__.__name__)
    finally:
        conn.client = None
        conn.closed.set()
        conn.ready.set()
        conn.done.set()


async def _hold(conn: Connection, client: Client) -> None:
    conn.client = client
    if client.server_capabilities.tools is not None:
        conn.tools = list((await client.list_tools()).tools)
    conn.relay.on_list_changed.append(conn.mark_stale)
    conn.ready.set()
    await conn.closed.wait()


class UpstreamPool:
    """The connections of each rollout, opened on first use inside the gateway's task group."""

    def __init__(
        self, task_group: TaskGroup, messages: MessageLog, root: Path, connect_timeout_s: float = 30.0,
        idle_s: float = 900.0, *, stdio: StdioSandbox, sidecars: SidecarRoutes | None = None,
    ) -> None:  # fmt: skip
        self._tg = task_group
        self._messages = messages
        self.root = root
        """Where each rollout's stdio servers get their working folder (``<root>/<rollout>/<server>``)."""
        self._stdio = stdio
        """How stdio servers start: each in a sandbox of its own (or, turned off, as the gateway's user)."""
        self._sidecars = sidecars
        """On Kubernetes: where each rollout's own servers are; the gateway then starts no server itself."""
        self._timeout = connect_timeout_s
        self._idle_s = idle_s
        self._conns: dict[tuple[str, str], Connection] = {}
        self._lock = anyio.Lock()

    async def get(
        self, rollout_id: str, task_ref: str | None, spec: UpstreamSpec, caps: types.ClientCapabilities | None = None
    ) -> Connection:
        """A live connection (reopened if the last one died); UpstreamError if it cannot be opened. ``caps`` are
        the harness's: the upstream is offered sampling, elicitation and roots only if the harness has them."""
        key = (rollout_id, spec.name)
        if spec.command and self._sidecars is not None:
            raise UpstreamError(
                f"MCP server {spec.name!r} is a stdio server: on Kubernetes the gateway starts none; put it in the "
                "deployment's mcpServers file (rollwire k8s render --mcp-config) so it runs where its scope says"
            )
        self.close_idle()
        async with self._lock:
            conn = self._conns.get(key)
            if conn is None or conn.closed.is_set():
                relay = Relay(rollout_id, spec.name, self._messages)
                conn = Connection(spec, relay)
                self._conns[key] = conn
                cwd = rollout_folder(self.root, rollout_id, spec.name) if spec.command else None
                filled = spec.for_rollout(RolloutVars(rollout_id, str(cwd or ""), task_ref or ""))
                options = relay.client_options(caps or types.ClientCapabilities())
                self._tg.start_soon(_own, conn, filled, options, rollout_id, task_ref, cwd, self._stdio, self._sidecars)
        with anyio.move_on_after(self._timeout):
            await conn.ready.wait()
        if not conn.alive:
            raise UpstreamError(conn.error or f"upstream {spec.name!r} did not start within {self._timeout}s")
        if conn.tools_stale:
            conn.tools_stale = False
            await conn.refresh_tools()
        conn.last_used = time.monotonic()
        return conn

    @property
    def task_group(self) -> TaskGroup:
        """The gateway's task group (tool calls that outlive one harness request run in it)."""
        return self._tg

    def open(self, rollout_id: str) -> list[Connection]:
        """The rollout's live connections (for features that fan out: resources, prompts, log level)."""
        return [c for (r, _n), c in self._conns.items() if r == rollout_id and c.alive]

    def rollouts(self) -> set[str]:
        return {r for r, _n in self._conns}

    def close_idle(self, now: float | None = None) -> int:
        """Close connections (and their stdio processes) of rollouts idle longer than ``idle_s``."""
        now = time.monotonic() if now is None else now
        idle = [k for k, c in self._conns.items() if now - c.last_used > self._idle_s]
        for rollout, name in idle:
            self.drop(rollout, name)
        return len(idle)

    def drop(self, rollout_id: str, name: str) -> None:
        """Close one connection (after it failed mid-call) so the next call reopens it."""
        conn = self._conns.pop((rollout_id, name), None)
        if conn is not None:
            conn.closed.set()

    def close_rollout(self, rollout_id: str) -> list[Connection]:
        """Close every connection of the rollout; returns them (``done`` tells when each has shut down)."""
        keys = [k for k in self._conns if k[0] == rollout_id]
        conns = [self._conns[k] for k in keys]
        for rollout, name in keys:
            self.drop(rollout, name)
        return conns

    def close_all(self) -> None:
        for rollout, name in list(self._conns):
            self.drop(rollout, name)


def ended_rollouts(engine: Engine, rollout_ids: set[str]) -> set[str]:
    """Which of these rollouts no longer take calls (ended, or gone from the store)."""
    if not rollout_ids:
        return set()
    with session_scope(engine) as session:
        rows = session.exec(select(Rollout.id, Rollout.status).where(col(Rollout.id).in_(rollout_ids))).all()
    live = {rid for rid, status in rows if status in TOKEN_WORKS}
    return rollout_ids - live


async def reap(pool: UpstreamPool, engine: Engine, every_s: float, on_end: Callable[[str], None] | None = None) -> None:
    """Close the connections of rollouts that ended, checking the store every ``every_s`` while any are open (the
    rollout's state is moved by other processes: the orchestrator, the proxy's admin API)."""
    while True:
        await anyio.sleep(every_s)
        open_ids = pool.rollouts()
        if not open_ids:
            continue
        try:
            ended = await anyio.to_thread.run_sync(ended_rollouts, engine, open_ids)
        except Exception as exc:  # noqa: BLE001 - a store hiccup: try again next round
            log.warning("could not check rollout states: %s", exc)
            continue
        for rollout_id in ended:
            pool.close_rollout(rollout_id)
            if on_end is not None:
                on_end(rollout_id)
            log.info("rollout %s ended: its MCP servers are closed", rollout_id)


__all__ = ["Connection", "UpstreamPool", "ended_rollouts", "reap"]
