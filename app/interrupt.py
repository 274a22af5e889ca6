"""Ctrl-C and `kill` stop a long command cleanly: every `finally`, shielded teardown and `with` block runs.

Two places need it. In plain (synchronous) code, SIGINT and SIGTERM raise KeyboardInterrupt in the main
thread, so a stack's context manager stops its engine, env servers, gateway and proxy (``stop_on_sigterm``).
Inside an event loop an exception raised at an arbitrary instruction is not safe: it can land in the middle
of a task's step, after which asyncio cancels every task at once and a shielded teardown (a sandbox's fork
server, a harness process group) may wait for something that will never come. So ``run_interruptible`` runs
the loop with the signals turned into cancellation of the whole run: teardown happens with the run's own
cancel scopes, then KeyboardInterrupt is raised once the loop is done (the CLI exits 130). A second signal
during that teardown falls through to the handler that was there before: pressing Ctrl-C twice still means
"now".

Cancelling a whole run at once also meets a race in anyio (4.16, asyncio backend): it waits for a raw socket
(its UNIX socket streams and listeners: the sandbox's endpoint relay) with ``loop.add_reader(sock,
future.set_result, None)``, and when the waiting task is cancelled in the same pass of the loop in which the
socket turned ready, the reader still runs, on the cancelled future. asyncio then logs an InvalidStateError
with its traceback on the way out, though nothing waits on that future any more. The run's loop drops that
one error (``_late_wakeup``) and hands every other to asyncio's own handler.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.abc

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """From now on SIGTERM, like SIGINT, raises KeyboardInterrupt in the main thread (the CLI then exits 130)."""
    for signum in SIGNALS:
        signal.signal(signum, _interrupt)


def run_interruptible(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run(func, *args)``; SIGINT or SIGTERM cancels the run, and KeyboardInterrupt follows its teardown.

    Off the main thread (where signals cannot be caught) it is plain ``anyio.run``.
    """
    if threading.current_thread() is not threading.main_thread():
        return anyio.run(func, *args)
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    interrupted: list[int] = []

    async def watch(scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(*SIGNALS) as received:
            task_status.started()
            async for signum in received:
                interrupted.append(signum)
                break
        _restore(previous)  # from here a second signal acts as it did before the run
        scope.cancel()

    async def main() -> T | None:
        asyncio.get_running_loop().set_exception_handler(_unless_late_wakeup)
        result, error = None, None
        async with anyio.create_task_group() as group:
            await group.start(watch, group.cancel_scope)
            try:
                result = await func(*args)
            except Exception as exc:  # noqa: BLE001 -- raised below, outside the group: as itself, not in a group
                error = exc
            finally:
                group.cancel_scope.cancel()
        if error is not None:
            raise error
        return result  # None when a signal cancelled the run: the caller raises below

    try:
        result = anyio.run(main)
    finally:
        _restore(previous)  # the loop's own signal handling resets the signals to the system defaults
    if interrupted:
        raise KeyboardInterrupt
    return result  # type: ignore[return-value]


def _late_wakeup(context: dict[str, Any]) -> bool:
    """Whether asyncio's error ``context`` is a ``future.set_result`` callback that ran on a future already
    cancelled: a wake-up that came too late to matter (see the module's docstring)."""
    callback = getattr(context.get("handle"), "_callback", None)
    future = getattr(callback, "__self__", None)
    return (
        isinstance(context.get("exception"), asyncio.InvalidStateError)
        and getattr(callback, "__name__", None) == "set_result"
        and isinstance(future, asyncio.Future)
        and future.cancelled()
    )


def _unless_late_wakeup(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not _late_wakeup(context):
        loop.default_exception_handler(context)


def _restore(handlers: dict[signal.Signals, Any]) -> None:
    for signum, handler in handlers.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


__all__ = ["SIGNALS", "run_interruptible", "stop_on_sigterm"]
