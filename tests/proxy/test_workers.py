"""``rollwire proxy --workers 2`` for real: the kernel spreads new connections over both workers (each accepts on
a socket of its own in one SO_REUSEPORT group), and a killed worker is replaced while the port keeps answering.

Which worker accepted a connection is read from /proc (the server end's socket inode, in a worker's fds), so
these tests run on Linux only."""

from __future__ import annotations

import http.client
import math
import os
import select
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from connections import accepted_by

from rollwire.app.cli.workers import EARLY_EXIT_S
from rollwire.app.serving import listening_socket, reuse_port_group, reuses_port
from rollwire.errors import Conflict
from tests.polling import wait_until
from tests.proxy.cli_workers import CliWorkers, cli_workers


def _linux_reuse_port() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    with listening_socket("127.0.0.1", 0, reuse_port=True) as sock:
        return reuses_port(sock)


pytestmark = pytest.mark.skipif(
    not _linux_reuse_port(), reason="reads connections' owners from /proc and needs SO_REUSEPORT (Linux)"
)

CONNECTIONS = 600
"""Enough that a fair spread stays within ``MAX_SHARE``: the kernel picks a worker by a hash of each connection's
addresses, so one worker's count is binomial. Past 60% of 40 connections ~15% of the time; of 600, ~1e-6."""
MAX_SHARE = 0.6


@pytest.fixture(scope="module")
def workers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliWorkers]:
    """One ``rollwire proxy --workers 2`` for the module, handed a listening socket that opens a SO_REUSEPORT group;
    its upstream answers nothing, and /health needs none."""
    store = f"sqlite:///{tmp_path_factory.mktemp('workers') / 'store.db'}"
    with cli_workers("http://127.0.0.1:9", store, tiny_model_dir, reuse_port=True) as workers:
        proc = workers.proc
        wait_until(lambda: proc.poll() is not None or len(workers.pids()) == 2, "two workers (or the proxy's exit)")
        assert proc.poll() is None, f"proxy exited with {proc.returncode} as its workers started"
        yield workers
    assert workers.proc.returncode == 0, workers.output
    assert "Traceback" not in workers.output and "SO_REUSEPORT" not in workers.output, workers.output


def _health(port: int) -> http.client.HTTPConnection:
    """A new connection on which /health has answered (so a worker has accepted it), left open."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/health")
    response = conn.getresponse()
    response.read()
    assert response.status == 200
    return conn


def served_by(port: int, pids: list[int], count: int) -> list[int]:
    """Which of ``pids`` accepted each of ``count`` new connections to ``port`` (opened 100 at a time)."""
    served: list[int] = []
    while len(served) < count:
        conns = [_health(port) for _ in range(min(100, count - len(served)))]
        try:
            owners = accepted_by(port, pids)
            served += [owners[conn.sock.getsockname()[1]] for conn in conns]
        finally:
            for conn in conns:
                conn.close()
    return served


@pytest.mark.parametrize("other_reuses_port", [False, True])
def test_a_taken_port_is_refused_not_joined(other_reuses_port: bool) -> None:
    """SO_REUSEPORT alone would join another process's group on the port (and take half its connections)."""
    with listening_socket("127.0.0.1", 0, reuse_port=other_reuses_port) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(Conflict, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            listening_socket("127.0.0.1", port, reuse_port=True)


def test_the_group_makes_listeners_on_its_port_each_taking_connections() -> None:
    with listening_socket("127.0.0.1", 0, reuse_port=True) as first:
        another = reuse_port_group(first)
        assert another is not None
        with another() as second:
            assert second.getsockname() == first.getsockname() and second.proto == socket.IPPROTO_TCP
            reached = set()
            for _ in range(40):  # all 40 on one socket: 1 time in 1e12
                with socket.create_connection(first.getsockname()[:2]):
                    readable, _, _ = select.select([first, second], [], [], 10)
                    reached.add(readable[0].fileno())
                    readable[0].accept()[0].close()
            assert reached == {first.fileno(), second.fileno()}
    with listening_socket("127.0.0.1", 0) as plain:
        assert reuse_port_group(plain) is None


def test_connections_spread_over_both_workers(workers: CliWorkers) -> None:
    pids = workers.pids()
    assert len(pids) == 2
    counts = Counter(served_by(workers.port, pids, CONNECTIONS))
    assert set(counts) == set(pids), counts
    assert max(counts.values()) <= math.floor(MAX_SHARE * CONNECTIONS), counts


def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(workers: CliWorkers) -> None:
    # one killed sooner stops the proxy (a start-up failure would only repeat); forked just after ``started``
    wait_until(
        lambda: time.monotonic() - workers.started, "workers past their start", ok=lambda s: s > EARLY_EXIT_S + 1,
        every_s=0.5,
    )  # fmt: skip
    killed, kept = workers.pids()
    os.kill(killed, signal.SIGKILL)
    # (a connection that reached its socket as it died is reset, as with any server that dies)
    wait_until(lambda: killed not in workers.pids(), f"worker {killed} reaped")
    for _ in range(20):  # its socket went with it: no connection waits on one that nobody accepts on
        _health(workers.port).close()
    now = wait_until(workers.pids, "a replacement worker", ok=lambda pids: len(pids) == 2 and killed not in pids)
    (new,) = set(now) - {kept}
    # the new worker's own socket joined the group: new connections reach it (all 40 miss it 1 time in 1e12)
    assert new in served_by(workers.port, now, 40)
    assert workers.proc.poll() is None
