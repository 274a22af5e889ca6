"""Short store reads from the event loop: run in place on SQLite, on a worker thread on other databases.

On SQLite in WAL mode a reader never waits for the writer, and a point read (an indexed lookup, a count over
one rollout's rows) costs less than the hop to a worker thread and back, which also wakes the event loop from
another thread (measured with ``bench/proxy.py``: three such hops were ~10% of a new rollout's first call).
On a network database every read is a round trip, so it leaves the loop. Reads that can grow without bound
(a rollout's whole history) always take the thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread
from sqlalchemy.engine import Engine

T = TypeVar("T")


def reads_in_place(engine: Engine) -> bool:
    """Whether point reads of ``engine`` run on the calling thread (SQLite) rather than a worker thread."""
    return engine.dialect.name == "sqlite"


async def point_read(engine: Engine, read: Callable[..., T], *args: object) -> T:
    """``read(*args)``: in place on SQLite, else on a worker thread (see the module's docstring)."""
    if reads_in_place(engine):
        return read(*args)
    return await anyio.to_thread.run_sync(read, *args)


__all__ = ["point_read", "reads_in_place"]
