"""Servers take a socket their parent bound (``--fd``), so a stack's parts never race for their ports, and a port
or descriptor that cannot be served on is one readable line, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rollwire import stack as stack_module
from rollwire.errors import Conflict, InvalidRequest
from rollwire.serving import listening_socket
from rollwire.settings import Settings
from rollwire.stack import LocalStack


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
        done = subprocess.run([sys.executable, "-m", "rollwire.cli", "mcp", "serve", "all", *argv],
                              check=False, capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
