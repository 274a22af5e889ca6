"""One ASGI app that answers each listening socket with the app registered for it (the proxy's public and
operator sides in one server)."""

from __future__ import annotations

import socket
from typing import Any


class Listeners:
    """ASGI apps that share one process, one lifespan and one uvicorn server, each answering on its own sockets.

    The proxy answers rollouts on one port and operators on another: a rollout can reach the first only, so the
    second's routes must not exist there at all (not merely refuse without a key). Two route tables served by one
    server, rather than two servers, because the apps share what one lifespan builds (store pool, tokenizer,
    caches), and one server means one start, one set of signal handlers and one graceful shutdown, also per
    ``--workers`` process. uvicorn hands every socket's connections to one app; this one passes each request on to
    the app of the socket it came in on, known by the connection's local port (``scope["server"]``: uvicorn reads
    it from the socket, never from the request, so a client cannot choose it).

    The first app (``main``) runs the lifespan, and answers every connection whose port was not ``bind``-ed to
    another app: a socket nobody registered falls to the public side, never to a private one.
    """

    MAIN = "main"

    def __init__(self, main: Any, **others: Any) -> None:
        self.apps: dict[str, Any] = {self.MAIN: main, **others}
        """Each listener's app by name; a test may wrap one in place (``apps["main"] = Tap(apps["main"])``)."""
        self.ports: dict[str, int] = {}
        """The port each listener serves on, once bound (the first socket bound to it)."""
        self._by_port: dict[int, str] = {}

    def bind(self, name: str, sock: socket.socket) -> None:
        """Answer the connections accepted on ``sock`` with the app named ``name``."""
        if name not in self.apps:
            raise KeyError(f"no listener {name!r} (known: {', '.join(self.apps)})")
        port = int(sock.getsockname()[1])
        taken = self._by_port.get(port)
        if taken is not None and taken != name:
            raise ValueError(f"port {port} already serves listener {taken!r}")
        self._by_port[port] = name
        self.ports.setdefault(name, port)

    def listener(self, scope: Any) -> str:
        """The name of the listener a request came in on (``main`` when its port is not a bound one)."""
        server = scope.get("server")
        return self._by_port.get(server[1], self.MAIN) if server else self.MAIN

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.apps[self.MAIN](scope, receive, send)
            return
        await self.apps[self.listener(scope)](scope, receive, send)
