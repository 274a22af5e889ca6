"""Views that give a model call's whole request and whole prompt back in plain SQL, on SQLite and Postgres.

The ``modelcall`` table keeps a continuing call's request as an edit of its base's (``requests``) and its
prompt as what follows the call it continues (``prompts``): compact, but a reader with plain SQL, pandas or
DuckDB would get fragments. These views undo both with one recursive query each, the same rules as the Python
readers, so a store is readable without rollwire:

- ``call_requests(call_id, rollout_id, request_json)``: the request as the client sent it (JSON text);
- ``call_prompts(call_id, rollout_id, prompt_ids, completion_ids)``: the exact token ids the engine was
  prompted with and sampled, each as little-endian int32s (``codec``: ``numpy.frombuffer(b, "<i4")``,
  DuckDB's or Postgres' byte functions).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection

CALL_REQUESTS = "call_requests"
CALL_PROMPTS = "call_prompts"
VIEWS = (CALL_REQUESTS, CALL_PROMPTS)


def _requests_sql() -> str:
    return f"""CREATE VIEW {CALL_REQUESTS} AS
WITH RECURSIVE whole(id, request_json) AS (
    SELECT id, CAST(request_json AS TEXT) FROM modelcall WHERE request_base IS NULL
    UNION ALL
    SELECT c.id, substr(w.request_json, 1, c.request_head) || c.request_json
                 || substr(w.request_json, length(w.request_json) - c.request_tail + 1)
    FROM modelcall c JOIN whole w ON c.request_base = w.id
)
SELECT m.id AS call_id, m.rollout_id, w.request_json FROM whole w JOIN modelcall m ON m.id = w.id"""


def _prompts_sql(dialect: str) -> str:
    # SQLite's || makes text of two blobs (the bytes kept): cast back. Postgres joins bytea as bytea.
    blob = (lambda sql: f"CAST({sql} AS BLOB)") if dialect == "sqlite" else (lambda sql: sql)
    return f"""CREATE VIEW {CALL_PROMPTS} AS
WITH RECURSIVE whole(id, prompt_ids, opened) AS (
    SELECT id, prompt_ids, {blob("prompt_ids || completion_ids")} FROM modelcall WHERE prompt_base IS NULL
    UNION ALL
    SELECT c.id, {blob("w.opened || c.prompt_ids")}, {blob("w.opened || c.prompt_ids || c.completion_ids")}
    FROM modelcall c JOIN whole w ON c.prompt_base = w.id
)
SELECT m.id AS call_id, m.rollout_id, w.prompt_ids, m.completion_ids FROM whole w JOIN modelcall m ON m.id = w.id"""


def create_views(conn: Connection) -> None:
    """(Re)create the views inside the caller's schema transaction."""
    for name in VIEWS:
        conn.execute(text(f"DROP VIEW IF EXISTS {name}"))
    conn.execute(text(_requests_sql()))
    conn.execute(text(_prompts_sql(conn.dialect.name)))


__all__ = ["CALL_PROMPTS", "CALL_REQUESTS", "VIEWS", "create_views"]
