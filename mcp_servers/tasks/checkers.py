"""Score a rollout by executing checks against its final env state (and final answer): checklist partial credit.

Each criterion passes or fails; the reward is the passed weight over the total weight, in [0, 1].
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollwire.mcp_servers.envs import calendar, mail, sqldb
from rollwire.mcp_servers.state import read_json
from rollwire.mcp_servers.tasks.schema import Criterion, Task

from rollwire.errors import InvalidRequest


@dataclass
class CheckResult:
    reward: float
    breakdown: dict[str, dict[str, Any]] = field(default_factory=dict)


Check = Callable[[Path, str | None, dict[str, Any]], bool]


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _file(folder: Path, rel: str) -> Path | None:
    root = folder / "workspace"
    target = (root / rel).resolve()
    return target if target.is_file() and root.resolve() in target.parents else None


def file_exists(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    return _file(folder, args["path"]) is not None


def file_equals(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    target = _file(folder, args["path"])
    return target is not None and target.read_text(errors="replace").strip() == str(args["value"]).strip()


def file_contains(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    target = _file(folder, args["path"])
    if target is None:
        return False
    text = _norm(target.read_text(errors="replace"))
    return all(_norm(str(v)) in text for v in args["values"])


def sql_equals(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    """A read-only query over the final database returns exactly ``rows``."""
    path = folder / sqldb.DB_FILE
    if not path.exists():
        return False
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = [list(r) for r in conn.execute(args["query"]).fetchall()]
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return rows == args["rows"]


def event_exists(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    """An event whose title contains ``title`` (and starts at ``start``, with ``attendees``, when given)."""
    for event in read_json(folder / calendar.FILE, []):
        if _norm(args["title"]) not in _norm(event.get("title", "")):
            continue
        if "start" in args and event.get("start") != args["start"]:
            continue
        if not set(args.get("attendees", [])) <= set(event.get("attendees", [])):
            continue
        return True
    return False


def event_absent(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    return not any(_norm(args["title"]) in _norm(e.get("title", "")) for e in read_json(folder / calendar.FILE, []))


def mail_sent(folder: Path, _answer: str | None, args: dict[str, Any]) -> bool:
    """A sent message to ``to`` whose subject/body contain the given strings."""
    for m in read_json(folder / mail.FILE, []):
        if m.get("folder") != "sent" or args["to"] not in m.get("to", []):
            continue
        if _norm(args.get("subject_contains", "")) not in _norm(m.get("subject", "")):
            continue
        if all(_norm(str(v)) in _norm(m.get("body", "")) for v in args.get("body_contains", [])):
            return True
    return False


def answer_contains(_folder: Path, answer: str | None, args: dict[str, Any]) -> bool:
    return answer is not None and _norm(str(args["value"])) in _norm(answer)


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
        try:
            ok = folder.is_dir() and check(folder, final_answer, criterion.args)
        except KeyError as exc:
            raise InvalidRequest(f"task {task.id}: criterion {criterion.kind} lacks argument {exc}") from None
        passed += criterion.weight if ok else 0.0
        breakdown[_label(index, criterion)] = {"passed": bool(ok), "weight": criterion.weight}
    return CheckResult(reward=round(passed / total, 6), breakdown=breakdown)


__all__ = ["CHECKS", "CheckResult", "score"]
