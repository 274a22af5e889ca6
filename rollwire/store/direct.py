"""A SELECT compiled once and run on the driver's cursor, for point lookups on the hot path of every service.

On SQLite a lookup by an indexed column costs ~20 us in the driver and ~120-240 us through SQLAlchemy's
execute (parameter processing, result wrapping, pool checkout), several times more through an ORM session:
most of the query's cost. The statement is still written with SQLAlchemy (so column names come from the
schema) and compiled for the engine's dialect once; each column's value goes through the dialect's own result
conversion (an enum member from its stored name, JSON text to a dict on SQLite), as SQLAlchemy would do it.
Parameters are bound as given: only for lookups by text or integers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql import Select

from rollwire.errors import StoreError


class DirectQuery:
    def __init__(self, statement: Select[Any], dialect: Dialect) -> None:
        self._compiled = statement.compile(dialect=dialect)
        self.sql = str(self._compiled)
        self._positions = self._compiled.positiontup
        convert = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in statement.selected_columns]
        self._convert: list[Callable[[Any], Any] | None] | None = convert if any(convert) else None
        self._driver_error: type[Exception] = dialect.loaded_dbapi.Error

    def run(self, engine: Engine, **params: Any) -> list[tuple[Any, ...]]:
        """``rows`` on a pooled connection of ``engine``; a database error is a ``StoreError``."""
        try:
            with engine.connect() as conn:
                return self.rows(conn.connection.dbapi_connection, **params)
        except (SQLAlchemyError, self._driver_error) as exc:
            raise StoreError(f"store read failed: {exc.__class__.__name__}: {exc}") from exc

    def rows(self, dbapi_connection: Any, **params: Any) -> list[tuple[Any, ...]]:
        """The result rows of the statement with ``params`` bound, each value converted as its column's type says."""
        values = self._compiled.construct_params(params)
        args: Any = tuple(values[name] for name in self._positions) if self._positions else values
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(self.sql, args)
            found = cursor.fetchall()
        finally:
            cursor.close()
        if self._convert is None:
            return list(found)
        convert = self._convert
        return [tuple(f(v) if f is not None else v for f, v in zip(convert, row)) for row in found]


__all__ = ["DirectQuery"]
