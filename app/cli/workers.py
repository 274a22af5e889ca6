"""``rollwire proxy --workers N``: N forked processes serving one port, and a parent that keeps them.

Each worker accepts on a listening socket of its own, all of them in one SO_REUSEPORT group on the port: the
kernel spreads new connections over the group by a hash of their addresses (about evenly: of 64 connections, two
workers' busiest mostly holds 50-60%). On one shared socket, kept-alive connections pile onto whichever worker
accepts first, so two workers serve barely more than one. A rollout's calls may land on any worker, which the
proxy keeps exact through the store (``rollwire.proxy.splice.priors``). Forking (not spawning) shares the imported
modules and the built app with the workers; each worker then runs its own lifespan (store connections, tokenizer,
upstream pool).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType

from rollwire.app.serving import EXIT_WITH_PARENT, when_orphaned
from rollwire.errors import Conflict

EARLY_EXIT_S = 10.0
"""A worker that fails this soon after it started stops the proxy: a start-up error would only repeat."""
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _spawn(serve: Callable[[], int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        code = 1
        try:
            code = serve()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def run_workers(serve: Callable[[socket.socket], int], workers: int, sock: socket.socket) -> int:
    """Run ``serve`` on a listening socket in ``workers`` forked processes (on ``sock`` in this one when 1);
    restart one that dies later on. SIGTERM/SIGINT stop them all; returns the exit code.

    Where ``sock`` is in a SO_REUSEPORT group (``listening_socket(reuse_port=True)``), the first worker gets
    ``sock`` and every other, or restarted, one a new socket in the group; each is closed here once forked: the
    group would go on handing connections to a socket kept here, and none would accept them. Elsewhere every
    worker accepts on ``sock``."""
    if workers <= 1:
        return serve(sock)
    from rollwire.app.serving import reuse_port_group

    another = reuse_port_group(sock)
    if another is None:
        print(
            "rollwire proxy: no SO_REUSEPORT on the listening socket (an inherited --fd one, or none on this "
            "system): the workers share it, and connections may land unevenly",
            file=sys.stderr,
            flush=True,
        )
    started: dict[int, float] = {}
    stopping = False
    code = 0

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for pid in started:
            os.kill(pid, signal.SIGTERM)

    def spawn(listener: socket.socket | None = None) -> None:
        """Start a worker (on ``listener``, else a new socket of the group, else ``sock``) unless stopping; stop
        if it could not listen."""
        nonlocal code
        if stopping:
            return
        try:
            own = listener if listener is not None else another() if another is not None else sock
        except Conflict as exc:
            print(f"rollwire proxy: a worker could not listen: {exc}; stopping", file=sys.stderr, flush=True)
            stop(signal.SIGTERM, None)
            code = 1
            return
        # a stop signal waits until the new worker is in ``started``, so that ``stop`` reaches it too
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            started[_spawn(lambda: serve(own))] = time.monotonic()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if another is not None:
            own.close()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    when_orphaned(lambda: os.kill(os.getpid(), signal.SIGTERM))  # a local stack's owner was killed: stop too
    if EXIT_WITH_PARENT in os.environ:
        os.environ[EXIT_WITH_PARENT] = str(os.getpid())  # the workers' parent is this process
    spawn(sock)
    for _ in range(workers - 1):
        spawn()
    while started:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        began = started.pop(pid, None)
        if began is None:
            continue
        rc = os.waitstatus_to_exitcode(status)
        if stopping:
            code = code or (max(0, rc))
            continue
        if time.monotonic() - began < EARLY_EXIT_S:
            print(f"rollwire proxy: worker {pid} exited with {rc} at start; stopping", file=sys.stderr, flush=True)
            stop(signal.SIGTERM, None)
            code = rc if rc > 0 else 1
            continue
        print(f"rollwire proxy: worker {pid} exited with {rc}; starting another", file=sys.stderr, flush=True)
        spawn()
    return code


__all__ = ["run_workers"]
