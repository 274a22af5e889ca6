"""``rollwire proxy --workers N``: N forked processes serving one listening socket, and a parent that keeps them.

The socket is bound (and listening) before the fork, so the kernel hands each connection to whichever worker
accepts it first; a rollout's calls may land on any worker, which the proxy keeps exact through the store
(``rollwire.proxy.splice.priors``). Forking (not spawning) shares the imported modules and the built app with the
workers; each worker then runs its own lifespan (store connections, tokenizer, upstream pool).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

EARLY_EXIT_S = 10.0
"""A worker that fails this soon after it started stops the proxy: a start-up error would only repeat."""


def _spawn(serve: Callable[[], int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        code = 1
        try:
            code = serve()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def run_workers(serve: Callable[[], int], workers: int) -> int:
    """Run ``serve`` in ``workers`` forked processes (in this one when 1); restart one that dies later on.
    SIGTERM/SIGINT stop them all; returns the exit code."""
    if workers <= 1:
        return serve()
    started: dict[int, float] = {}
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for pid in started:
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for _ in range(workers):
        started[_spawn(serve)] = time.monotonic()
    code = 0
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
        started[_spawn(serve)] = time.monotonic()
    return code


__all__ = ["run_workers"]
