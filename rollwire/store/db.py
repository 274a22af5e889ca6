"""Engine from URL (SQLite in WAL mode by default, Postgres by URL) and session scope.

SQLAlchemy errors are translated into ``StoreError`` here, once. A reader (``read_only``: the viewer, ``traces``,
``export``) changes nothing in the store it looks at: no schema is created or migrated, SQLite opens the file
read-only and Postgres runs read-only transactions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlmodel import Session, create_engine

from rollwire.compact_json import json_text
from rollwire.errors import StoreError
from rollwire.store import schema  # noqa: F401  (registers the tables)
from rollwire.store.versions import SCHEMA_VERSION, prepare, stored_version


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a commit survives a process kill
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_reader_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()


def redact(url: str) -> str:
    """The URL without its credentials, for messages."""
    return url.split("@")[-1]


def open_engine(url: str, *, read_only: bool = False) -> Engine:
    """Create the SQLAlchemy engine for ``url``; create, check or migrate its schema (see ``versions``).
    ``read_only``: only look; the store must exist at this rollwire's schema version."""
    kwargs: dict[str, Any] = {}
    where = redact(url)
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        if read_only:
            if not path or path == ":memory:" or not Path(path).is_file():
                raise StoreError(f"no store at {where}")
            url = f"sqlite:///file:{quote(str(Path(path).resolve()))}?mode=ro&uri=true"
        elif path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    elif read_only:
        kwargs["connect_args"] = {"options": "-c default_transaction_read_only=on"}
    try:
        engine = create_engine(url, json_serializer=json_text, **kwargs)  # JSON columns, written compactly
        if url.startswith("sqlite"):
            event.listen(engine, "connect", _sqlite_reader_pragmas if read_only else _sqlite_pragmas)
        if read_only:
            _check_readable(engine, where)
        else:
            _prepare(engine, where)
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise StoreError(f"cannot open the store at {redact(url)}: {exc.__class__.__name__}: {detail}") from exc
    except ModuleNotFoundError as exc:
        hint = " (for Postgres: pip install 'rollwire[postgres]')" if "psycopg" in str(exc) else ""
        raise StoreError(f"no database driver for {url.split(':', 1)[0]}: {exc}{hint}") from exc
    return engine


def _check_readable(engine: Engine, where: str) -> None:
    """A reader reads this rollwire's schema only: it migrates nothing, and rows of another schema mean other
    things (a continued call's ``prompt_ids`` is its tail alone from schema 4 on)."""
    with engine.connect() as conn:
        version = stored_version(conn)
    if version is None:
        raise StoreError(f"no rollwire store at {where} (the database is empty)")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the store at {where} has schema version {version}, newer than this rollwire's {SCHEMA_VERSION}: "
            "look at it with the rollwire that wrote it"
        )
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"the store at {where} has schema version {version}, older than this rollwire's {SCHEMA_VERSION}, and "
            "looking migrates nothing: look at it with the rollwire that wrote it, or migrate it first (any "
            "writer does, e.g. `rollwire proxy --db URL`)"
        )


def _prepare(engine: Engine, where: str) -> None:
    """Schema work in one transaction. SQLite runs DDL outside it, so two processes creating one new file at
    once may clash: the loser sees the winner's tables on its next try."""
    for attempt in range(3):
        try:
            with engine.begin() as conn:
                prepare(conn, where)
            return
        except (IntegrityError, OperationalError):
            if engine.dialect.name != "sqlite" or attempt == 2:
                raise


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits on success and rolls back (raising StoreError) on a database error."""
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise StoreError(f"store write failed: {exc.__class__.__name__}: {exc.orig if hasattr(exc, 'orig') else exc}") from exc
    finally:
        session.close()


__all__ = ["open_engine", "redact", "session_scope"]
