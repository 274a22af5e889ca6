"""The upstream MCP servers behind the gateway: specs (ours over HTTP with the rollout's identity, third-party
over stdio or HTTP) and one live connection set per rollout, each connection owned by its own task."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from rollwire.mcp_servers.state import ROLLOUT_HEADER, SECRET_HEADER, TASK_HEADER

from rollwire.errors import InvalidRequest, UpstreamError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpstreamSpec:
    """How to reach one MCP server: ``url`` (streamable HTTP) or ``command`` + ``args`` (stdio)."""

    name: str
    url: str = ""
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    forward_identity: bool = False
    secret: str = ""
    """Sent to our env servers (with the identity) so they know the call comes from the gateway."""

    @classmethod
    def from_dict(cls, name: str, raw: dict[str, Any]) -> UpstreamSpec:
        if bool(raw.get("url")) == bool(raw.get("command")):
            raise InvalidRequest(f"upstream {name!r} needs exactly one of 'url' or 'command'")
        return cls(
            name,
            raw.get("url", ""),
            raw.get("command", ""),
            tuple(raw.get("args", [])),
            tuple(sorted((raw.get("env") or {}).items())),
            bool(raw.get("forward_identity", False)),
        )


def load_upstreams(path: str) -> dict[str, UpstreamSpec]:
    """Extra upstreams from a JSON file ``{name: {"command": ..., "args": [...]} | {"url": ...}}``."""
    if not path:
        return {}
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidRequest(f"cannot read upstreams file {path}: {exc}") from None
    return {name: UpstreamSpec.from_dict(name, spec) for name, spec in raw.items()}


@dataclass
class Connection:
    """One open client to one upstream, kept alive by its owner task until ``closed`` is set."""

    spec: UpstreamSpec
    client: Client | None = None
    tools: list[types.Tool] = field(default_factory=list)
    ready: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    error: str | None = None
    last_used: float = field(default_factory=time.monotonic)

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.closed.is_set()


def _client(spec: UpstreamSpec, rollout_id: str, task_ref: str | None) -> tuple[Client, Any]:
    if spec.command:
        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None)
        return Client(params), None
    headers = (
        {ROLLOUT_HEADER: rollout_id, **({TASK_HEADER: task_ref} if task_ref else {})} if spec.forward_identity else {}
    )
    if spec.secret:
        headers[SECRET_HEADER] = spec.secret
    http = create_mcp_http_client(headers=headers)
    return Client(streamable_http_client(spec.url, http_client=http)), http


async def _own(conn: Connection, rollout_id: str, task_ref: str | None) -> None:
    """Open, list tools, hold the connection until closed; every failure becomes ``conn.error``."""
    try:
        client, http = _client(conn.spec, rollout_id, task_ref)
        if http is not None:
            async with http, client:
                await _hold(conn, client)
        else:
            async with client:
                await _hold(conn, client)
    except Exception as exc:  # noqa: BLE001 - any transport failure is recorded on the connection, never raised
        conn.error = f"upstream {conn.spec.name!r} failed: {exc.__class__.__name__}: {exc}".strip()
        log.info("upstream %s closed: %s", conn.spec.name, exc.__class__.__name__)
    finally:
        conn.client = None
        conn.closed.set()
        conn.ready.set()


async def _hold(conn: Connection, client: Client) -> None:
    conn.tools = list((await client.list_tools()).tools)
    conn.client = client
    conn.ready.set()
    await conn.closed.wait()


class UpstreamPool:
    """The connections of each rollout, opened on first use inside the gateway's task group."""

    def __init__(self, task_group: TaskGroup, connect_timeout_s: float = 30.0, idle_s: float = 900.0) -> None:
        self._tg = task_group
        self._timeout = connect_timeout_s
        self._idle_s = idle_s
        self._conns: dict[tuple[str, str], Connection] = {}
        self._lock = anyio.Lock()

    async def get(self, rollout_id: str, task_ref: str | None, spec: UpstreamSpec) -> Connection:
        """A live connection (reopened if the last one died); UpstreamError if it cannot be opened."""
        key = (rollout_id, spec.name)
        self.close_idle()
        async with self._lock:
            conn = self._conns.get(key)
            if conn is None or conn.closed.is_set():
                conn = Connection(spec)
                self._conns[key] = conn
                self._tg.start_soon(_own, conn, rollout_id, task_ref)
        with anyio.move_on_after(self._timeout):
            await conn.ready.wait()
        if not conn.alive:
            raise UpstreamError(conn.error or f"upstream {spec.name!r} did not start within {self._timeout}s")
        conn.last_used = time.monotonic()
        return conn

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

    def close_rollout(self, rollout_id: str) -> None:
        for rollout, name in [k for k in self._conns if k[0] == rollout_id]:
            self.drop(rollout, name)

    def close_all(self) -> None:
        for rollout, name in list(self._conns):
            self.drop(rollout, name)


__all__ = ["Connection", "UpstreamPool", "UpstreamSpec", "load_upstreams"]
