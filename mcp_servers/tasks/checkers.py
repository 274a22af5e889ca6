"""Score a rollout by executing checks against its final env state (and final answer): checklist partial credit.

Each criterion passes or fails; the reward is the passed weight over the total weight, in [0, 1].

The policy under training is an adversary of these checks: it learns whatever passes one without doing the task.
So every check reads the rollout's state as rollout-written data:

- text checks (``answer_contains``, ``mail_sent``'s ``subject_contains``/``body_contains``, ``file_contains``)
  match each expected value as a whole token of the normalised text (lower case, whitespace runs as one space):
  not inside a longer word or number ("100" is not in "1100", "100.5", "0.100", "2,100" or "-100"), and only
  in a text of at most a capped length (an answer listing every number 0-999 passes nothing). An expected value
  may be a list of alternatives, one of which must match ("cancelled" / "canceled");
- files are read beneath the state folder without following symlinks, never from a FIFO or device, never past
  a size cap (``rollwire.rollout_files.read_beneath``);
- ``sql_equals`` opens the database read-only, refuses one holding any view or trigger (a view can stand in for
  a table, a recursive one never ends), and stops its query after ``SQL_TIME_BUDGET_S``.

A criterion refused for any of these fails with the reason in its breakdown entry (``reason``); it never fails
the whole scoring. The orchestrator runs ``score`` in a child process with time and memory limits besides.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.mcp_servers.envs import calendar, mail, sqldb
from rollwire.mcp_servers.state import read_json
from rollwire.mcp_servers.tasks.schema import Criterion, Task
from rollwire.rollout_files import RefusedFile, read_beneath

ANSWER_MAX_CHARS = 200
"""Longest final answer (normalised) ``answer_contains`` looks at; at least 4x the expected value's length."""
SUBJECT_MAX_CHARS = 200
"""Longest mail subject (normalised) ``subject_contains`` looks at (``max_subject_chars`` overrides)."""
BODY_MAX_CHARS = 2000
"""Longest mail body (normalised) ``body_contains`` looks at (``max_chars`` overrides)."""
FILE_MAX_CHARS = 4000
"""Longest file text (normalised) ``file_contains`` looks at (``max_chars`` overrides)."""
FILE_MAX_BYTES = 1_000_000
"""Largest workspace file any file check reads (``max_bytes`` overrides); a larger one fails the criterion."""
STATE_MAX_BYTES = 16 << 20
"""Largest calendar or mail JSON file the checks read."""
SQL_TIME_BUDGET_S = 10.0
"""Wall-clock seconds one ``sql_equals`` query may run before it is stopped (the criterion fails)."""
_RAW_FACTOR = 50
"""A text longer than this many times its cap is refused before it is even normalised."""


class Refused(Exception):
    """A criterion's input the checks will not judge (too long, a view in the database): the criterion fails."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class CheckResult:
    reward: float
    breakdown: dict[str, dict[str, Any]] = field(default_factory=dict)


Check = Callable[[Path, str | None, dict[str, Any]], bool]


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _capped(text: str, cap: int, what: str) -> str:
    """``text`` normalised, or ``Refused`` when longer than ``cap`` characters: a long enough text contains
    every candidate value, so length is part of what a text check checks."""
    if len(text) > cap * _RAW_FACTOR:
        raise Refused(f"{what} is {len(text)} characters; at most {cap} (normalised) are checked")
    normal = _norm(text)
    if len(normal) > cap:
        raise Refused(f"{what} is {len(normal)} characters after normalising; at most {cap} are checked")
    return normal


@lru_cache(maxsize=256)
def _token(value: str) -> re.Pattern[str]:
    """``value`` (normalised) as a whole token: no letter, digit or ``_`` on either side, and for a number no
    decimal or thousands separator joining it to more digits, nor a sign before it."""
    normal = _norm(value)
    escaped = re.escape(normal)
    sign = "-" if normal[:1].isdigit() else ""
    return re.compile(rf"(?<![\w{sign}])(?<!\d[.,]){escaped}(?![\w])(?![.,]\d)")


def _has(text: str, value: Any) -> bool:
    """``value`` (or one of a list of alternatives) occurs as a whole token of the normalised ``text``."""
    options = value if isinstance(value, list) else [value]
    return any(_norm(str(option)) and _token(str(option)).search(text) for option in options)


def _workspace_file(folder: Path, args: dict[str, Any]) -> str | None:
    """The text of the checked workspace file; None when it is not there; ``RefusedFile`` for a symlink on
    the way, a FIFO, a device, a hard link or a file over ``max_bytes``."""
    data = read_beneath(folder / "workspace", str(args["path"]), int(args.get("max_bytes", FILE_MAX_BYTES)))
    return None if data is None else data.decode(errors="replace")


def file_exists(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    return _workspace_file(folder, args) is not None


def file_equals(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    text = _workspace_file(folder, args)
    return text is not None and text.strip() == str(args["value"]).strip()


def file_contains(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    """Each of ``values`` is a whole token of the file, whose normalised text is at most ``max_chars``."""
    text = _workspace_file(folder, args)
    if text is None:
        return False
    normal = _capped(text, int(args.get("max_chars", FILE_MAX_CHARS)), f"file {args['path']!r}")
    return all(_has(normal, v) for v in args["values"])


def _records(folder: Path, name: str) -> list[dict[str, Any]]:
    """The objects of a JSON state file (calendar events, mail messages); ``Refused`` for a file that is not JSON."""
    try:
        value = read_json(folder / name, [], STATE_MAX_BYTES)
    except (ValueError, RecursionError):
        raise Refused(f"{name} is not valid JSON") from None
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text(record: dict[str, Any], key: str) -> str:
    value = record.get(key, "")
    return value if isinstance(value, str) else ""


def _read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a rollout's database: the file must be a plain one (no symlink, FIFO or extra
    hard link), schema code is untrusted, and only reads (and the task's own functions and CTEs) are allowed."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        raise Refused(f"{path.name} is not a plain file")
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=0)
    if hasattr(conn, "enable_load_extension"):
        conn.enable_load_extension(False)
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.set_authorizer(_read_authorizer)
    return conn


_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


def _read_authorizer(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() == "load_extension":
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


class _Deadline:
    """A progress handler that aborts the running statement once ``budget_s`` has passed."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.at = time.monotonic() + budget_s
        self.hit = False

    def __call__(self) -> int:
        self.hit = time.monotonic() > self.at
        return 1 if self.hit else 0


def sql_equals(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    """A read-only query over the final database returns exactly ``rows``; a database holding a view or a trigger
    is refused (a view can stand in for the table the query reads), and the query stops after a time budget."""
    path = folder / sqldb.DB_FILE
    try:
        conn = _read_only(path)
    except FileNotFoundError:
        return False
    budget = float(SQL_TIME_BUDGET_S)
    deadline = _Deadline(budget)
    conn.set_progress_handler(deadline, 1000)
    try:
        schema = conn.execute("SELECT type, name FROM sqlite_master WHERE type NOT IN ('table', 'index')").fetchall()
        if schema:
            named = ", ".join(f"{kind} {name!r}" for kind, name in schema[:5])
            raise Refused(f"the database holds {named}: views and triggers are not allowed")
        want = args["rows"]
        rows = [list(r) for r in conn.execute(args["query"]).fetchmany(len(want) + 1)]
    except sqlite3.Error as exc:
        if deadline.hit:
            raise Refused(f"the query ran past its budget of {budget:g} s") from None
        raise Refused(f"the query failed: {str(exc)[:200]}") from None
    finally:
        conn.close()
    return rows == want


def event_exists(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    """An event whose title contains ``title`` (and starts at ``start``, with ``attendees``, when given)."""
    for event in _records(folder, calendar.FILE):
        if _norm(args["title"]) not in _norm(_text(event, "title")):
            continue
        if "start" in args and event.get("start") != args["start"]:
            continue
        attendees = event.get("attendees")
        invited = {a for a in attendees if isinstance(a, str)} if isinstance(attendees, list) else set()
        if not set(args.get("attendees", [])) <= invited:
            continue
        return True
    return False


def event_absent(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    return not any(_norm(args["title"]) in _norm(_text(e, "title")) for e in _records(folder, calendar.FILE))


def mail_sent(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    """A sent message to ``to`` whose subject holds ``subject_contains`` and whose body holds each of
    ``body_contains``, as whole tokens; a checked subject over ``max_subject_chars`` or a checked body over
    ``max_chars`` (normalised) does not count (the reason is recorded when no message counts)."""
    subject_value, body_values = args.get("subject_contains"), list(args.get("body_contains", []))
    subject_cap = int(args.get("max_subject_chars", SUBJECT_MAX_CHARS))
    body_cap = int(args.get("max_chars", BODY_MAX_CHARS))
    refused: Refused | None = None
    for m in _records(folder, mail.FILE):
        recipients = m.get("to")
        if m.get("folder") != "sent" or not isinstance(recipients, list) or args["to"] not in recipients:
            continue
        try:
            if subject_value and not _has(_capped(_text(m, "subject"), subject_cap, "the subject"), subject_value):
                continue
            if body_values and not all(_has(_capped(_text(m, "body"), body_cap, "the body"), v) for v in body_values):
                continue
        except Refused as exc:
            refused = exc
            continue
        return True
    if refused is not None:
        raise refused
    return False


def answer_contains(_folder: Path, answer: str | None, args: dict[str, Any]) -> bool:
    """``value`` is a whole token of the final answer, which is at most ``max_chars`` characters normalised
    (default ``ANSWER_MAX_CHARS``, or 4x the value's length when that is more)."""
    if answer is None:
        return False
    value = args["value"]
    longest = max(len(str(v)) for v in value) if isinstance(value, list) and value else len(str(value))
    cap = int(args.get("max_chars", max(ANSWER_MAX_CHARS, 4 * longest)))
    return _has(_capped(answer, cap, "the final answer"), value)


CHECKS: dict[str, Check] = {
    "file_exists": file_exists,
    "file_equals": file_equals,
    "file_contains": file_contains,
    "sql_equals": sql_equals,
    "event_exists": event_exists,
    "event_absent": event_absent,
    "mail_sent": mail_sent,
    "answer_contains": answer_contains,
}


def _label(index: int, criterion: Criterion) -> str:
    return criterion.name or f"{index}:{criterion.kind}"


def score(task: Task, folder: Path, final_answer: str | None = None) -> CheckResult:
    """The reward of a rollout whose final state is in ``folder`` (a missing folder scores 0)."""
    total = sum(c.weight for c in task.checker)
    passed = 0.0
    breakdown: dict[str, dict[str, Any]] = {}
    for index, criterion in enumerate(task.checker):
        check = CHECKS.get(criterion.kind)
        if check is None:
            raise InvalidRequest(f"task {task.id}: unknown checker kind {criterion.kind!r}")
        entry: dict[str, Any] = {"weight": criterion.weight}
        try:
            ok = folder.is_dir() and check(folder, final_answer, criterion.args)
        except KeyError as exc:
            raise InvalidRequest(f"task {task.id}: criterion {criterion.kind} lacks argument {exc}") from None
        except (Refused, RefusedFile) as exc:
            ok, entry["reason"] = False, exc.reason
        passed += criterion.weight if ok else 0.0
        breakdown[_label(index, criterion)] = {"passed": bool(ok), **entry}
    return CheckResult(reward=round(passed / total, 6), breakdown=breakdown)


__all__ = ["CHECKS", "CheckResult", "Refused", "score"]
