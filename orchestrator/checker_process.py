"""Run a checker in a child process with a wall-clock and a memory limit: the state it reads is the adversary's.

A rollout's final state is whatever its policy left there, and a checker reading it may loop or allocate
without end; in the scheduler's own process that leaves the rollout in ``scoring`` for ever (or takes the
orchestrator down). ``run_limited`` calls a function in a child with ``RLIMIT_AS`` set and kills it at the
deadline, awaiting its answer on a pipe from the event loop without holding a thread.

Children come from a ``forkserver`` that has imported the modules named in ``preload`` once, so a call costs a
fork (a few ms), not an interpreter start; the orchestrator's own threads are never forked. The memory limit
counts from the child's size at its start (the interpreter and the preloaded modules), so it means the same
whatever those weigh. A limit hit raises ``CheckerLimit``: the rollout's state made the checker exceed it, so
it is the policy's failure; so is a child killed by SIGKILL without an answer (the kernel's OOM killer). An
exception the function raises is re-raised as is, and a child that died otherwise raises ``RuntimeError``
(a checker's bug either way).
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")
_context: ForkServerContext | None = None


class CheckerLimit(Exception):
    """A checker ran past its time limit or its memory limit; ``kind`` is ``time`` or ``memory``."""

    def __init__(self, kind: Literal["time", "memory"], message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _forkserver(preload: Sequence[str]) -> ForkServerContext:
    """The process's forkserver context; the modules of the first call are the ones it preloads."""
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(preload))
        _context = context
    return _context


def _child(conn: Connection, memory_bytes: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """In the child: cap the address space above what is mapped now, call ``fn``, send how it went."""
    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (mapped + memory_bytes, mapped + memory_bytes))
    try:
        message: tuple[str, Any] = ("ok", fn(*args))
    except MemoryError:
        message = ("memory", None)
    except Exception as exc:  # sent to the parent, which re-raises it
        message = ("raised", exc)
    try:
        conn.send(message)
    except Exception:  # an exception that does not pickle: its text still tells the bug
        conn.send(("raised", RuntimeError("".join(traceback.format_exception_only(message[1])).strip())))
    finally:
        conn.close()


async def run_limited(
    fn: Callable[..., T], *args: Any, timeout_s: float, memory_bytes: int, preload: Sequence[str] = ()
) -> T:
    """``fn(*args)`` in a limited child process (``fn``, its arguments and result must pickle)."""
    context = _forkserver(preload)
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sender, memory_bytes, fn, args), daemon=True)
    exitcode: int | None = None
    try:
        await anyio.to_thread.run_sync(child.start)  # the first start launches the forkserver: not on the loop
        sender.close()
        with anyio.move_on_after(timeout_s) as waited:
            await anyio.wait_readable(receiver.fileno())
        if waited.cancelled_caught:
            raise CheckerLimit("time", f"the checker ran past its time limit of {timeout_s:g} s")
        try:
            kind, value = await anyio.to_thread.run_sync(receiver.recv)
        except EOFError:  # it ended without an answer
            exitcode = await anyio.to_thread.run_sync(_reap, child)
            kind, value = ("memory", None) if exitcode == -signal.SIGKILL else ("died", None)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_reap, child)
        receiver.close()
        sender.close()
    if kind == "memory":
        raise CheckerLimit("memory", f"the checker ran past its memory limit of {memory_bytes >> 20} MiB")
    if kind == "died":
        raise RuntimeError(f"the checker process ended without an answer (exit code {exitcode})")
    if kind == "raised":
        raise value
    return value


def _reap(child: BaseProcess) -> int | None:
    """Kill the child if it still runs, wait for it and release it; its exit code (None: it never started, or
    was released already)."""
    try:
        if child.pid is None:
            return None
        if child.exitcode is None:
            child.kill()
        child.join()
        code = child.exitcode
        child.close()
        return code
    except ValueError:  # closed already
        return None


__all__ = ["CheckerLimit", "run_limited"]
