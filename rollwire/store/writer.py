"""Durable row inserts with as few thread hops as possible: inline when that cannot stall, else one writer
thread per table with group commit.

A call's rows must be committed before its answer's last byte leaves, so the insert sits on every request's
critical path. An insert compiled once and run on the driver's cursor (``direct``), on a long-lived
connection, costs a fraction of an ORM flush. On SQLite an uncontended commit (WAL, synchronous=NORMAL: no
fsync) takes ~0.1 ms, less than a hop to a thread and back, which on a busy machine costs far more (measured:
2.6 ms await vs 0.5 ms commit under load); so the event loop commits itself, on a connection that never
waits for the database lock. If another writer holds the lock (the MCP gateway writes to the same file), or
a threaded commit is already running, the rows go to the writer thread instead, whose batches share one
commit among all callers waiting. Other databases (a network round trip) always use the thread. Each caller
gets its ids only once its rows are committed.

Under concurrent load the calls that finish together record in the same pass of the event loop (measured with
``bench/proxy.py``: 7-8 a pass at 16 concurrent calls, ~30 at 64). Once a pass has seen more than one insert,
the next passes' rows are gathered and written at the start of the following pass, back to back under one
commit. That saves the commits, and the statements run with SQLite's pages still in the CPU's caches: run one
at a time between other work, each cost several times as much. A lone caller (one insert per pass) still
commits at once and waits for no pass.

A ``guard`` runs in each caller's transaction before its rows go in (the rollout still takes records: see
``rollwire.rollouts.guard_active``); what it raises fails only that caller, and nothing of it is written. Given
``only_if``, the same check is a condition of the insert statement itself (``store.direct.Condition``: one
statement per row, not two), and the guard runs only for a row it kept out, to say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from sqlalchemy import Table
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from rollwire.errors import RollwireError, StoreError
from rollwire.store.direct import Condition, DirectInsert, DirectQuery

T = TypeVar("T")
Guard = Callable[[Connection, str], None]
"""(connection in the insert's transaction, rollout id of the rows) -> raises to refuse them."""

MAX_BATCH = 256
"""Most callers' rows that share one commit."""


@dataclass(slots=True)
class _Job:
    rows: Sequence[Mapping[str, Any]]
    future: asyncio.Future[list[int]]
    loop: asyncio.AbstractEventLoop


def _lock_taken(error: BaseException) -> bool:
    """SQLite's "database is locked" / "busy": another connection holds the lock (or is recovering the file)."""
    text = str(getattr(error, "orig", None) or error)
    return "locked" in text or "busy" in text


def _settle(job: _Job, ids: list[int] | None, error: BaseException | None) -> None:
    def done() -> None:
        if job.future.done():  # the caller was cancelled; its rows are committed all the same
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(ids or [])

    try:
        job.loop.call_soon_threadsafe(done)
    except RuntimeError:  # the caller's loop is closed: nobody is waiting
        pass


class RowWriter:
    """``await writer.insert(rows)`` -> the new primary keys, committed. ``close()`` drains and stops the thread."""

    def __init__(
        self,
        engine: Engine,
        table: Table,
        inline: bool | None = None,
        guard: Guard | None = None,
        only_if: Condition | None = None,
    ) -> None:
        self._engine = engine
        self._guard = guard
        self._checked_by_insert = only_if is not None
        self._insert = DirectInsert(table, engine.dialect, only_if)
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._inline = engine.dialect.name == "sqlite" if inline is None else inline
        self._driver_commits = engine.dialect.name == "sqlite"
        self._loop_connection: Connection | None = None
        self._threaded = 0
        """Jobs handed to the thread and not yet settled (touched on the event loop only)."""
        self._pass: list[_Job] | None = None
        """Rows gathered in this pass of the event loop, written together at the start of the next."""
        self._in_pass = 0
        self._pass_loop: asyncio.AbstractEventLoop | None = None
        self._crowded = False
        """The last pass with inserts had more than one: gather rows by pass instead of committing each."""

    async def insert(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        if self._closed:
            raise StoreError("the store writer is closed")
        loop = asyncio.get_running_loop()
        if self._inline and self._threaded == 0:
            if self._in_pass == 0 or loop is not self._pass_loop:  # the first insert of this pass
                self._in_pass, self._pass_loop = 0, loop
                loop.call_soon(self._end_pass)
            self._in_pass += 1
            if self._crowded or self._pass is not None:
                job = _Job(rows, loop.create_future(), loop)
                if self._pass is None:
                    self._pass = []
                self._pass.append(job)
                return await job.future
            ids = self._insert_inline(rows)
            if ids is not None:
                return ids
        job = _Job(rows, loop.create_future(), loop)
        self._to_thread(job)
        return await job.future

    def read_inline(self, query: DirectQuery, **params: Any) -> list[tuple[Any, ...]]:
        """``query``'s rows, read on the event loop's own connection (SQLite: a reader never waits for a writer,
        and a SELECT outside a transaction sees every commit before it). After this writer's commits the pages
        are still in that connection's cache; a connection of its own read them again from the WAL after every
        commit (~4.5 reads from the file a call, measured with strace)."""
        connection = self._loop_connection or self._open_loop_connection()
        try:
            return query.rows(connection.connection.dbapi_connection, **params)
        except query.driver_error as exc:
            if not _lock_taken(exc):
                raise query.failure(exc) from exc
        return query.run(self._engine, **params)  # the file is being recovered: wait on a pooled connection

    def close(self) -> None:
        jobs, self._pass = self._pass, None
        if jobs:  # gathered and not yet written: written now, before the thread stops
            self._write_pass(jobs)
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join(30)
        self._drop_loop_connection()

    def _to_thread(self, job: _Job) -> None:
        self._start()
        self._threaded += 1
        job.future.add_done_callback(self._settled)
        self._jobs.put(job)

    def _settled(self, _: asyncio.Future[list[int]]) -> None:
        self._threaded -= 1

    def _end_pass(self) -> None:
        """At the start of the pass after inserts: note whether they were crowded, and write what was gathered."""
        self._crowded, self._in_pass = self._in_pass > 1, 0
        jobs, self._pass = self._pass, None
        if jobs:
            self._write_pass(jobs)

    def _write_pass(self, jobs: list[_Job]) -> None:
        """One transaction for a pass's rows; if it fails, each caller's alone, as an insert of its own would."""
        try:
            connection = self._loop_connection or self._open_loop_connection()
            results = self._insert_all(connection, jobs)
        except SQLAlchemyError:
            self._drop_loop_connection()
        except Exception:  # noqa: BLE001, S110  (a guard's refusal: retried one by one below, each with its outcome)
            pass
        else:
            for job, ids in zip(jobs, results):
                if not job.future.done():  # a caller cancelled meanwhile: its rows are committed all the same
                    job.future.set_result(ids)
            return
        for job in jobs:
            try:
                inserted = self._insert_inline(job.rows)
            except Exception as exc:  # noqa: BLE001  (this caller's own error, as ``insert`` raises it)
                if not job.future.done():
                    job.future.set_exception(exc)
                continue
            if inserted is None:  # the database lock is taken: the thread waits for it
                self._to_thread(job)
            elif not job.future.done():
                job.future.set_result(inserted)

    def _insert_inline(self, rows: Sequence[Mapping[str, Any]]) -> list[int] | None:
        """Commit on the calling thread; None (nothing written) when the database lock is taken."""
        try:
            connection = self._loop_connection or self._open_loop_connection()
            return self._committed(connection, lambda: self._insert_rows(connection, rows))
        except SQLAlchemyError as exc:
            self._drop_loop_connection()
            detail = exc.orig if hasattr(exc, "orig") else exc
            if isinstance(exc, OperationalError) and _lock_taken(exc):
                return None
            raise StoreError(f"store write failed: {exc.__class__.__name__}: {detail}") from exc

    def _drop_loop_connection(self) -> None:
        """Discard (never pool) the loop's connection: others must not inherit its zero lock timeout."""
        if self._loop_connection is not None:
            with contextlib.suppress(SQLAlchemyError):
                self._loop_connection.invalidate()
                self._loop_connection.close()
        self._loop_connection = None

    def _open_loop_connection(self) -> Connection:
        connection = self._engine.connect()
        connection.exec_driver_sql("PRAGMA busy_timeout=0")  # never wait for the lock on the event loop
        connection.commit()
        self._loop_connection = connection
        return connection

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rollwire-store-writer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        connection: Connection | None = None
        try:
            while True:
                first = self._jobs.get()
                if first is None:
                    return
                batch = [first]
                stop = False
                while len(batch) < MAX_BATCH:
                    try:
                        more = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    batch.append(more)
                connection = self._commit(connection, batch)
                if stop:
                    return
        finally:
            if connection is not None:
                connection.close()

    def _commit(self, connection: Connection | None, batch: list[_Job]) -> Connection | None:
        """All jobs in one transaction; if that fails, each alone, so one bad row fails only its caller."""
        try:
            connection = connection or self._engine.connect()
            ids = self._insert_all(connection, batch)
        except Exception:  # noqa: BLE001  (retried one by one below, where each caller gets its own error)
            connection = self._reset(connection)
        else:
            for job, job_ids in zip(batch, ids):
                _settle(job, job_ids, None)
            return connection
        for job in batch:
            try:
                connection = connection or self._engine.connect()
                (job_ids,) = self._insert_all(connection, [job])
            except Exception as exc:  # noqa: BLE001  (the caller is told; the writer keeps serving the rest)
                connection = self._reset(connection)
                detail = exc.orig if hasattr(exc, "orig") else exc
                refused = exc if isinstance(exc, RollwireError) else None  # the guard's own error, as raised
                _settle(job, None, refused or StoreError(f"store write failed: {exc.__class__.__name__}: {detail}"))
            else:
                _settle(job, job_ids, None)
        return connection

    def _insert_all(self, connection: Connection, batch: list[_Job]) -> list[list[int]]:
        return self._committed(connection, lambda: [self._insert_rows(connection, job.rows) for job in batch])

    def _committed(self, connection: Connection, work: Callable[[], T]) -> T:
        """``work()`` in one transaction of ``connection``, committed; rolled back if it raises.

        On SQLite the driver opens the transaction itself at the first insert, so it is committed on the driver's
        connection, not through SQLAlchemy's transaction objects (in a loop, a call's row took ~50-60 us to insert
        and commit through them, ~35 on the driver alone; ``bench/proxy_ab.py``, with ``DirectInsert``'s row id
        from the cursor: 0.976x the CPU of a call). Where a statement went through SQLAlchemy (a guard's lookup),
        SQLAlchemy ends what it began."""
        if not self._driver_commits:
            with connection.begin():
                return work()
        driver = connection.connection.dbapi_connection
        assert driver is not None
        try:
            result = work()
        except BaseException:
            connection.rollback() if connection.in_transaction() else driver.rollback()
            raise
        try:
            connection.commit() if connection.in_transaction() else driver.commit()
        except self._insert.driver_error as exc:  # as SQLAlchemy raises it (OperationalError, ...)
            raise DBAPIError.instance("COMMIT", None, exc, self._insert.driver_error) from exc
        return result

    def _insert_rows(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        if self._guard is not None and not self._checked_by_insert:
            for rollout_id in dict.fromkeys(str(row["rollout_id"]) for row in rows):
                self._guard(connection, rollout_id)
        ids = []
        for row in rows:
            new = self._insert.insert(connection, row)
            if new is None:
                self._kept_out(connection, row)
            ids.append(new)
        return ids

    def _kept_out(self, connection: Connection, row: Mapping[str, Any]) -> NoReturn:
        """The insert's condition kept ``row`` out: the guard says why (its error fails the caller)."""
        rollout_id = str(row["rollout_id"])
        if self._guard is not None:
            self._guard(connection, rollout_id)
        raise StoreError(f"the store kept out a row of rollout {rollout_id}: the insert's condition does not hold")

    @staticmethod
    def _reset(connection: Connection | None) -> Connection | None:
        """Drop a connection a failed transaction may have left unusable; the next job opens a fresh one."""
        if connection is not None:
            with contextlib.suppress(SQLAlchemyError):
                connection.close()
        return None


__all__ = ["RowWriter"]
