"""Engine from URL (SQLite in WAL mode by default, Postgres by URL) and session scope.

SQLAlchemy errors are translated into ``StoreError`` here, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.schema import CreateColumn
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, SQLModel, create_engine

from rollwire.errors import StoreError
from rollwire.store import schema  # noqa: F401  (registers the tables)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a commit survives a process kill
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def open_engine(url: str) -> Engine:
    """Create the SQLAlchemy engine for ``url`` and make sure the tables exist."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
    try:
        engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(engine, "connect", _sqlite_pragmas)
        SQLModel.metadata.create_all(engine)
        _add_missing_columns(engine)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open the store at {url.split('@')[-1]}: {exc.__class__.__name__}") from exc
    return engine


def _add_missing_columns(engine: Engine) -> None:
    """A store written by an older rollwire gains the columns added since, so it stays readable and writable
    (``create_all`` only adds tables): a nullable column as declared, a required one with its default."""
    inspector = inspect(engine)
    for table in SQLModel.metadata.sorted_tables:
        if not inspector.has_table(table.name):
            continue
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            ddl = str(CreateColumn(column).compile(dialect=engine.dialect))
            default = column.default.arg if column.default is not None else None
            if not column.nullable:
                if not isinstance(default, (str, int, float)):
                    continue  # a required column with no constant default is no later addition
                literal = "'" + default.replace("'", "''") + "'" if isinstance(default, str) else repr(default)
                ddl += f" DEFAULT {literal}"
            with engine.begin() as connection:
                connection.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {ddl}"))


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


__all__ = ["open_engine", "session_scope"]
