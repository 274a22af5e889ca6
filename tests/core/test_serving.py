"""Servers take a socket their parent bound (``--fd``), so a stack's parts never race for their ports, and a port
or descriptor that cannot be served on is one readable line, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollwire.app import stack as stack_module
from rollwire.app.serving import YOUNG_COLLECTION_EVERY, ServerThread, _sockets, listening_socket
from rollwire.app.stack import LocalStack
from rollwire.errors import Conflict, InvalidRequest
from rollwire.listeners import Listeners
from rollwire.settings import Settings


def test_a_taken_port_is_a_conflict_that_names_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(Conflict, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            listening_socket("127.0.0.1", port)


def test_an_inherited_descriptor_is_served_as_is() -> None:
    with listening_socket("127.0.0.1", 0) as parent, listening_socket("", 0, fd=os.dup(parent.fileno())) as child:
        assert child.getsockname() == parent.getsockname()
        assert child.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY only then
    with pytest.raises(InvalidRequest, match="--fd 987 is not an open socket"):
        listening_socket("127.0.0.1", 0, fd=987)


def test_a_stacks_parts_get_distinct_ports_and_nothing_leaks_when_one_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = LocalStack(Settings(home=tmp_path))
    socks = stack._bind_parts()
    try:
        ports = {part: sock.getsockname()[1] for part, sock in socks.items()}
        assert len(set(ports.values())) == len(LocalStack.PARTS)  # held together: never the same number twice
    finally:
        for sock in socks.values():
            sock.close()
    bound: list[socket.socket] = []

    def recording(host: str, port: int, fd: int | None = None) -> socket.socket:
        bound.append(listening_socket(host, port, fd))
        return bound[-1]

    monkeypatch.setattr(stack_module, "listening_socket", recording)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # an upstream: no tiny model to build before the ports are bound
        stack = LocalStack(
            Settings(home=tmp_path), upstream="http://127.0.0.1:9", ports={"proxy": taken.getsockname()[1]}
        )
        with pytest.raises(Conflict, match="cannot listen on"):
            stack.start()
    assert len(bound) == LocalStack.PARTS.index("proxy")  # the parts before the proxy were bound...
    assert all(sock.fileno() == -1 for sock in bound)  # ...and closed again
    assert not stack._children


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--fd", "987"], "rollwire mcp: --fd 987 is not an open socket"),
        (["--port", "{taken}"], "Address already in use"),
    ],
)
def test_the_cli_says_why_it_cannot_serve(flags: list[str], message: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        argv = [f.format(taken=taken.getsockname()[1]) for f in flags]
        env = {**os.environ, "ROLLWIRE_HOME": str(tmp_path), "HOME": str(tmp_path),
               "ROLLWIRE_MCP__ENV_SECRET": "serving-test-env-secret"}  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "rollwire.app.cli", "mcp", "serve", "all", *argv],
                              check=False, capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


_SERVED_APP = """
import contextlib, gc, socket, sys
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from rollwire.app.serving import serve

built = {}

@contextlib.asynccontextmanager
async def lifespan(app):
    built["at_start_up"] = [object() for _ in range(3)]  # what a real start-up builds: kept for the process
    yield

async def heap(request):
    tracked = {id(o) for o in gc.get_objects()}  # the collector's generations, not the frozen objects
    now = [object()]
    return JSONResponse({"frozen": gc.get_freeze_count(), "threshold": list(gc.get_threshold()),
                         "start_up_walked": id(built["at_start_up"]) in tracked,
                         "request_walked": id(now) in {id(o) for o in gc.get_objects()}})

sys.exit(serve(Starlette(routes=[Route("/heap", heap)], lifespan=lifespan), socket.socket(fileno=int(sys.argv[1]))))
"""


def test_a_served_process_freezes_its_start_up_heap_before_the_first_request(tmp_path: Path) -> None:
    """Full collections walked ~280k start-up objects each (~250 ms, a third of the proxy's CPU under load)."""
    with listening_socket("127.0.0.1", 0) as sock:
        env = {**os.environ, "HOME": str(tmp_path)}
        server = subprocess.Popen([sys.executable, "-c", _SERVED_APP, str(sock.fileno())],
                                  pass_fds=[sock.fileno()], env=env)  # fmt: skip
        try:
            # the parent holds the bound socket: the request waits in its backlog until the server accepts
            heap = httpx.get(f"http://127.0.0.1:{sock.getsockname()[1]}/heap", timeout=60).json()
        finally:
            server.terminate()
            server.wait(30)
    assert heap["frozen"] > 1000  # the imports and the start-up, moved out of the collector's generations
    assert heap["start_up_walked"] is False
    assert heap["request_walked"] is True  # what requests allocate is collected as before...
    assert heap["threshold"][0] == YOUNG_COLLECTION_EVERY  # ...young objects less often


def _named(name: str, started: list[str]) -> Any:
    """A bare ASGI app that answers every request with its ``name``, and notes in ``started`` that its lifespan ran."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            started.append(name)
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": name.encode()})

    return app


def test_listeners_answer_each_socket_with_its_own_app_and_run_one_lifespan() -> None:
    """The proxy's rollout and admin route tables on two sockets of one server: a connection gets the app of the
    socket it came in on, whatever its Host header says, and a socket nobody bound falls to the main app."""
    started: list[str] = []
    app = Listeners(_named("main", started), admin=_named("admin", started))
    with ServerThread(app) as server:
        assert set(server.urls) == {"main", "admin"} and server.urls["main"] == server.url
        admin_port = int(server.urls["admin"].rsplit(":", 1)[1])
        assert app.ports == {"main": server.port, "admin": admin_port}
        assert httpx.get(server.url, timeout=10).text == "main"
        assert httpx.get(server.urls["admin"], timeout=10).text == "admin"
        # the Host header is the client's to write; the listener is the socket's
        assert httpx.get(server.url, headers={"Host": f"127.0.0.1:{admin_port}"}, timeout=10).text == "main"
    assert started == ["main"]  # one lifespan: the main app's
    assert app.listener({"type": "http", "server": None}) == "main"
    assert app.listener({"type": "http", "server": ("127.0.0.1", 1)}) == "main"
    with pytest.raises(ValueError, match="no socket for listener"), listening_socket("127.0.0.1", 0) as sock:
        _sockets(Listeners(_named("main", []), admin=_named("admin", [])), sock, None)
