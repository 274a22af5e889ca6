"""A SELECT compiled once and run on the driver's cursor, for point lookups on the proxy's hot path.

On SQLite a lookup by an indexed column costs ~20 us in the driver and ~120-240 us through SQLAlchemy's
execute (parameter processing, result wrapping, pool checkout): most of the query's cost. The statement
is still written with SQLAlchemy (so column names come from the schema) and compiled for the engine's
dialect once. Only for statements whose parameters and columns need no type conversion (text, integers).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Select


class DirectQuery:
    def __init__(self, statement: Select[Any], dialect: Dialect) -> None:
        self._compiled = statement.compile(dialect=dialect)
        self.sql = str(self._compiled)
        self._positions = self._compiled.positiontup

    def rows(self, dbapi_connection: Any, **params: Any) -> list[tuple[Any, ...]]:
        """The result rows, as the driver returns them, of the statement with ``params`` bound."""
        values = self._compiled.construct_params(params)
        args: Any = tuple(values[name] for name in self._positions) if self._positions else values
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(self.sql, args)
            return list(cursor.fetchall())
        finally:
            cursor.close()


__all__ = ["DirectQuery"]
