"""The sqldb server: one SQLite database per rollout, seeded from the task, that SQL cannot escape.

An authorizer refuses ATTACH/DETACH, creating views and triggers (TEMP ones too: the checker refuses a database
holding either), every PRAGMA but a few read-only ones, and load_extension; VACUUM
(incl. VACUUM INTO a file) is refused; a progress handler stops runaway queries. Sizes are bounded per
rollout: the database file (``max_page_count``), any one string or blob (``SQLITE_LIMIT_LENGTH``), and the
bytes of rows one query returns (cut, and marked truncated).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from rollwire.mcp_servers.envs.rollout import EnvRuntime

NAME = "sqldb"
DB_FILE = "sqldb.sqlite"
MAX_ROWS = 200
MAX_STEPS = 5_000_000
_READ_PRAGMAS = {"table_info", "table_list", "index_list", "index_info", "foreign_key_list"}
_REFUSED_SQL = re.compile(r"^\s*(vacuum|attach|detach)\b", re.IGNORECASE)


def seed(folder: Path, initial: dict[str, Any]) -> None:
    """Create the database from the task's ``sql`` (a script) and ``tables`` ({name: [row dicts]})."""
    with sqlite3.connect(folder / DB_FILE) as conn:
        if initial.get("sql"):
            conn.executescript(initial["sql"])
        for table, rows in (initial.get("tables") or {}).items():
            for row in rows:
                cols = ", ".join(f'"{c}"' for c in row)
                marks = ", ".join("?" for _ in row)
                conn.execute(f'INSERT INTO "{table}" ({cols}) VALUES ({marks})', list(row.values()))


_REFUSED_ACTIONS = {
    sqlite3.SQLITE_ATTACH,
    sqlite3.SQLITE_DETACH,
    sqlite3.SQLITE_CREATE_VIEW,
    sqlite3.SQLITE_CREATE_TEMP_VIEW,
    sqlite3.SQLITE_CREATE_TRIGGER,
    sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
}
"""Leaving the database, and code in its schema: a view can stand in for a table the checker reads (a recursive
one never ends), and a trigger runs on writes the rollout does not see."""


def _authorizer(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    if action in _REFUSED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() not in _READ_PRAGMAS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() == "load_extension":
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def connect(path: Path, max_bytes: int = 50_000_000, max_value_bytes: int = 1_000_000) -> sqlite3.Connection:
    """A guarded connection to one rollout's database."""
    conn = sqlite3.connect(path, timeout=5)
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {max(max_bytes // page_size, 16)}")  # before the authorizer refuses it
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(max_value_bytes, 1024))
    if hasattr(conn, "enable_load_extension"):  # absent where Python was built without extension loading
        conn.enable_load_extension(False)
    conn.set_authorizer(_authorizer)
    conn.set_progress_handler(_StepLimit(MAX_STEPS), 1000)
    return conn


class _StepLimit:
    """Aborts a statement after ``limit`` virtual-machine steps (the handler is called every 1000)."""

    def __init__(self, limit: int) -> None:
        self.left = limit // 1000

    def __call__(self) -> int:
        self.left -= 1
        return 1 if self.left < 0 else 0


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes)) else 8


def run_sql(
    path: Path, sql: str, params: list[Any] | None = None, max_bytes: int = 50_000_000, max_result_bytes: int = 1_000_000
) -> dict[str, Any]:
    """Execute one statement; rows (at most MAX_ROWS and ``max_result_bytes``) for queries, the change count for writes."""
    if _REFUSED_SQL.match(sql):
        raise ToolError("VACUUM, ATTACH and DETACH are not allowed")
    conn = connect(path, max_bytes, max_result_bytes)
    try:
        cur = conn.execute(sql, params or [])
        if cur.description is None:
            conn.commit()
            return {"changes": cur.rowcount}
        columns = [d[0] for d in cur.description]
        rows: list[list[Any]] = []
        size, truncated = 0, False
        for row in iter(cur.fetchone, None):
            size += sum(_size(v) for v in row)
            if len(rows) == MAX_ROWS or size > max_result_bytes:
                truncated = True
                break
            rows.append([v.hex() if isinstance(v, bytes) else v for v in row])
        return {"columns": columns, "rows": rows, "truncated": truncated}
    except sqlite3.DatabaseError as exc:
        if "full" in str(exc):
            raise ToolError(f"SQL error: {exc} (this rollout's database may hold at most {max_bytes} bytes)") from None
        raise ToolError(f"SQL error: {exc}") from None
    except (sqlite3.ProgrammingError, sqlite3.Warning) as exc:
        raise ToolError(f"SQL error: {exc}") from None
    finally:
        conn.close()


def build(env: EnvRuntime) -> MCPServer:
    """The sqldb MCP server."""
    mcp = MCPServer(NAME, instructions="A SQLite database. Run one SQL statement per call.")

    def db_of(ctx: Context[Any, Any]) -> Path:
        return env.folder(ctx, NAME, seed) / DB_FILE

    @mcp.tool()
    def query(ctx: Context[Any, Any], sql: str, params: list[Any] | None = None) -> str:
        """Run one SQL statement (SELECT, INSERT, UPDATE, DELETE, CREATE ...); returns JSON rows or the change count."""
        env.check_size("sql", sql)
        return json.dumps(run_sql(db_of(ctx), sql, params, env.sqldb_max_bytes, env.sqldb_max_result_bytes))

    @mcp.tool()
    def list_tables(ctx: Context[Any, Any]) -> str:
        """List the tables and their CREATE statements."""
        result = run_sql(db_of(ctx), "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return "\n".join(f"{name}: {sql}" for name, sql in result["rows"]) or "(no tables)"

    return mcp


__all__ = ["DB_FILE", "NAME", "build", "connect", "run_sql", "seed"]
