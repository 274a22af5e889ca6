"""Serving an ASGI app with uvicorn: on a socket bound here or inherited from a parent (``--fd``), or on a
background thread (tests, and CLIs that host several servers); an app with private listeners (``Listeners``) on
one socket per listener."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from rollwire.errors import Conflict, InvalidRequest
from rollwire.listeners import Listeners


def listening_socket(
    host: str, port: int, fd: int | None = None, backlog: int = 2048, reuse_port: bool = False
) -> socket.socket:
    """The socket a server accepts on: a new one bound to ``host:port``, or one its parent bound (``fd``).

    A parent that picks a free port and lets the child bind it leaves a window in which another process (or
    another child given the same number) takes the port; handing the child the bound socket leaves none.
    ``reuse_port``: the new socket opens a SO_REUSEPORT group, where the system has them, so that
    ``reuse_port_group`` can add one listener per worker process on its port (``rollwire.app.cli.workers``).
    """
    if fd is not None:
        try:
            sock = socket.socket(fileno=fd)  # family, type and protocol read from the descriptor
        except OSError as exc:
            raise InvalidRequest(f"--fd {fd} is not an open socket: {exc.strerror or exc}", param="fd") from None
        sock.listen(backlog)  # a no-op if the parent already listens; needed if it only bound
        return sock
    if reuse_port and hasattr(socket, "SO_REUSEPORT"):
        # A plain bind first: with SO_REUSEPORT alone, a port another process of this user serves the same way
        # would be joined (its connections shared) rather than refused. It also resolves port 0.
        with _bound(socket.AF_INET, (host, port), reuse_port=False) as probe:  # never listens: nothing queued
            port = int(probe.getsockname()[1])
    sock = _bound(socket.AF_INET, (host, port), reuse_port)
    sock.listen(backlog)
    return sock


def _bound(family: int, address: Any, reuse_port: bool) -> socket.socket:
    # IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without it every
    # keep-alive response waits ~40 ms on delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            with contextlib.suppress(AttributeError, OSError):  # none here: a plain socket (``reuses_port`` says)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise Conflict(f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}") from None
    return sock


def reuses_port(sock: socket.socket) -> bool:
    """Whether ``sock`` is in a SO_REUSEPORT group (an inherited ``--fd`` socket may not be)."""
    try:
        return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT))
    except (AttributeError, OSError):
        return False


def reuse_port_group(sock: socket.socket, backlog: int = 2048) -> Callable[[], socket.socket] | None:
    """What makes another listening socket on ``sock``'s address, in its SO_REUSEPORT group: the kernel spreads
    new connections over the group's sockets by a hash of their addresses. None where ``sock`` is in none. It
    needs only the address, so it works on once ``sock`` is closed."""
    if not reuses_port(sock):
        return None
    family, address = sock.family, sock.getsockname()

    def another() -> socket.socket:
        new = _bound(family, address, reuse_port=True)
        new.listen(backlog)
        return new

    return another


def _sockets(app: Any, sock: socket.socket, extra: Mapping[str, socket.socket] | None) -> list[socket.socket]:
    """Every socket ``app`` is served on, each bound to its listener; a ``Listeners`` gets one per listener."""
    extra = dict(extra or {})
    if not isinstance(app, Listeners):
        if extra:
            raise ValueError(f"only a Listeners app has other listeners than its main one (given {', '.join(extra)})")
        return [sock]
    missing = sorted(set(app.apps) - {Listeners.MAIN} - set(extra))
    if missing:
        raise ValueError(f"no socket for listener(s) {', '.join(missing)}")
    app.bind(Listeners.MAIN, sock)
    for name, other in extra.items():
        app.bind(name, other)
    return [sock, *extra.values()]


YOUNG_COLLECTION_EVERY = 50_000
"""Container allocations between two young-generation collections (CPython's default: 700). A collection walks
every young object still alive, and calls in flight hold long lists of token ids: at 256 concurrent calls the
default thresholds spent ~14% of the proxy's CPU collecting (with the start-up heap already frozen); with
50,000, 2–3%, at the price of one pause of up to ~30 ms every few thousand calls (``bench/proxy.py``)."""


def settle_heap() -> None:
    """Take what start-up built out of the garbage collector's reach, once the process is about to serve.

    CPython's full collections walk every tracked object. A serving process holds ~280k from start-up alone
    (torch, transformers, the tokenizer), so each full collection took ~250 ms, and under load they came every
    few hundred requests: a third of the proxy's CPU at 64 concurrent calls (``bench/proxy.py``). Frozen
    objects are never walked again; what requests allocate is collected as before, young objects less often
    (``YOUNG_COLLECTION_EVERY``). vLLM's API server freezes its start-up heap the same way.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])


UVICORN_OPTIONS: dict[str, Any] = {"log_config": None, "proxy_headers": False, "access_log": False}
"""What every served app shares. No logging config of uvicorn's own (the CLI configures logging). No
``X-Forwarded-*`` rewriting of the client address: no service reads it, and the middleware was ~1% of a
proxied call (py-spy). No access log: its line holds the request path, and a rollout's path holds its token
(``rollwire.logging`` kept it at WARNING, so it never printed, yet uvicorn formatted its fields per response)."""


def uvicorn_config(app: Any, **options: Any) -> Any:
    """uvicorn's ``Config`` for ``app`` as every service is served: ``UVICORN_OPTIONS``, and each whole answer in
    one write (``rollwire.app.http_writes``)."""
    import uvicorn

    from rollwire.app.http_writes import one_write_protocol

    return uvicorn.Config(app, http=one_write_protocol(), **UVICORN_OPTIONS, **options)


EXIT_WITH_PARENT = "ROLLWIRE_EXIT_WITH_PARENT"
"""The pid of the process a part was started by, set in its environment by ``LocalStack`` (and by the proxy's
worker master for its workers): the part stops serving once that process is no longer its parent, so a stack
whose owner was killed (SIGKILL: no clean-up ran) does not run on as orphans."""
PARENT_CHECK_S = 1.0


def when_orphaned(stop: Callable[[], None]) -> None:
    """Under ``EXIT_WITH_PARENT``, call ``stop`` once this process's parent is not the process named there (it
    died and this one was handed to another, maybe before it started): a watching thread."""
    owner = os.environ.get(EXIT_WITH_PARENT, "")
    if not owner.isdigit():
        return

    def watch() -> None:
        while os.getppid() == int(owner):
            time.sleep(PARENT_CHECK_S)
        stop()

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def serve(
    app: Any, sock: socket.socket, log_level: str = "warning", lifespan: str = "on",
    extra: Mapping[str, socket.socket] | None = None,
) -> int:  # fmt: skip
    """Serve ``app`` with uvicorn on ``sock`` until a signal stops it; 0 if it started, 1 if not.

    A ``Listeners`` app serves its other listeners on ``extra`` (listener name -> socket), one server for all.
    The heap is settled (``settle_heap``) once the app's start-up has run, before the first request. The soft
    open-files limit is raised to the hard one first (``rollwire.app.open_files``): a connection is a descriptor.
    A part of a local stack stops with the process that started it (``EXIT_WITH_PARENT``).
    """
    import uvicorn

    from rollwire.app.open_files import raise_open_files_limit

    raise_open_files_limit()
    sockets = _sockets(app, sock, extra)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                settle_heap()

    server = _Server(uvicorn_config(app, log_level=log_level, lifespan=lifespan))
    when_orphaned(lambda: setattr(server, "should_exit", True))
    server.run(sockets=sockets)
    return 0 if server.started else 1


class ServerThread:
    """``with ServerThread(app) as server: server.url`` serves ``app`` on 127.0.0.1, an ephemeral port by default.

    A ``Listeners`` app gets a socket per listener, on the port ``ports`` names (ephemeral by default):
    ``server.urls["admin"]``.
    """

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
        ports: Mapping[str, int] | None = None,
    ) -> None:  # fmt: skip
        import uvicorn

        self._sock = listening_socket(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        others = [name for name in app.apps if name != Listeners.MAIN] if isinstance(app, Listeners) else []
        self._extra: dict[str, socket.socket] = {}
        try:
            for name in others:
                self._extra[name] = listening_socket(host, (ports or {}).get(name, 0))
            self._sockets = _sockets(app, self._sock, self._extra)
        except BaseException:
            for sock in (self._sock, *self._extra.values()):
                sock.close()
            raise
        self.urls = {Listeners.MAIN: self.url} | {
            name: f"http://{host}:{sock.getsockname()[1]}" for name, sock in self._extra.items()
        }
        """Each listener's base URL (``main`` is ``url``)."""
        config = uvicorn_config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=f"uvicorn:{self.port}", daemon=True)
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _serve(self) -> None:
        try:
            self._server.run(sockets=self._sockets)
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def start(self, timeout: float = 60.0) -> ServerThread:
        self._thread.start()
        waited = 0.0
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"server on port {self.port} failed to start") from self._error
            self._thread.join(0.02)
            waited += 0.02
            if waited > timeout:
                raise TimeoutError(f"server on port {self.port} did not start within {timeout}s")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = [
    "EXIT_WITH_PARENT", "YOUNG_COLLECTION_EVERY", "ServerThread", "listening_socket", "reuse_port_group", "reuses_port",
    "serve", "settle_heap", "uvicorn_config", "when_orphaned",
]  # fmt: skip
