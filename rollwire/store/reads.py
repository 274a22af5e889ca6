"""Short store reads from the event loop: run in place on SQLite, on a worker thread on other databases.

On SQLite in WAL mode a reader never waits for the writer, and a point read (an indexed lookup, a count over
one rollout's rows) costs less than the hop to a worker thread and back, which also wakes the event loop from
another thread (measured with ``bench/proxy.py``: three such hops were ~10% of a new rollout's first call).
On a network database every read is a round trip, so it leaves the loop. Reads that can grow without bound
(a rollout's whole history) always take the thread.

A point read in place can also skip the connection pool: the store writer keeps a connection on the event loop
(``RowWriter.read_inline``), and a statement run there costs ~5 us where a pooled checkout and return adds
~20 us (``point_query``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    from rollwire.store.direct import DirectQuery

T = TypeVar("T")
RunQuery = Callable[..., list[tuple[Any, ...]]]
"""``(query, **params) -> rows``: how a point read runs its ``DirectQuery``."""


def reads_in_place(engine: Engine) -> bool:
    """Whether point reads of ``engine`` run on the calling thread (SQLite) rather than a worker thread."""
    return engine.dialect.name == "sqlite"


async def point_read(engine: Engine, read: Callable[..., T], *args: object) -> T:
    """``read(*args)``: in place on SQLite, else on a worker thread (see the module's docstring)."""
    if reads_in_place(engine):
        return read(*args)
    return await anyio.to_thread.run_sync(read, *args)


def point_query(engine: Engine, read_inline: RunQuery | None = None) -> RunQuery:
    """How point reads of ``engine`` run their statement: on the event loop's own connection (``read_inline``)
    where reads run in place and one is given, else on a pooled connection (a worker thread's reads always)."""
    if read_inline is not None and reads_in_place(engine):
        return read_inline

    def pooled(query: DirectQuery, **params: Any) -> list[tuple[Any, ...]]:
        return query.run(engine, **params)

    return pooled


__all__ = ["RunQuery", "point_query", "point_read", "reads_in_place"]
