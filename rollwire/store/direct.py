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

An insert may carry a ``Condition`` on another table (the rows' rollout still takes records): the check is then
part of the insert itself (``INSERT ... SELECT <values> FROM <source> WHERE ... FOR SHARE``), one statement
where a guard's lookup and the insert were two. Every call writes one, so that is one lookup saved per call
(on Postgres, one network round trip).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from sqlalchemy import Table, bindparam, insert, select
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.sql import ColumnElement, FromClause, Insert, Select

from rollwire.errors import StoreError


class DirectQuery:
    def __init__(self, statement: Select[Unpack[tuple[Any, ...]]], dialect: Dialect) -> None:
        self._compiled = statement.compile(dialect=dialect)
        self.sql = str(self._compiled)
        self._positions = self._compiled.positiontup
        convert: list[Callable[[Any], Any] | None] = [
            c.type.dialect_impl(dialect).result_processor(dialect, None) for c in statement.selected_columns
        ]
        self._convert = convert if any(convert) else None
        self.driver_error: type[Exception] = dialect.loaded_dbapi.Error
        """The driver's own error class (what a statement run on the cursor raises)."""

    def run(self, engine: Engine, **params: Any) -> list[tuple[Any, ...]]:
        """``rows`` on a pooled connection of ``engine``; a database error is a ``StoreError``."""
        try:
            with engine.connect() as conn:
                return self.rows(conn.connection.dbapi_connection, **params)
        except (SQLAlchemyError, self.driver_error) as exc:
            raise self.failure(exc) from exc

    @staticmethod
    def failure(exc: Exception) -> StoreError:
        """What a failed read is to its callers (whichever connection it ran on)."""
        return StoreError(f"store read failed: {exc.__class__.__name__}: {exc}")

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


@dataclass(frozen=True)
class Condition:
    """Rows go in only while ``where`` holds on a row of ``source``. Its parameters named after the inserted
    columns take each row's values (``bindparam("rollout_id")``); the others keep the values they were built
    with. That row of ``source`` is share-locked where the database can (Postgres): a concurrent update of it
    waits for the insert's transaction, or the insert sees the update."""

    source: FromClause
    where: ColumnElement[bool]


_Compiled = tuple[str, list[str], dict[str, Callable[[Any], Any]], dict[str, Any]]
"""SQL, parameter names in order, bind conversions by column, the statement's own (converted) constants."""


class DirectInsert:
    """``INSERT`` of ``table`` (under ``only_if``, if given) that gives the new id, compiled once per set of columns."""

    def __init__(self, table: Table, dialect: Dialect, only_if: Condition | None = None) -> None:
        self._table = table
        self._dialect = dialect
        self._only_if = only_if
        self._row_id = dialect.name == "sqlite"
        """SQLite: the new id from the cursor (``lastrowid``, and ``rowcount`` says whether a row went in) rather
        than ``RETURNING``, which made each insert + commit ~15% dearer (38 us to 33, a model call's row)."""
        self._compiled: dict[tuple[str, ...], tuple[Insert, _Compiled | None]] = {}
        self.driver_error: type[Exception] = dialect.loaded_dbapi.Error

    def _build(self, keys: tuple[str, ...]) -> Insert:
        if self._only_if is None:
            statement = insert(self._table)
        else:
            columns = self._table.c
            values = select(*(bindparam(k, type_=columns[k].type) for k in keys)).select_from(self._only_if.source)
            source = values.where(self._only_if.where).with_for_update(read=True)
            statement = insert(self._table).from_select(list(keys), source)
        return statement if self._row_id else statement.returning(self._table.c.id)

    def _statement(self, keys: tuple[str, ...]) -> tuple[Insert, _Compiled | None]:
        if keys not in self._compiled:
            statement = self._build(keys)
            compiled = statement.compile(dialect=self._dialect, column_keys=list(keys))
            direct: _Compiled | None = None
            no_default = not compiled.insert_prefetch  # no Python-side default to compute here
            if no_default and (self._row_id or self._dialect.insert_returning):
                columns = self._table.c
                processors = {
                    k: columns[k].type.dialect_impl(self._dialect).bind_processor(self._dialect) for k in keys
                }
                constants = {}
                for bind, name in compiled.bind_names.items():  # beyond the row's columns: the condition's values
                    if name not in keys:
                        convert = bind.type.dialect_impl(self._dialect).bind_processor(self._dialect)
                        constants[name] = convert(bind.value) if convert is not None else bind.value
                names = list(compiled.positiontup or ())
                direct = (str(compiled), names, {k: f for k, f in processors.items() if f is not None}, constants)
            self._compiled[keys] = (statement, direct)
        return self._compiled[keys]

    def insert(self, connection: Connection, row: Mapping[str, Any]) -> int | None:
        """The new row's id, inserted in ``connection``'s transaction; None when ``only_if`` kept it out."""
        statement, direct = self._statement(tuple(row))
        if direct is None:
            result = connection.execute(statement, dict(row))
            if self._row_id:
                return int(result.lastrowid) if result.rowcount else None
            found = result.scalar_one_or_none()
            return int(found) if found is not None else None
        sql, names, processors, constants = direct
        values = {k: (processors[k](v) if k in processors else v) for k, v in row.items()}
        if constants:
            values.update(constants)
        args: Any = tuple(values[n] for n in names) if names else values
        cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(sql, args)
            if self._row_id:
                return int(cursor.lastrowid) if cursor.rowcount else None
            found = cursor.fetchone()
        except self.driver_error as exc:  # as SQLAlchemy raises it (OperationalError, IntegrityError, ...)
            raise DBAPIError.instance(sql, args, exc, self.driver_error) from exc
        finally:
            cursor.close()
        return int(found[0]) if found is not None else None


__all__ = ["Condition", "DirectInsert", "DirectQuery"]
