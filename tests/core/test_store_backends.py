"""The store on SQLite and on a real PostgreSQL: 64-bit times, a versioned schema (a mismatch is refused with a
clear message, an older store is migrated), and the stream cursor taken safely by many writers at once."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlmodel import col, select

from rollwire.errors import StoreError
from rollwire.proxy.splice.priors import read_calls
from rollwire.reconstruct import load_calls
from rollwire.rollouts import RolloutBook
from rollwire.store import (
    ModelCall,
    Rollout,
    RolloutStatus,
    decode_ids,
    encode_ids,
    open_engine,
    session_scope,
    versions,
)
from rollwire.store.prompts import whole_prompts
from rollwire.store.requests import SentRequest, stored_request, whole_requests
from rollwire.store.schema import CALLS_BY_ROLLOUT
from rollwire.store.versions import SCHEMA_VERSION
from rollwire.store.views import VIEWS


def test_nanosecond_times_and_cursors_fit(any_store_url: str) -> None:
    book = RolloutBook(open_engine(any_store_url))
    book.create_run("r")
    ((row, _token),) = book.create("r", 1, {})
    assert row.created_ns > 2**31 and book.get(row.id).created_ns == row.created_ns  # Postgres int4 would overflow
    done = book.set_status(row.id, RolloutStatus.FINISHED, reward=1.0)
    assert done.finished_seq == 1 and done.finished_ns is not None and done.finished_ns > 2**60


def test_a_newer_schema_is_refused_with_a_clear_message(any_store_url: str) -> None:
    open_engine(any_store_url).dispose()
    raw = create_engine(any_store_url)
    with raw.begin() as conn:
        conn.execute(text("UPDATE rollwire_schema SET version = :v"), {"v": SCHEMA_VERSION + 1})
    raw.dispose()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this rollwire's"):
        open_engine(any_store_url)


def test_a_reader_reads_and_writes_nothing(any_store_url: str) -> None:
    """``read_only``: the rows are there to read; a write is refused by the database itself, on both backends."""
    book = RolloutBook(open_engine(any_store_url))
    book.create_run("looked-at")
    reader = open_engine(any_store_url, read_only=True)
    with session_scope(reader) as session:
        assert [row.id for row in session.exec(select(Rollout))] == []
        assert session.connection().execute(text("SELECT count(*) FROM run")).one()[0] == 1
    with pytest.raises(StoreError, match="read-only|readonly"):
        with session_scope(reader) as session:
            session.connection().execute(text("DELETE FROM run"))
    reader.dispose()
    with session_scope(open_engine(any_store_url)) as session:
        assert session.connection().execute(text("SELECT count(*) FROM run")).one()[0] == 1


def test_an_unversioned_sqlite_store_is_migrated(tmp_path: Path) -> None:
    """A store written before versions (no budgets, no result size, no refusals) opens and keeps its rows."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE run (id VARCHAR PRIMARY KEY, name VARCHAR, kind VARCHAR, config JSON NOT NULL, created_ns INTEGER);
            CREATE TABLE rollout (id VARCHAR PRIMARY KEY, run_id VARCHAR, token_hash VARCHAR, task_id VARCHAR,
              group_id VARCHAR, sample_index INTEGER, attempt INTEGER, status VARCHAR(9), reward FLOAT,
              reward_breakdown JSON NOT NULL, final_answer VARCHAR, exit_code INTEGER, log_tail VARCHAR,
              error VARCHAR, meta JSON NOT NULL, created_ns INTEGER, started_ns INTEGER, finished_ns INTEGER,
              finished_seq INTEGER UNIQUE);
            CREATE TABLE modelcall (id INTEGER PRIMARY KEY, rollout_id VARCHAR);
            CREATE TABLE toolevent (id INTEGER PRIMARY KEY, rollout_id VARCHAR, server VARCHAR, tool VARCHAR,
              arguments_json VARCHAR, result_json VARCHAR, is_error BOOLEAN, error VARCHAR, latency_ms FLOAT,
              started_ns INTEGER, ended_ns INTEGER);
            INSERT INTO run VALUES ('r', '', 'adhoc', '{}', 1);
            INSERT INTO rollout VALUES ('ro', 'r', 'h', NULL, NULL, 0, 0, 'FINISHED', 1.0, '{}', NULL, 0, NULL,
              NULL, '{}', 1, 1, 2, 1);
            """
        )
    engine = open_engine(f"sqlite:///{path}")
    with session_scope(engine) as session:
        row = session.get(Rollout, "ro")
        assert row is not None and row.status == RolloutStatus.FINISHED and row.budgets == {}
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM rollwire_schema").fetchone() == (SCHEMA_VERSION,)
        assert "truncated" in {c[1] for c in db.execute("PRAGMA table_info(toolevent)")}
        assert "client" in {c[1] for c in db.execute("PRAGMA table_info(modelcall)")}  # version 7's
        assert "replayed_from" in {c[1] for c in db.execute("PRAGMA table_info(toolevent)")}  # version 8's
        assert db.execute("SELECT count(*) FROM replaydivergence").fetchone() == (0,)


def test_a_version_2_store_gains_the_covering_index_of_a_rollouts_calls(any_store_url: str) -> None:
    """Version 3 answers "which of this rollout's calls are complete" from an index alone (before every splice);
    a version 2 store, with its index on the rollout alone, is moved to it in place."""
    open_engine(any_store_url).dispose()
    raw = create_engine(any_store_url)
    with raw.begin() as conn:  # back to version 2's indexes
        conn.execute(text(f"DROP INDEX {CALLS_BY_ROLLOUT}"))
        conn.execute(text("CREATE INDEX ix_modelcall_rollout_id ON modelcall (rollout_id)"))
        conn.execute(text("UPDATE rollwire_schema SET version = 2"))
    open_engine(any_store_url).dispose()
    with raw.connect() as conn:
        indexes = {i["name"]: i["column_names"] for i in inspect(conn).get_indexes("modelcall")}
        assert conn.execute(text("SELECT version FROM rollwire_schema")).scalar() == SCHEMA_VERSION
        if conn.dialect.name == "sqlite":
            ids = "SELECT id FROM modelcall WHERE rollout_id = 'r' AND status = 'complete'"  # the proxy's question
            assert "COVERING INDEX" in str(conn.execute(text(f"EXPLAIN QUERY PLAN {ids}")).all())
    raw.dispose()
    assert indexes.get(CALLS_BY_ROLLOUT) == ["rollout_id", "status"] and "ix_modelcall_rollout_id" not in indexes


def test_a_version_3_store_keeps_its_whole_prompts_and_gains_continued_ones(any_store_url: str) -> None:
    """Version 4 stores a continuing call's prompt as what follows the call it continues (``prompt_base``) and
    drops the index on a call's start time, which no query used (every insert paid for it). A version 3 store is
    moved in place, and the prompts it holds (all whole) read back as they were."""
    first = open_engine(any_store_url)
    book = RolloutBook(first)
    book.create_run("r")
    ((rollout, _token),) = book.create("r", 1, {})
    first.dispose()
    raw = create_engine(any_store_url)
    with raw.begin() as conn:  # back to version 3, with a row it wrote
        for view in VIEWS:  # version 6's, over the columns version 3 lacks
            conn.execute(text(f"DROP VIEW {view}"))
        for column in ("prompt_base", "request_base", "request_head", "request_tail"):
            conn.execute(text(f"ALTER TABLE modelcall DROP COLUMN {column}"))
        conn.execute(text("CREATE INDEX ix_modelcall_started_ns ON modelcall (started_ns)"))
        conn.execute(text("UPDATE rollwire_schema SET version = 3"))
        conn.execute(
            text(
                "INSERT INTO modelcall (rollout_id, dialect, requested_model, served_model, request_json, response_json,"
                " prompt_ids, completion_ids, completion_logprobs, choice_index, sampling, policy_version, segment_index,"
                " reused_prefix_len, line, status, latency_ms, started_ns, ended_ns) VALUES (:r, 'chat', '', '', '{}',"
                " '{}', :p, :c, :c, 0, '{}', 0, 0, 0, 'main', 'complete', 0, 1, 2)"
            ),
            {"r": rollout.id, "p": encode_ids([5, 6, 7]), "c": encode_ids([8])},
        )
    raw.dispose()
    engine = open_engine(any_store_url)
    with engine.connect() as conn:
        assert "ix_modelcall_started_ns" not in {i["name"] for i in inspect(conn).get_indexes("modelcall")}
    with session_scope(engine) as session:
        (old,) = session.exec(select(ModelCall)).all()
        continued = ModelCall(
            rollout_id=rollout.id, prompt_ids=encode_ids([9]), prompt_base=old.id, reused_prefix_len=4, started_ns=3
        )
        session.add(continued)
    with session_scope(engine) as session:
        calls = list(session.exec(select(ModelCall).order_by(col(ModelCall.id))).all())
    engine.dispose()
    assert [c.prompt_base for c in calls] == [None, calls[0].id]
    assert [decode_ids(p) for p in whole_prompts(calls)] == [[5, 6, 7], [5, 6, 7, 8, 9]]


def test_a_version_4_store_keeps_its_whole_requests_and_gains_edited_ones(any_store_url: str) -> None:
    """Version 5 keeps a continuing call's request as an edit of the request it continues (``request_base``). A
    version 4 store is moved in place; the requests it holds (all whole) read back as they were, and a new call
    edits one of them."""
    first = open_engine(any_store_url)
    book = RolloutBook(first)
    book.create_run("r")
    ((rollout, _token),) = book.create("r", 1, {})
    first.dispose()
    old_request = '{"messages": [{"role": "user", "content": "hi"}], "tools": "' + "t" * 400 + '"}'
    raw = create_engine(any_store_url)
    with raw.begin() as conn:  # back to version 4, with a row it wrote
        for view in VIEWS:
            conn.execute(text(f"DROP VIEW {view}"))
        for column in ("request_base", "request_head", "request_tail"):
            conn.execute(text(f"ALTER TABLE modelcall DROP COLUMN {column}"))
        conn.execute(text("UPDATE rollwire_schema SET version = 4"))
        conn.execute(
            text(
                "INSERT INTO modelcall (rollout_id, dialect, requested_model, served_model, request_json, response_json,"
                " prompt_ids, completion_ids, completion_logprobs, choice_index, sampling, policy_version, segment_index,"
                " reused_prefix_len, line, status, latency_ms, started_ns, ended_ns) VALUES (:r, 'chat', '', '', :q,"
                " '{}', :p, :c, :c, 0, '{}', 0, 0, 0, 'main', 'complete', 0, 1, 2)"
            ),
            {"r": rollout.id, "q": old_request, "p": encode_ids([5]), "c": encode_ids([6])},
        )
    raw.dispose()
    engine = open_engine(any_store_url)
    new_request = old_request.replace('"hi"}]', '"hi"}, {"role": "assistant", "content": "ok"}]')
    with session_scope(engine) as session:
        (old,) = session.exec(select(ModelCall)).all()
        kept = stored_request(new_request.encode(), old.id, SentRequest.of_text(old_request))
        session.add(ModelCall(
            rollout_id=rollout.id, request_json=kept.text, request_base=kept.base, request_head=kept.head,
            request_tail=kept.tail, started_ns=3,
        ))  # fmt: skip
    calls = load_calls(engine, rollout.id)
    engine.dispose()
    assert [(c.request_base, c.request_head, c.request_tail) for c in calls] == [
        (None, 0, 0),
        (calls[0].id, kept.head, kept.tail),
    ]
    assert len(calls[1].request_json) < 50 and whole_requests(calls) == [old_request, new_request]
    raw = create_engine(any_store_url)
    with raw.connect() as conn:  # the migrated store has the views over its old and new rows
        found = conn.execute(text("SELECT request_json FROM call_requests ORDER BY call_id")).scalars().all()
    raw.dispose()
    assert found == [old_request, new_request]


def test_reading_calls_after_a_newer_release_migrated_the_store_stops_with_a_clear_error(
    any_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process checks the schema when it opens the store; one still running when a newer release migrates it
    must not read the newer rows as its own schema says (schema 4 changed what ``prompt_ids`` holds). Reads of
    a rollout's calls ask again, at most once every ``CHECK_EVERY_S``."""
    engine = open_engine(any_store_url)
    book = RolloutBook(engine)
    book.create_run("r")
    ((rollout, _token),) = book.create("r", 1, {})
    assert load_calls(engine, rollout.id) == []  # asked: current
    raw = create_engine(any_store_url)
    with raw.begin() as conn:
        conn.execute(text("UPDATE rollwire_schema SET version = :v"), {"v": SCHEMA_VERSION + 1})
    raw.dispose()
    assert read_calls(engine, rollout.id) == []  # asked a moment ago: not again yet
    monkeypatch.setattr(versions, "CHECK_EVERY_S", 0.0)
    newer = f"migrated to schema version {SCHEMA_VERSION + 1} by a newer rollwire while this process ran"
    with pytest.raises(StoreError, match=newer):
        load_calls(engine, rollout.id)
    with pytest.raises(StoreError, match=newer):
        read_calls(engine, rollout.id)
    engine.dispose()


def test_cursors_are_unique_and_gap_free_across_writers(any_store_url: str) -> None:
    """Four engines (as four processes or replicas would hold) finish 40 rollouts at once."""
    setup = RolloutBook(open_engine(any_store_url))
    setup.create_run("r")
    ids = [row.id for row, _ in setup.create("r", 40, {})]
    books = [RolloutBook(open_engine(any_store_url)) for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def finish(book: RolloutBook, mine: list[str]) -> None:
        start.wait()
        try:
            for rollout_id in mine:
                book.set_status(rollout_id, RolloutStatus.FINISHED, reward=0.0)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(b, ids[i::4])) for i, b in enumerate(books)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    cursors = sorted(setup.get(i).finished_seq or 0 for i in ids)
    assert cursors == list(range(1, 41))
