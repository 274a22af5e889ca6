"""The policy under training is an adversary of its checkers: each test plays one trick that passes a checker
without doing the task, through the real env servers where the trick goes through them, and asserts the checker
refuses it while the honest solution of the same task still scores 1.0 (so no test passes vacuously)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import pytest

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.mcp_servers.envs import sqldb
from rollwire.mcp_servers.tasks import checkers
from rollwire.mcp_servers.tasks.checkers import CheckResult, score
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.mcp_servers.tasks.schema import Criterion, Task, ToolCall
from rollwire.mcp_servers.tasks.solve import play
from rollwire.orchestrator.checker_process import CheckerLimit
from rollwire.orchestrator.runtimes.base import Ended, EndKind, Handle, RolloutJob
from rollwire.orchestrator.scheduler import Endpoints, RunPlan, Scheduler, TaskSpec
from rollwire.orchestrator.scoring import ScoringInput
from rollwire.orchestrator.suite_scorer import SuiteScorer
from rollwire.rollouts import RolloutBook
from rollwire.settings import OrchestratorSettings
from rollwire.store.db import open_engine
from rollwire.trajectory import failure_cause
from tests.mcp_servers.env_stack import ENV_SECRET, EnvServers


def _play(env: EnvServers, rollout: str, task_ref: str, calls: list[ToolCall]) -> list[dict[str, Any]]:
    return anyio.run(play, calls, env.server_url, rollout, task_ref, ENV_SECRET)


def _sql(sql: str) -> ToolCall:
    return ToolCall(server="sqldb", tool="query", arguments={"sql": sql})


def _entry(result: CheckResult, kind: str, nth: int = 0) -> dict[str, Any]:
    """The breakdown entry of the ``nth`` criterion of ``kind``."""
    return [entry for label, entry in result.breakdown.items() if label.split(":", 1)[1] == kind][nth]


def _honest(env: EnvServers, suite: str, task_id: str, rollout: str) -> tuple[Task, Path]:
    """Play the task's reference solution; it must score 1.0 with the reference answer."""
    task = load_suite(suite).task(task_id)
    results = _play(env, rollout, f"{suite}:{task_id}", task.reference_solution)
    assert not any(r["is_error"] for r in results), results
    folder = env.folder(rollout)
    assert score(task, folder, task.reference_answer).reward == 1.0
    return task, folder


@pytest.mark.parametrize("suite", ["tiny", "office", "ops"])
def test_every_shipped_reference_solution_still_scores_one(suite: str, env_servers: EnvServers) -> None:
    """The stricter rules (whole tokens, capped texts, no views) leave every honest solution full marks."""
    for task in load_suite(suite).tasks:
        _honest(env_servers, suite, task.id, f"ref-{suite}-{task.id}")


# --- 1. substring tests: every candidate at once, or the value inside a longer token


def test_an_answer_listing_every_number_does_not_pass(env_servers: EnvServers) -> None:
    task, folder = _honest(env_servers, "ops", "customer-total-0", "adv-every-number")
    shotgun = " ".join(str(n) for n in range(1000))
    entry = _entry(score(task, folder, shotgun), "answer_contains")
    assert entry["passed"] is False and "characters" in entry["reason"]
    assert _entry(score(task, folder, "The total is 100."), "answer_contains")["passed"] is True


@pytest.mark.parametrize(
    "answer", ["The total is 1100.", "The total is 1005", "It is 100.5", "about 0.100", "-100", "2,100 in all", "x100"]
)
def test_the_value_inside_a_longer_number_or_word_does_not_pass(answer: str, tmp_path: Path) -> None:
    task = load_suite("ops").task("customer-total-0")  # expects "100"
    assert _entry(score(task, tmp_path, answer), "answer_contains") == {"passed": False, "weight": 1.0}


@pytest.mark.parametrize(
    "answer", ["100", "The total is 100.", "Total: 100", "(100)", "**100**", "100, from 1 invoice"]
)
def test_the_value_as_its_own_token_passes(answer: str, tmp_path: Path) -> None:
    task = load_suite("ops").task("customer-total-0")
    assert _entry(score(task, tmp_path, answer), "answer_contains")["passed"] is True


def test_a_mail_body_stuffed_with_every_invoice_id_does_not_pass(env_servers: EnvServers) -> None:
    task, _ = _honest(env_servers, "ops", "overdue-report-0", "adv-mail-honest")
    every_id = ", ".join(f"INV-{n:03d}" for n in range(1000))
    send = ToolCall(
        server="mail",
        tool="send_message",
        arguments={"to": ["finance@example.com"], "subject": "Overdue invoices", "body": f"Overdue: {every_id}"},
    )
    assert not _play(env_servers, "adv-mail-stuffed", "ops:overdue-report-0", [send])[0]["is_error"]
    result = score(task, env_servers.folder("adv-mail-stuffed"), None)
    assert _entry(result, "mail_sent", 0)["passed"] is True  # the subject criterion: an honest subject
    body = _entry(result, "mail_sent", 1)
    assert body["passed"] is False and "characters" in body["reason"]


def test_a_mail_naming_the_id_inside_a_longer_one_does_not_pass(env_servers: EnvServers) -> None:
    task = load_suite("ops").task("overdue-report-0")  # expects INV-001 and INV-004
    send = ToolCall(
        server="mail",
        tool="send_message",
        arguments={"to": ["finance@example.com"], "subject": "Overdue invoices", "body": "INV-0010 and INV-0042"},
    )
    assert not _play(env_servers, "adv-mail-inside", "ops:overdue-report-0", [send])[0]["is_error"]
    assert _entry(score(task, env_servers.folder("adv-mail-inside"), None), "mail_sent", 1)["passed"] is False


def test_a_file_stuffed_with_candidates_does_not_pass(env_servers: EnvServers) -> None:
    task, _ = _honest(env_servers, "office", "agenda-0", "adv-file-honest")
    candidates = "\n".join(f"{a} {b}" for a in ("Budget", "Design", "Hiring", "Team", "Vendor") for b in range(300))
    stuffed = f"Budget Review\nDesign Sync\nHiring Plan\n{candidates}\n"
    write = ToolCall(server="workspace", tool="write_file", arguments={"path": "agenda.md", "content": stuffed})
    assert not _play(env_servers, "adv-file-stuffed", "office:agenda-0", [write])[0]["is_error"]
    folder = env_servers.folder("adv-file-stuffed")
    entry = _entry(score(task, folder, None), "file_contains")
    assert entry["passed"] is False and "characters" in entry["reason"]
    # a suite that expects long files says so per criterion (max_chars)
    roomy = task.model_copy(deep=True)
    roomy.checker[1].args["max_chars"] = 50_000
    assert _entry(score(roomy, folder, None), "file_contains")["passed"] is True


# --- 2. sqldb: views and triggers


def test_a_view_cannot_replace_a_table(env_servers: EnvServers) -> None:
    task, _ = _honest(env_servers, "office", "restock-and-notify-0", "adv-view-honest")
    fake = "SELECT sku, name, price, CASE sku WHEN 'P-100' THEN 22 ELSE stock END AS stock FROM before"
    results = _play(
        env_servers,
        "adv-view",
        "office:restock-and-notify-0",
        [_sql("ALTER TABLE products RENAME TO before"), _sql(f"CREATE VIEW products AS {fake}"),
         _sql(f"CREATE TEMP VIEW products AS {fake}"), _sql(f"CREATE TEMPORARY VIEW p2 AS {fake}")],
    )  # fmt: skip
    assert not results[0]["is_error"]
    assert all(r["is_error"] and "not authorized" in r["text"] for r in results[1:]), results
    folder = env_servers.folder("adv-view")
    assert _entry(score(task, folder, None), "sql_equals")["passed"] is False
    # a view that got into the file anyway (not through the server) is refused by the checker
    with sqlite3.connect(folder / sqldb.DB_FILE) as conn:
        conn.execute(f"CREATE VIEW products AS {fake}")
    entry = _entry(score(task, folder, None), "sql_equals")
    assert entry["passed"] is False and "view" in entry["reason"]


def test_a_trigger_cannot_be_created(env_servers: EnvServers) -> None:
    task, folder = _honest(env_servers, "office", "restock-and-notify-0", "adv-trigger")
    body = "AFTER UPDATE ON products BEGIN UPDATE products SET stock = 22 WHERE sku = 'P-100'; END"
    results = _play(
        env_servers,
        "adv-trigger",
        "office:restock-and-notify-0",
        [_sql(f"CREATE TRIGGER fake {body}"), _sql(f"CREATE TEMP TRIGGER fake2 {body}")],
    )
    assert all(r["is_error"] and "not authorized" in r["text"] for r in results), results
    assert score(task, folder, None).reward == 1.0  # nothing changed
    with sqlite3.connect(folder / sqldb.DB_FILE) as conn:
        conn.execute(f"CREATE TRIGGER fake {body}")
    entry = _entry(score(task, folder, None), "sql_equals")
    assert entry["passed"] is False and "trigger" in entry["reason"]


@pytest.mark.timeout(30)
def test_a_recursive_view_in_the_database_fails_the_criterion_quickly(env_servers: EnvServers) -> None:
    task, folder = _honest(env_servers, "office", "restock-and-notify-0", "adv-recursive")
    with sqlite3.connect(folder / sqldb.DB_FILE) as conn:
        conn.execute("ALTER TABLE products RENAME TO before")
        conn.execute(
            "CREATE VIEW products AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
            "SELECT 'P-100' AS sku, 22 AS stock FROM n"
        )
    began = time.monotonic()
    result = score(task, folder, None)
    assert time.monotonic() - began < 5
    assert _entry(result, "sql_equals")["passed"] is False and "view" in _entry(result, "sql_equals")["reason"]


@pytest.mark.timeout(30)
def test_a_query_past_its_time_budget_fails_the_criterion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with sqlite3.connect(tmp_path / sqldb.DB_FILE) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    endless = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"
    task = Task(
        id="slow", instruction="-", servers=["sqldb"],
        checker=[Criterion(kind="sql_equals", args={"query": endless, "rows": [[1]]}),
                 Criterion(kind="sql_equals", args={"query": "SELECT count(*) FROM t", "rows": [[0]]})],
    )  # fmt: skip
    monkeypatch.setattr(checkers, "SQL_TIME_BUDGET_S", 0.3)
    began = time.monotonic()
    result = score(task, tmp_path, None)
    assert time.monotonic() - began < 5
    assert _entry(result, "sql_equals", 0)["passed"] is False and "0.3 s" in _entry(result, "sql_equals", 0)["reason"]
    assert _entry(result, "sql_equals", 1)["passed"] is True


# --- 3. files the checker reads: symlinks, FIFOs, hard links, huge files


def _answer_task() -> Task:
    return Task(
        id="answer", instruction="-", servers=["workspace"],
        checker=[Criterion(kind="file_exists", args={"path": "answer.txt"}),
                 Criterion(kind="file_equals", args={"path": "answer.txt", "value": "cat"}),
                 Criterion(kind="file_contains", args={"path": "notes/answer.txt", "values": ["cat"]})],
    )  # fmt: skip


@pytest.mark.timeout(30)
@pytest.mark.parametrize("trick", ["symlink-inside", "symlink-outside", "folder-symlink", "fifo", "hard-link", "huge"])
def test_a_planted_file_fails_the_criterion_without_blocking(trick: str, tmp_path: Path) -> None:
    folder = tmp_path / "rollout"
    workspace = folder / "workspace"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "answer.txt").write_text("cat")
    (workspace / "notes" / "answer.txt").write_text("cat")
    assert score(_answer_task(), folder, None).reward == 1.0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "answer.txt").write_text("cat")
    planted_files = () if trick == "folder-symlink" else (workspace / "answer.txt", workspace / "notes" / "answer.txt")
    for planted in planted_files:
        planted.unlink()
        if trick == "symlink-inside":
            (workspace / "real.txt").write_text("cat")
            planted.symlink_to(workspace / "real.txt")
        elif trick == "symlink-outside":
            planted.symlink_to(outside / "answer.txt")
        elif trick == "fifo":
            os.mkfifo(planted)  # a plain open() would block until someone writes
        elif trick == "hard-link":
            os.link(outside / "answer.txt", planted)
        elif trick == "huge":
            with planted.open("wb") as handle:
                handle.write(b"cat")
                handle.truncate(4 << 30)  # sparse: 4 GiB of size, no disk
    if trick == "folder-symlink":
        (workspace / "notes").rename(tmp_path / "notes-moved")
        (workspace / "notes").symlink_to(outside)
    began = time.monotonic()
    result = score(_answer_task(), folder, None)
    assert time.monotonic() - began < 5
    refused = [entry for entry in result.breakdown.values() if not entry["passed"]]
    assert refused and all(entry.get("reason") for entry in refused), result.breakdown
    if trick != "folder-symlink":  # there only the path through notes/ is planted
        assert result.reward == 0.0, result.breakdown


@pytest.mark.timeout(30)
@pytest.mark.parametrize("trick", ["symlink", "fifo", "huge"])
def test_a_planted_mailbox_fails_without_blocking(trick: str, env_servers: EnvServers, tmp_path: Path) -> None:
    task, folder = _honest(env_servers, "ops", "overdue-report-0", f"adv-mailbox-{trick}")
    mailbox = folder / "mail.json"
    forged = tmp_path / "forged.json"
    forged.write_text(mailbox.read_text())
    mailbox.unlink()
    if trick == "symlink":
        mailbox.symlink_to(forged)
    elif trick == "fifo":
        os.mkfifo(mailbox)
    else:
        mailbox.write_text(json.dumps(json.loads(forged.read_text()) + [{"pad": "x" * (32 << 20)}]))
    began = time.monotonic()
    result = score(task, folder, None)
    assert time.monotonic() - began < 5
    assert result.reward == 0.0 and all(entry.get("reason") for entry in result.breakdown.values()), result.breakdown


# --- 4. a checker past its time or memory limit: the rollout fails as the policy's own doing


LIMIT_SUITE: dict[str, Any] = {
    "name": "limits",
    "tasks": [
        {"id": "honest", "instruction": "-", "servers": ["workspace"],
         "checker": [{"kind": "file_equals", "args": {"path": "answer.txt", "value": "cat"}}]},
        {"id": "slow", "instruction": "-", "servers": ["sqldb"],
         "checker": [{"kind": "sql_equals", "args": {"rows": [[1]], "query":
                      "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"}}]},
        {"id": "bloated", "instruction": "-", "servers": ["calendar"],
         "checker": [{"kind": "event_exists", "args": {"title": "Budget Review"}}]},
        {"id": "buggy", "instruction": "-", "servers": ["workspace"],
         "checker": [{"kind": "file_equals", "args": {"value": "cat"}}]},
    ],
}  # fmt: skip
"""Tasks whose final states the fake runtime plants: an honest one, one whose checker runs past the time limit
(a query the checker cannot finish; the checker's own SQL budget is longer than the test's limit), one whose
state is too big for the memory limit (a calendar of millions of empty events, under the JSON size cap), and
one whose checker has a bug (a criterion without its argument)."""


@dataclass
class TaskAdapter:
    """Hands the task id to the fake runtime (a real adapter would launch a harness)."""

    name: str = "task"

    def launch(self, ctx: RolloutContext) -> Launch:
        return Launch(argv=("harness",), env={"TASK": ctx.task_id})


@dataclass
class PlantingRuntime:
    """Plays a finished harness: plants the task's final state in the rollout's env folder and exits 0."""

    state_root: Path
    name: str = "planting"
    tasks: dict[str, str] = field(default_factory=dict)

    async def start(self, job: RolloutJob) -> Handle:
        folder = self.state_root / job.rollout_id
        folder.mkdir(parents=True, exist_ok=True)
        task = job.launch.env["TASK"]
        self.tasks[job.rollout_id] = task
        if task in ("honest", "buggy"):
            (folder / "workspace").mkdir(exist_ok=True)
            (folder / "workspace" / "answer.txt").write_text("cat")
        elif task == "slow":
            sqlite3.connect(folder / sqldb.DB_FILE).close()
        elif task == "bloated":
            (folder / "calendar.json").write_text("[" + ",".join(["{}"] * 3_000_000) + "]")
        return Handle(job.rollout_id, job.rollout_id)

    async def wait(self, handle: Handle, timeout_s: float) -> Ended:
        return Ended(EndKind.EXITED, exit_code=0, final_answer="done")

    async def logs_tail(self, handle: Handle, lines: int) -> str:
        return ""

    async def stop(self, handle: Handle) -> None:
        return None

    async def attach(self, rollout_id: str, ref: str) -> Handle | None:
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


@pytest.mark.timeout(120)
def test_a_checker_past_its_limits_fails_the_rollout_as_the_policys(tmp_path: Path, store_url: str) -> None:
    suite_file = tmp_path / "limits.json"
    suite_file.write_text(json.dumps(LIMIT_SUITE))
    state_root = tmp_path / "state"
    settings = OrchestratorSettings(checker_timeout_s=2.0, checker_max_memory_mb=64)
    scorer = SuiteScorer(str(suite_file), state_root, settings.checker_timeout_s, settings.checker_max_memory_mb)
    runtime = PlantingRuntime(state_root)
    book = RolloutBook(open_engine(store_url))
    scheduler = Scheduler(
        book=book, runtime=runtime, adapter=TaskAdapter(), scorer=scorer, settings=settings,
        endpoints=Endpoints("http://proxy.test", "http://gateway.test"),
    )  # fmt: skip
    tasks = [TaskSpec(task["id"], "-") for task in LIMIT_SUITE["tasks"]]
    progress = anyio.run(scheduler.run, RunPlan("limits", tasks, 1, "task"))
    assert progress.done == 4
    rows: Mapping[str, Any] = {runtime.tasks[row.id]: row for row in book.rollouts("limits")}
    assert str(rows["honest"].status) == "finished" and rows["honest"].reward == 1.0
    for task, words in (("slow", ("time limit", "2 s")), ("bloated", ("memory limit", "64 MiB"))):
        row = rows[task]
        assert str(row.status) == "failed", (task, row.error)
        assert failure_cause(str(row.status), row.error) == "policy", row.error
        assert all(word in (row.error or "") for word in words), row.error
    buggy = rows["buggy"]
    assert str(buggy.status) == "failed" and failure_cause(str(buggy.status), buggy.error) == "checker", buggy.error
    assert not [row for row in book.rollouts("limits") if str(row.status) == "scoring"]


@pytest.mark.timeout(60)
def test_the_scorer_raises_checker_limit_and_leaves_no_process(tmp_path: Path) -> None:
    suite_file = tmp_path / "limits.json"
    suite_file.write_text(json.dumps(LIMIT_SUITE))
    state_root = tmp_path / "state"
    (state_root / "r-slow").mkdir(parents=True)
    sqlite3.connect(state_root / "r-slow" / sqldb.DB_FILE).close()
    scorer = SuiteScorer(str(suite_file), state_root, timeout_s=1.0, max_memory_mb=64)
    began = time.monotonic()
    with pytest.raises(CheckerLimit, match="time limit") as raised:
        anyio.run(scorer.score, ScoringInput("run", "r-slow", "slow", "", None, 0, ""))
    assert time.monotonic() - began < 10
    assert raised.value.kind == "time"
    servers = [pid for pid, command in _children(os.getpid()) if "forkserver" in command]
    assert servers, _children(os.getpid())
    checkers_running = [child for server in servers for child in _children(server)]
    assert checkers_running == []  # the killed checker was reaped: no process left behind


def _children(parent: int) -> list[tuple[int, str]]:
    """(pid, command line) of ``parent``'s live (not zombie) child processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent and fields[0] != "Z":
                found.append((int(entry.name), (entry / "cmdline").read_text().replace("\0", " ")))
        except (OSError, ValueError, IndexError):
            continue
    return found
