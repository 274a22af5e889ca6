"""Statements compiled once and run on the driver's cursor: point lookups (``DirectQuery``) and the rows every
model call writes (``DirectInsert``), on the hot path of every service.

On SQLite a lookup by an indexed column costs ~20 us in the driver and ~120-240 us through SQLAlchemy's
execute (parameter processing, result wrapping, pool checkout), several times more through an ORM session:
most of the query's cost. The statement is still written with SQLAlchemy (so column names come from the
schema) and compiled for the engine's dialect once; each column's value goes through the dialect's own result
conversion (an enum member from its stored name, JSON text to a dict on SQLite), as SQLAlchemy would do it.
A lookup's parameters are bound as given (text or integers); an insert's values go through each column's
bind conversion (a dict to JSON text), and only inserts whose every column is given (no Python-side default
to compute) take the direct path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
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


class DirectInsert:
    """``INSERT ... RETURNING id`` of ``table``, compiled once per set of columns given."""

    def __init__(self, table: Table, dialect: Dialect) -> None:
        self._table = table
        self._dialect = dialect
        self._compiled: dict[tuple[str, ...], tuple[str, list[str], dict[str, Callable[[Any], Any]]] | None] = {}
        self._generic = insert(table).returning(table.c.id)
        self._driver_error: type[Exception] = dialect.loaded_dbapi.Error

    def _statement(self, keys: tuple[str, ...]) -> tuple[str, list[str], dict[str, Callable[[Any], Any]]] | None:
        if keys not in self._compiled:
            compiled = insert(self._table).returning(self._table.c.id).compile(dialect=self._dialect, column_keys=keys)
            if compiled.insert_prefetch or not self._dialect.insert_returning:  # a default to compute: not here
                self._compiled[keys] = None
            else:
                columns = self._table.c
                processors = {k: columns[k].type.dialect_impl(self._dialect).bind_processor(self._dialect) for k in keys}
                names = list(compiled.positiontup or ())
                self._compiled[keys] = (str(compiled), names, {k: f for k, f in processors.items() if f is not None})
        return self._compiled[keys]

    def insert(self, connection: Connection, row: Mapping[str, Any]) -> int:
        """The new row's id, inserted in ``connection``'s transaction."""
        statement = self._statement(tuple(row))
        if statement is None:
            return int(connection.execute(self._generic, dict(row)).scalar_one())
        sql, names, processors = statement
        values = {k: (processors[k](v) if k in processors else v) for k, v in row.items()}
        args: Any = tuple(values[n] for n in names) if names else values
        cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(sql, args)
            return int(cursor.fetchone()[0])
        except self._driver_error as exc:  # as SQLAlchemy raises it (OperationalError, IntegrityError, ...)
            raise DBAPIError.instance(sql, args, exc, self._driver_error) from exc
        finally:
            cursor.close()


__all__ = ["DirectInsert", "DirectQuery"]
