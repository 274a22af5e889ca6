"""RowWriter: rows are committed when insert returns; a database lock held by another process never stalls the
event loop (the rows wait on the writer thread instead); a bad row fails only its caller; rows that arrive in
one pass of a crowded loop share one commit."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from rollwire.errors import Forbidden, StoreError
from rollwire.store import ModelCall, Rollout, Run, open_engine, session_scope
from rollwire.store.direct import DirectQuery
from rollwire.store.writer import RowWriter


def _row(rollout_id: str = "ro", index: int = 0) -> dict[str, Any]:
    """A call's row with some columns left to their defaults (inserted through SQLAlchemy's execute)."""
    return {
        "rollout_id": rollout_id,
        "dialect": "chat",
        "request_json": "{}",
        "response_json": "{}",
        "prompt_ids": b"\x01\x00\x00\x00",
        "completion_ids": b"",
        "completion_logprobs": b"",
        "choice_index": index,
        "status": "complete",
        "started_ns": time.time_ns(),
        "ended_ns": time.time_ns(),
    }


def _full_row(rollout_id: str = "ro", index: int = 0) -> dict[str, Any]:
    """A call's row with every column given, as the proxy writes them (inserted on the driver's cursor)."""
    return {
        **_row(rollout_id, index), "requested_model": "m", "served_model": "m", "request_base": None, "request_head": 0,
        "request_tail": 0, "prompt_base": None, "finish_reason": "stop", "sampling": {}, "policy_version": 0,
        "segment_index": 0, "segment_break": None, "reused_prefix_len": 0, "line": "main",
        "max_tokens_requested": None, "max_tokens_granted": None, "error": None, "latency_ms": 0.0,
    }  # fmt: skip


@pytest.fixture()
def db(tmp_path: Path) -> str:
    path = tmp_path / "store.db"
    engine = open_engine(f"sqlite:///{path}")
    with session_scope(engine) as session:
        session.add(Run(id="r"))
        session.flush()
        session.add(Rollout(id="ro", run_id="r", token_hash="h"))
    engine.dispose()
    return str(path)


def _count(path: str) -> int:
    with sqlite3.connect(path) as other:  # another connection: sees only what was committed
        return int(other.execute("SELECT count(*) FROM modelcall").fetchone()[0])


def _commits(engine: Any) -> list[str]:
    """A list that grows by one at each commit on a connection of ``engine`` (as SQLite runs it: SQLAlchemy's
    commit or the driver's own)."""
    seen: list[str] = []

    def traced(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(lambda sql: seen.append(sql) if sql == "COMMIT" else None)

    event.listen(engine, "connect", traced)
    engine.dispose()  # connections pooled before are opened again, traced
    return seen


async def _crowd(writer: RowWriter, n: int = 3) -> None:
    """``n`` inserts in one pass of the loop: from the next pass on, the writer gathers rows by pass."""
    await asyncio.gather(*(writer.insert([_row(index=i)]) for i in range(n)))


ROWS = pytest.mark.parametrize("row", [_row, _full_row], ids=["some-columns", "every-column"])


@ROWS
def test_rows_are_committed_when_insert_returns(db: str, row: Any) -> None:
    engine = open_engine(f"sqlite:///{db}")
    writer = RowWriter(engine, ModelCall.__table__)  # type: ignore[attr-defined]

    async def main() -> list[int]:
        first = await writer.insert([row(), row(index=1)])
        assert _count(db) == 2
        return first + await writer.insert([row(index=2)])

    ids = asyncio.run(main())
    assert len(set(ids)) == 3 and _count(db) == 3
    with sqlite3.connect(db) as other:  # each id returned is its own row's
        found = dict(other.execute("SELECT id, choice_index FROM modelcall").fetchall())
    assert [found[i] for i in ids] == [0, 1, 2]
    writer.close()
    engine.dispose()


@pytest.mark.parametrize("crowded", [False, True], ids=["each-commits", "shared-commit"])
def test_a_held_lock_moves_rows_to_the_thread_without_stalling_the_loop(db: str, crowded: bool) -> None:
    engine = open_engine(f"sqlite:///{db}")
    writer = RowWriter(engine, ModelCall.__table__)  # type: ignore[attr-defined]
    other = sqlite3.connect(db, isolation_level=None)
    before = 3 if crowded else 0

    async def main() -> list[list[int]]:
        if crowded:  # the rows below are gathered into one commit, which finds the lock taken
            await _crowd(writer, before)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock until the loop has gone round
        inserts = [asyncio.ensure_future(writer.insert([_row(index=i)])) for i in range(20)]
        for _ in range(50):  # the loop keeps turning while every insert waits for the lock (none stalls it)
            await asyncio.sleep(0)
        assert not any(task.done() for task in inserts)  # an insert that waited on the loop would have failed
        other.execute("COMMIT")
        return list(await asyncio.gather(*inserts))

    ids = asyncio.run(main())
    assert len({i for group in ids for i in group}) == 20 and _count(db) == before + 20
    other.close()
    writer.close()
    engine.dispose()


@ROWS
@pytest.mark.parametrize("inline", [True, False])
def test_a_bad_row_fails_only_its_caller(db: str, inline: bool, row: Any) -> None:
    engine = open_engine(f"sqlite:///{db}")
    writer = RowWriter(engine, ModelCall.__table__, inline=inline)  # type: ignore[attr-defined]

    async def main() -> tuple[list[int] | BaseException, ...]:
        return await asyncio.gather(
            writer.insert([row()]), writer.insert([row("no-such-rollout")]), writer.insert([row()]),
            return_exceptions=True,
        )  # fmt: skip

    good, bad, also_good = asyncio.run(main())
    assert isinstance(bad, StoreError) and "FOREIGN KEY" in bad.message
    assert isinstance(good, list) and isinstance(also_good, list) and _count(db) == 2
    writer.close()
    engine.dispose()


@ROWS
def test_inserts_that_arrive_together_share_one_commit_and_a_lone_one_waits_for_none(db: str, row: Any) -> None:
    engine = open_engine(f"sqlite:///{db}")
    writer = RowWriter(engine, ModelCall.__table__)  # type: ignore[attr-defined]
    commits = _commits(engine)

    async def main() -> None:
        await writer.insert([row()])  # (opens the writer's connection, which commits a setting)
        before = len(commits)
        await asyncio.gather(*(writer.insert([row(index=i)]) for i in range(3)))
        assert len(commits) - before == 3  # the first crowded pass: nobody knew yet, each committed its own
        before = len(commits)
        ids = await asyncio.gather(*(writer.insert([row(index=i)]) for i in range(8)))
        assert len(commits) - before == 1 and len({i for group in ids for i in group}) == 8
        assert _count(db) == 12  # committed when the inserts returned
        gathered = asyncio.ensure_future(writer.insert([row()]))  # alone in its pass, after a crowded one
        await asyncio.sleep(0)  # one pass: its rows wait for the next
        assert not gathered.done()
        await gathered
        before = len(commits)
        lone = asyncio.ensure_future(writer.insert([row()]))  # the writer has seen a lone pass: it commits at once
        await asyncio.sleep(0)
        assert lone.done() and len(commits) - before == 1 and _count(db) == 14

    asyncio.run(main())
    writer.close()
    engine.dispose()


@ROWS
def test_in_a_shared_commit_a_bad_row_or_a_refusal_fails_only_its_caller(db: str, row: Any) -> None:
    def guard(conn: Any, rollout_id: str) -> None:
        if rollout_id == "refused":
            raise Forbidden("rollout refused is finished: nothing more is recorded for it")

    engine = open_engine(f"sqlite:///{db}")
    writer = RowWriter(engine, ModelCall.__table__, guard=guard)  # type: ignore[attr-defined]

    async def main() -> tuple[list[int] | BaseException, ...]:
        await _crowd(writer)
        return await asyncio.gather(
            writer.insert([row()]), writer.insert([row("no-such-rollout")]), writer.insert([row("refused")]),
            writer.insert([row()]), return_exceptions=True,
        )  # fmt: skip

    good, bad, refused, also_good = asyncio.run(main())
    assert isinstance(bad, StoreError) and "FOREIGN KEY" in bad.message
    assert isinstance(refused, Forbidden)
    assert isinstance(good, list) and isinstance(also_good, list) and _count(db) == 3 + 2
    writer.close()
    engine.dispose()


def test_reads_on_the_loop_connection_see_every_commit_and_never_wait(db: str) -> None:
    """``read_inline`` runs on the connection the loop writes with: it sees that writer's rows, rows another
    process committed since, and not rows another writer holds uncommitted, and the lock that writer holds
    makes it neither wait nor fail."""
    from sqlalchemy import func, select

    engine = open_engine(f"sqlite:///{db}")
    table = ModelCall.__table__  # type: ignore[attr-defined]
    writer = RowWriter(engine, table)
    count = DirectQuery(select(func.count()).select_from(table), engine.dialect)

    async def main() -> None:
        await writer.insert([_row()])
        assert writer.read_inline(count) == [(1,)]
        with sqlite3.connect(db) as other:  # another process's commit
            other.execute("INSERT INTO modelcall (rollout_id, prompt_ids, completion_ids, completion_logprobs,"
                          " dialect, request_json, response_json, choice_index, status, started_ns, ended_ns,"
                          " requested_model, served_model, policy_version, segment_index, reused_prefix_len,"
                          " line, latency_ms) SELECT rollout_id, prompt_ids, completion_ids, completion_logprobs,"
                          " dialect, request_json, response_json, choice_index, status, started_ns, ended_ns,"
                          " requested_model, served_model, policy_version, segment_index, reused_prefix_len,"
                          " line, latency_ms FROM modelcall")  # fmt: skip
        assert writer.read_inline(count) == [(2,)]
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("DELETE FROM modelcall")  # uncommitted, under the write lock
        assert writer.read_inline(count) == [(2,)]
        holder.execute("ROLLBACK")
        holder.close()

    asyncio.run(main())
    writer.close()
    engine.dispose()


def test_point_reads_take_the_loop_connection_only_where_reads_run_in_place(any_store_url: str) -> None:
    """The proxy's token and usage lookups run on the writer's loop connection on SQLite (no pool checkout);
    on Postgres they run on worker threads, which must never touch it. A failed read is a StoreError either way."""
    from sqlalchemy import func, select, text

    from rollwire.store.reads import point_query

    engine = open_engine(any_store_url)
    table = ModelCall.__table__  # type: ignore[attr-defined]
    writer = RowWriter(engine, table)
    used: list[str] = []

    def inline(query: DirectQuery, **params: Any) -> list[tuple[Any, ...]]:
        used.append("loop")
        return writer.read_inline(query, **params)

    count = DirectQuery(select(func.count()).select_from(table), engine.dialect)
    assert point_query(engine, inline)(count) == [(0,)]
    assert used == (["loop"] if engine.dialect.name == "sqlite" else [])
    broken = DirectQuery(select(text("nothing")).select_from(text("no_such_table")), engine.dialect)
    with pytest.raises(StoreError, match="store read failed"):
        point_query(engine, inline)(broken)
    writer.close()
    engine.dispose()


def test_a_steady_writer_keeps_the_log_bounded(db: str) -> None:
    """Back-to-back harness-sized inserts (36 MB): the log starts over after each checkpoint and stays near
    SQLite's 1,000 pages. A checkpoint moved off the committing connection (a thread copying while the loop
    commits) never lets it start over, and it grew by every frame written (see docs/architecture.md)."""
    engine = open_engine(f"sqlite:///{db}")
    writer = RowWriter(engine, ModelCall.__table__)  # type: ignore[attr-defined]
    big = {**_row(), "request_json": "x" * 120_000}
    peak = 0

    async def main() -> None:
        nonlocal peak
        for _ in range(300):
            await writer.insert([big])
            peak = max(peak, Path(db + "-wal").stat().st_size)

    asyncio.run(main())
    assert _count(db) == 300
    assert peak < 8_000_000, peak
    writer.close()
    engine.dispose()
