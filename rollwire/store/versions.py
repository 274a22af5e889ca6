"""The store's schema version: created and stamped on an empty database, migrated forward in place, refused when
it is newer than this code or cannot be migrated.

A kept version table (``rollwire_schema``) and a short list of migration functions, not alembic: the tables are
declared once (``schema``) and created from those declarations, every database rollwire supports is reached
through SQLAlchemy already, and a migration here is a few ``ALTER TABLE`` lines run in the same transaction
that checks the version. Two processes opening one fresh database at once are serialized (a Postgres advisory
lock; SQLite's write lock), so the schema is created once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from weakref import WeakKeyDictionary

from sqlalchemy import inspect, select, text
from sqlalchemy.engine import Connection, Engine
from sqlmodel import SQLModel

from rollwire.errors import StoreError
from rollwire.store.schema import CALLS_BY_ROLLOUT, SchemaVersion
from rollwire.store.views import create_views

SCHEMA_VERSION = 8
"""Bump with a new entry in ``MIGRATIONS`` whenever a table or column changes."""
TABLES = {"run", "rollout", "modelcall", "toolevent"}
"""Tables of every schema version: their presence without a version row means a store from before versions."""
_LOCK_KEY = 0x726F6C6C77  # 'rollw': the advisory lock that serializes schema work on Postgres


def _add_column(conn: Connection, table: str, column: str, ddl: str) -> None:
    """Add ``column`` where the table exists without it (a missing table is created whole afterwards)."""
    found = inspect(conn)
    if found.has_table(table) and column not in {c["name"] for c in found.get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))


def _v0_to_v1(conn: Connection) -> None:
    """From the unversioned schema: budgets, result size/truncation, refusals; a call's sampling parameters, line
    (main or side call) and output caps; 64-bit times; status as text."""
    postgres = conn.dialect.name == "postgresql"
    _add_column(conn, "modelcall", "sampling", "JSON NOT NULL DEFAULT '{}'")
    _add_column(conn, "modelcall", "line", "VARCHAR NOT NULL DEFAULT 'main'")
    _add_column(conn, "modelcall", "max_tokens_requested", "INTEGER")
    _add_column(conn, "modelcall", "max_tokens_granted", "INTEGER")
    _add_column(conn, "rollout", "budgets", "JSON NOT NULL DEFAULT '{}'")
    _add_column(conn, "toolevent", "result_bytes", "BIGINT NOT NULL DEFAULT 0")
    _add_column(conn, "toolevent", "truncated", "BOOLEAN NOT NULL DEFAULT " + ("false" if postgres else "0"))
    if postgres:  # SQLite's INTEGER is 64-bit and its enum a VARCHAR already
        for table, columns in {
            "run": ["created_ns"],
            "rollout": ["created_ns", "started_ns", "finished_ns", "finished_seq"],
            "modelcall": ["id", "started_ns", "ended_ns"],
            "toolevent": ["id", "started_ns", "ended_ns"],
        }.items():
            for column in columns:
                if inspect(conn).has_table(table):
                    conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE BIGINT"))
        if inspect(conn).has_table("rollout"):
            conn.execute(text("ALTER TABLE rollout ALTER COLUMN status TYPE VARCHAR(16) USING status::text"))


def _v1_to_v2(_conn: Connection) -> None:
    """The gateway's relayed MCP messages (``mcpmessage``): a new table, created by ``create_all`` after the steps."""


def _v2_to_v3(conn: Connection) -> None:
    """A rollout's calls indexed by (rollout, status), the id included (``schema.CALLS_BY_ROLLOUT``), in place of
    the index on the rollout alone (whose every query the new one answers)."""
    if not inspect(conn).has_table("modelcall"):
        return  # created whole afterwards
    _add_column(conn, "modelcall", "status", "VARCHAR NOT NULL DEFAULT 'complete'")  # every store has it but the oldest
    conn.execute(text("DROP INDEX IF EXISTS ix_modelcall_rollout_id"))
    include = " INCLUDE (id)" if conn.dialect.name == "postgresql" else ""
    conn.execute(text(f"CREATE INDEX IF NOT EXISTS {CALLS_BY_ROLLOUT} ON modelcall (rollout_id, status){include}"))


def _v3_to_v4(conn: Connection) -> None:
    """A continuing call's prompt stored as what follows the call it continues (``schema.ModelCall.prompt_base``,
    ``rollwire.store.prompts``); the rows already written keep their whole prompts (``prompt_base`` NULL). The
    index on a call's start time goes: no query reads it, and every insert wrote it (a page of log a call)."""
    _add_column(conn, "modelcall", "prompt_base", "BIGINT")
    conn.execute(text("DROP INDEX IF EXISTS ix_modelcall_started_ns"))


def _v4_to_v5(conn: Connection) -> None:
    """A continuing call's request stored as an edit of the request of the call it continues
    (``schema.ModelCall.request_base``, ``rollwire.store.requests``); the rows already written keep their whole
    requests (``request_base`` NULL)."""
    _add_column(conn, "modelcall", "request_base", "BIGINT")
    _add_column(conn, "modelcall", "request_head", "INTEGER NOT NULL DEFAULT 0")
    _add_column(conn, "modelcall", "request_tail", "INTEGER NOT NULL DEFAULT 0")


def _v5_to_v6(_conn: Connection) -> None:
    """The views of whole requests and prompts (``views``): made after the steps, with every store's."""


def _v6_to_v7(conn: Connection) -> None:
    """The harness that made each call, by its User-Agent (``schema.ModelCall.client``); the rows already written
    keep an empty one, which ``rollwire audit`` shows as an unknown client."""
    _add_column(conn, "modelcall", "client", "VARCHAR NOT NULL DEFAULT ''")


def _v7_to_v8(conn: Connection) -> None:
    """Replays (``rollwire replay``): a tool call answered from a recording names the recorded call
    (``schema.ToolEvent.replayed_from``); where a replay diverged is a new table (``replaydivergence``), created by
    ``create_all`` after the steps."""
    _add_column(conn, "toolevent", "replayed_from", "BIGINT")


MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    0: _v0_to_v1,
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
}
"""version -> the function that moves a store from it to version + 1."""


CHECK_EVERY_S = 1.0
"""How often ``check_current`` asks the store again (per store, per process)."""
_checked: WeakKeyDictionary[Engine, float] = WeakKeyDictionary()
"""Engine -> when ``check_current`` last found its store current (``time.monotonic``)."""


def check_current(conn: Connection) -> None:
    """``StoreError`` when a newer rollwire migrated the store since this process opened it. Rows of a newer schema
    may mean something else (schema 4 made a continued call's ``prompt_ids`` its tail alone, schema 5 its
    ``request_json`` an edit), so a process that keeps reading them as its own schema says would read them
    wrong, silently. Called before reading rows back; asks the store at most once every ``CHECK_EVERY_S``."""
    now = time.monotonic()
    if now - _checked.get(conn.engine, -CHECK_EVERY_S) < CHECK_EVERY_S:
        return
    found = _version_row(conn)
    if found is not None and found > SCHEMA_VERSION:
        url = conn.engine.url.render_as_string(hide_password=True)
        raise StoreError(
            f"the store at {url} was migrated to schema version {found} by a newer rollwire while this "
            f"process ran (it reads version {SCHEMA_VERSION}): restart it on the newer release"
        )
    _checked[conn.engine] = now


def _version_row(conn: Connection) -> int | None:
    """The version the store's version row holds (None: no row)."""
    found = conn.execute(select(SchemaVersion.version)).scalar()  # type: ignore[call-overload]
    return int(found) if found is not None else None


def stored_version(conn: Connection) -> int | None:
    """The store's version: None for an empty database, 0 for rollwire tables without a version row."""
    names = set(inspect(conn).get_table_names())
    if SchemaVersion.__tablename__ in names:
        found = _version_row(conn)
        return found if found is not None else 0
    return 0 if names & TABLES else None


def prepare(conn: Connection, where: str) -> None:
    """Create, check or migrate the schema inside the caller's transaction; StoreError when it cannot be used."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    version = stored_version(conn)
    if version is None:
        SQLModel.metadata.create_all(conn)
        create_views(conn)
        conn.execute(SchemaVersion.__table__.insert().values(id=1, version=SCHEMA_VERSION))  # type: ignore[attr-defined]
        return
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the store at {where} has schema version {version}, newer than this rollwire's {SCHEMA_VERSION}: "
            "upgrade rollwire, or point --db at another store"
        )
    if version == SCHEMA_VERSION:
        return
    for step in range(version, SCHEMA_VERSION):
        if step not in MIGRATIONS:
            raise StoreError(f"the store at {where} has schema version {version}, which cannot be migrated")
        MIGRATIONS[step](conn)
    SQLModel.metadata.create_all(conn)  # tables a migration introduced
    create_views(conn)  # over the columns as they are now
    conn.execute(SchemaVersion.__table__.delete())  # type: ignore[attr-defined]
    conn.execute(SchemaVersion.__table__.insert().values(id=1, version=SCHEMA_VERSION))  # type: ignore[attr-defined]


__all__ = ["CHECK_EVERY_S", "MIGRATIONS", "SCHEMA_VERSION", "check_current", "prepare", "stored_version"]
