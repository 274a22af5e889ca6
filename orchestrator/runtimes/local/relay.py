"""The orchestrator's half of a sandbox's network: one unix socket per allowed endpoint, relayed to its TCP address.

A sandboxed rollout has no network but loopback; its ``sandbox_init`` forwards the proxy's and the
gateway's ``host:port`` to unix sockets that this relay binds in the rollout's folder (outside the
workspace) and bwrap shows inside the sandbox. Each accepted connection is joined to a fresh TCP
connection to the real address; bytes flow unchanged both ways (streams, keep-alive, SSE).
The relay lives as long as the rollout: ``close`` ends its listeners and connections.

A unix socket's path holds 107 bytes, and the rollout's folder is under a workspace root as deep as its user
likes: a longer path is bound through its folder's ``/proc/self/fd`` entry (``listen_unix``), so the socket still
lives in the rollout's own folder (the only host path its mounts tell the rollout) and a deep root starts rollouts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import anyio
import anyio.abc

from rollwire.sandbox import Endpoint

logger = logging.getLogger(__name__)
CHUNK = 65536
SOCKET_PATH_BYTES = 107
"""What a unix socket's path may hold (``sun_path`` is 108 bytes with its terminating NUL)."""


async def listen_unix(path: Path) -> anyio.abc.SocketListener:
    """A listener on the unix socket ``path``, however long the path: one over ``SOCKET_PATH_BYTES`` is bound as
    ``/proc/self/fd/<its folder>/<name>``, the same file through a short name."""
    if len(os.fsencode(path)) <= SOCKET_PATH_BYTES:
        return await anyio.create_unix_listener(path)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return await anyio.create_unix_listener(f"/proc/self/fd/{folder}/{path.name}")
    finally:
        os.close(folder)


async def _pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
    try:
        async for data in source:
            await sink.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        try:
            await sink.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass


class EndpointRelay:
    """``await relay.open(group, sockets)`` binds each socket and serves it in ``group``; ``close`` stops it."""

    def __init__(self) -> None:
        self._scopes: list[anyio.CancelScope] = []

    async def open(self, group: anyio.abc.TaskGroup, sockets: Mapping[Endpoint, Path]) -> None:
        listeners = []
        try:
            for endpoint, path in sockets.items():
                listeners.append((await listen_unix(path), endpoint))
        except BaseException:
            for listener, _ in listeners:
                await listener.aclose()
            raise
        for listener, endpoint in listeners:
            scope = anyio.CancelScope()
            self._scopes.append(scope)
            group.start_soon(self._serve, listener, endpoint, scope)

    async def _serve(
        self, listener: anyio.abc.Listener[anyio.abc.SocketStream], endpoint: Endpoint, scope: anyio.CancelScope
    ) -> None:
        with scope:
            async with listener:
                await listener.serve(lambda client: self._join(client, endpoint))

    @staticmethod
    async def _join(client: anyio.abc.SocketStream, endpoint: Endpoint) -> None:
        async with client:
            try:
                upstream = await anyio.connect_tcp(endpoint.host, endpoint.port)
            except OSError as exc:
                logger.debug("relay to %s:%s failed: %s", endpoint.host, endpoint.port, exc)
                return
            async with upstream, anyio.create_task_group() as group:
                group.start_soon(_pump, client, upstream)
                await _pump(upstream, client)

    def close(self) -> None:
        for scope in self._scopes:
            scope.cancel()


__all__ = ["SOCKET_PATH_BYTES", "EndpointRelay", "listen_unix"]
