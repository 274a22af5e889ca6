"""Waiting on state another process or thread changes where there is no event to wait on from outside (a store
row, a gauge, the process list, a cluster's API): read it again until it holds, with a deadline that fails the
test and says what it waited for. One helper, so every such wait is bounded and names what it waited on."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


def wait_until(
    read: Callable[[], T], what: str, *, ok: Callable[[T], Any] = bool, timeout_s: float = 30.0, every_s: float = 0.05
) -> T:
    """What ``read()`` returns once ``ok`` holds for it (by default: once it is truthy); an AssertionError naming
    ``what`` and the last value read once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not ok(found := read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last read: {found!r:.200})")
        time.sleep(every_s)
    return found


async def wait_until_async(
    read: Callable[[], T | Awaitable[T]], what: str, *, ok: Callable[[T], Any] = bool, timeout_s: float = 30.0,
    every_s: float = 0.05,
) -> T:  # fmt: skip
    """``wait_until`` for a test that runs on an event loop: ``read`` may be a coroutine function, and the loop
    runs other tasks between reads."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = read()
        value: T = await found if isinstance(found, Awaitable) else found
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last read: {value!r:.200})")
        await anyio.sleep(every_s)


__all__ = ["wait_until", "wait_until_async"]
