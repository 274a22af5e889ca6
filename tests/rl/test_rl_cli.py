"""`rollwire rl` through the real stack: killed with SIGKILL (the command and every process it started) during
its run, then run again with the same --run-id and --out, it finishes its updates with no group trained twice
or lost, and the rollouts the kill cut short are classed infrastructure and retried.

The policy comes warm from a shortened `rollwire demo` (teacher SFT plus one update): the tiny model from
scratch earns no reward on the tiny suite, so it would have no group to learn from.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rollwire.rollouts import RolloutBook
from rollwire.run_figures import figures
from rollwire.store.db import open_engine
from tests.polling import wait_until

WARM = ["-K", "1", "-G", "4", "--train-tasks", "6", "--teacher-tasks", "6", "--tasks-per-iteration", "2",
        "--eval-group", "1", "--eval-tasks", "2", "--concurrency", "6"]  # fmt: skip
# The reference harness runs with the demo's options (--option max_tokens=64 max_turns=1) in these tests: the warm
# model is the demo's, trained on one 64-token call per rollout; at the harness's defaults (4 turns, 128 tokens) it
# would sample past what it learned, and each rollout would cost 4x the CPU. The demo runs it the same way.
TASKS = "write-cat,write-dog,write-sun,write-red,write-box,write-cup"  # the warm demo's six train tasks
ITERATIONS = 4


def _env(tmp: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "ROLLWIRE_HOME": str(tmp / "home")}


@contextlib.contextmanager
def _started(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The command in its own session; whatever is left of it and its stack is killed on the way out."""
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, env=env, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("warm")
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "demo", *WARM, "--out", str(tmp / "o")]
    with _started(argv, _env(tmp), tmp / "demo.log") as process:
        assert process.wait(timeout=600) == 0, (tmp / "demo.log").read_text()[-3000:]
    return tmp / "o" / "checkpoints" / (tmp / "o" / "checkpoints" / "latest").read_text().strip()


def _state(out: Path) -> dict[str, Any] | None:
    pointer = out / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):  # a checkpoint being replaced
        return json.loads((out / "checkpoints" / pointer.read_text().strip() / "trainer_state.json").read_text())
    return None


def _in_flight(out: Path) -> dict[str, str]:
    """Rollouts of the run mid-flight in the store, by status. A read-write connection: a read-only one cannot
    recover the WAL index a killed writer left, and reads the main file alone (rows as they were long before)."""
    if not (out / "store.db").is_file():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(out / "store.db", timeout=5)) as db:
            rows = db.execute("select id, status from rollout where run_id = 'rl-kill' and status in "
                              "('STARTING', 'RUNNING', 'SCORING')").fetchall()  # fmt: skip
    except sqlite3.OperationalError:  # no table yet
        return {}
    return dict(rows)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_kill_9_and_rerun_resumes_with_no_group_trained_twice_or_lost(warm_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "rl"
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "rl", "--suite", "tiny",
            "--model", str(warm_model), "--tasks", TASKS, "-K", str(ITERATIONS), "-G", "4", "--groups-per-step", "2",
            "--max-lag", "1", "--concurrency", "6", "--option", "max_tokens=64", "--option", "max_turns=1",
            "--run-id", "rl-kill", "--out", str(out)]  # fmt: skip
    with _started(argv, _env(tmp_path), tmp_path / "first.log") as first:
        # the signal: the first update's checkpoint is in place (v1) and the sampler has rollouts running ahead of it
        wait_until(lambda: first.poll() is not None or ((_state(out) or {}).get("policy_version", 0) >= 1
                                                         and "RUNNING" in _in_flight(out).values()),
                   "the first update's checkpoint with rollouts running", timeout_s=600, every_s=0.01)  # fmt: skip
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        os.killpg(first.pid, signal.SIGKILL)  # the command and its whole stack, as an OOM killer or a node loss would
        first.wait()
    cut_short = {rollout_id for rollout_id, status in _in_flight(out).items() if status == "RUNNING"}
    assert cut_short  # read after the kill: harnesses the kill left mid-run (a row it left scoring is scored again)

    with _started(argv, _env(tmp_path), tmp_path / "second.log") as second:
        assert second.wait(timeout=900) == 0, (tmp_path / "second.log").read_text()[-3000:]
    state = _state(out)
    assert state is not None and state["policy_version"] == ITERATIONS
    consumed = list(state["trained_rollouts"])
    assert len(consumed) == len(set(consumed)), "a rollout was consumed twice"

    db = sqlite3.connect(out / "store.db")
    rows = {r[0]: r for r in db.execute(
        "select id, group_id, status, error, meta, finished_seq from rollout where run_id = 'rl-kill'")}  # fmt: skip
    retried = {json.loads(r[4]).get("retry_of") for r in rows.values()} - {None}
    for rollout_id in cut_short:  # each rollout the kill cut short failed as the platform's, and ran again
        status, error = rows[rollout_id][2], rows[rollout_id][3] or ""
        assert status == "FAILED" and error.startswith("infrastructure"), (status, error)
        assert rollout_id in retried
    assert _groups_read_whole(list(rows.values()), retried, state) >= 2 * ITERATIONS
    results = json.loads((out / "results.json").read_text())
    assert results["start_version"] == 0 and results["updates"][-1]["version"] == ITERATIONS
    assert {u["version"] for u in results["updates"]} == set(range(ITERATIONS - len(results["updates"]) + 1, ITERATIONS + 1))
    draws = [d["index"] for d in results["draws"]]
    assert draws == sorted(set(draws)) and draws[0] == 0  # the rerun's draws carry on from the store's


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_evaluations_run_beside_training_and_count_only_pure_versions(warm_model: Path, tmp_path: Path) -> None:
    """--eval-every 1: the held-out split at the start version, after each update and at the end, beside sampling;
    each result kept is stored with its version, and every model call of its rollouts sampled that version."""
    out = tmp_path / "rl"
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "rl", "--suite", "tiny",
            "--model", str(warm_model), "--tasks", TASKS, "-K", "2", "-G", "4", "--groups-per-step", "2",
            "--eval-every", "1", "--eval-group", "2", "--concurrency", "6", "--option", "max_tokens=64",
            "--option", "max_turns=1", "--run-id", "rl-eval", "--out", str(out)]  # fmt: skip
    with _started(argv, _env(tmp_path), tmp_path / "rl.log") as process:
        assert process.wait(timeout=600) == 0, (tmp_path / "rl.log").read_text()[-3000:]
    results = json.loads((out / "results.json").read_text())
    kept = results["evaluations"]
    assert kept and kept[-1]["version"] == 2  # the final version is always evaluated
    assert all(0.0 <= e["pass@1"] <= e["pass@2"] <= 1.0 and e["pass^2"] <= e["pass@1"] for e in kept)
    db = sqlite3.connect(out / "store.db")
    rows = db.execute("select r.id, r.meta, m.policy_version from rollout r join modelcall m on m.rollout_id = r.id "
                      "where r.run_id = 'rl-eval'").fetchall()  # fmt: skip
    evals = [(rid, json.loads(meta), version) for rid, meta, version in rows if json.loads(meta).get("purpose") == "eval"]
    kept_versions = {e["version"] for e in kept}
    for _rid, meta, version in evals:
        if "eval_discarded" in meta:
            assert "a push landed during it" in meta["eval_discarded"]
        else:
            assert version == meta["policy_version"] and meta["policy_version"] in kept_versions
    assert all(e["rollouts"] == 8 * 2 for e in kept)  # every held-out task, --eval-group rollouts each
    discarded = any("eval_discarded" in meta for _, meta, _ in evals)
    assert (results["evaluations_discarded"] > 0) == discarded


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rl_joins_a_running_stack(warm_model: Path, tmp_path: Path) -> None:
    """--stack: the run goes into the store of the stack `rollwire up` started, and the stack's engine serves the
    pushed policy afterwards (a new call through its proxy is recorded at the new version)."""
    home = tmp_path / "home"
    env = {**_env(tmp_path), "ROLLWIRE_HOME": str(home)}
    ports = [f"--{part}-port=0" for part in ("proxy", "admin", "engine", "env", "gateway")]
    up = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "up", "--model", str(warm_model), *ports]
    with _started(up, env, tmp_path / "up.log") as stack_process:
        stack_file = home / "stack.json"
        wait_until(stack_file.is_file, "the stack file", timeout_s=300)
        assert stack_process.poll() is None, (tmp_path / "up.log").read_text()[-2000:]
        argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "rl", "--suite", "tiny", "--stack",
                str(stack_file), "--model", str(warm_model), "--tasks", TASKS, "-K", "1", "-G", "4",
                "--groups-per-step", "2", "--max-lag", "0", "--option", "max_tokens=64", "--option", "max_turns=1",
                "--run-id", "rl-join", "--out", str(tmp_path / "rl")]  # fmt: skip
        with _started(argv, env, tmp_path / "rl.log") as process:
            assert process.wait(timeout=600) == 0, (tmp_path / "rl.log").read_text()[-3000:]
        stack = json.loads(stack_file.read_text())
        headers = {"Authorization": f"Bearer {stack['operator_key']}"}
        with httpx.Client(base_url=stack["admin_url"], headers=headers, timeout=60) as admin:
            run = admin.post("/admin/v1/runs", json={}).json()["id"]
            rollout = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()[0]
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused")
        client.chat.completions.create(model=stack["model"], messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        db = sqlite3.connect(stack["db_url"].removeprefix("sqlite:///"))
        sampled = {row[0] for row in db.execute("select distinct m.policy_version from modelcall m join rollout r on "
                                                "m.rollout_id = r.id where r.run_id = 'rl-join'")}  # fmt: skip
        after = db.execute("select policy_version from modelcall where rollout_id = ?", (rollout["id"],)).fetchall()
        assert sampled == {0} and after == [(1,)]  # lockstep: the update's groups on v0; then the stack serves v1


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rl_follows_a_trainer_that_runs_elsewhere(warm_model: Path, tmp_path: Path) -> None:
    """--trainer external: the command samples and prints the `rollwire train` line of its recipe; that trainer,
    started here as its own process (as a Kubernetes Job runs it), trains and publishes, and the command follows
    the published versions: it draws within the staleness bound, and ends when the target version is published."""
    home = tmp_path / "home"
    env = {**_env(tmp_path), "ROLLWIRE_HOME": str(home)}
    ports = [f"--{part}-port=0" for part in ("proxy", "admin", "engine", "env", "gateway")]
    up = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "up", "--model", str(warm_model), *ports]
    steps, per_step, lag = 2, 2, 1
    with _started(up, env, tmp_path / "up.log") as stack_process:
        stack_file = home / "stack.json"
        wait_until(stack_file.is_file, "the stack file", timeout_s=300)
        assert stack_process.poll() is None, (tmp_path / "up.log").read_text()[-2000:]
        stack = json.loads(stack_file.read_text())
        out = tmp_path / "rl"
        argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "rl", "--suite", "tiny", "--stack",
                str(stack_file), "--model", str(warm_model), "--tasks", TASKS, "-K", str(steps), "-G", "4",
                "--groups-per-step", str(per_step), "--max-lag", str(lag), "--option", "max_tokens=64",
                "--option", "max_turns=1", "--trainer", "external", "--run-id", "rl-ext", "--out", str(out)]  # fmt: skip
        log = tmp_path / "rl.log"
        with _started(argv, env, log) as process:
            said = "train elsewhere with: "
            wait_until(lambda: process.poll() is not None or said in log.read_text(), "the trainer's command line",
                       timeout_s=180)
            line = next(x for x in log.read_text().splitlines() if said in x).split(said, 1)[1]
            train = [sys.executable, "-m", "rollwire.app.cli", *shlex.split(line)[1:], "--admin-url", stack["admin_url"],
                     "--operator-key", stack["operator_key"], "--engine-url", stack["engine_url"]]  # fmt: skip
            with _started(train, env, tmp_path / "train.log") as trainer:
                assert trainer.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()[-3000:]
                assert process.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert f"{steps} updates this session, policy v{steps}" in log.read_text()
    lines = [json.loads(x) for x in (out / "checkpoints" / "metrics.jsonl").read_text().splitlines()]
    assert [x["policy_version"] for x in lines] == [1, 2]
    db = sqlite3.connect(stack["db_url"].removeprefix("sqlite:///"))
    rows = {r[0]: (r[1], json.loads(r[2]), r[3]) for r in db.execute(
        "select id, group_id, meta, reward from rollout where run_id = 'rl-ext'")}  # fmt: skip
    trained = [rid for x in lines for rid in x["rollout_ids"]]
    assert len(trained) == len(set(trained)) == steps * per_step * 4
    by_group: dict[str, list[float]] = {}
    for rid in trained:
        group, meta, reward = rows[rid]
        assert meta["purpose"] == "train"
        by_group.setdefault(group, []).append(reward or 0.0)
    assert len(by_group) == steps * per_step and all(len(set(r)) > 1 for r in by_group.values())  # a spread each
    results = json.loads((out / "results.json").read_text())
    # the gate followed the trainer: no more drawn than its room, the trained and the left out allow
    left_out = results["groups_zero_variance"]
    assert len(results["draws"]) <= (lag + 1) * per_step + steps * per_step + left_out


def _groups_read_whole(rows: list[Any], retried: set[str], state: dict[str, Any]) -> int:
    """Every train group whose last rollout the trainer has read (cursor) is consumed whole or waits whole in the
    checkpoint's buffer: none is split between them, and the pending ones are not consumed. Returns how many."""
    consumed, pending = set(state["trained_rollouts"]), {t["rollout_id"] for t in state["pending"]}
    assert not pending & consumed
    groups: dict[str, list[Any]] = {}
    for row in rows:  # (id, group_id, status, error, meta, finished_seq)
        if row[0] not in retried and json.loads(row[4]).get("purpose") == "train":
            groups.setdefault(row[1], []).append(row)
    read = [g for g in groups.values() if all(r[5] is not None and r[5] <= state["cursor"] for r in g)]
    for members in read:
        ids = {r[0] for r in members}
        assert ids <= consumed or ids <= pending, f"group {members[0][1]} is split or lost"
    return len(read)


PARTS = {"engine": " engine ", "proxy": " proxy --upstream", "gateway": " mcp gateway ", "env": " mcp serve all "}
"""Each part of the command's stack (as the stack names it: env is the MCP env servers) -> its command line."""


def _part_pid(root: int, marker: str) -> int | None:
    """The descendant of ``root`` whose command line holds ``marker``."""
    todo, found = [root], []
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
                todo.append(int(child))
                with contextlib.suppress(OSError):
                    if marker in " " + Path(f"/proc/{child}/cmdline").read_text().replace("\0", " "):
                        found.append(int(child))
    return found[0] if found else None


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_each_part_killed_once_the_run_stops_and_a_rerun_finishes_it(warm_model: Path, tmp_path: Path) -> None:
    """The engine, the proxy, the gateway and the env servers, each SIGKILLed once while rollouts run: the command
    stops with one line naming the part, a rerun resumes, and the run reaches its updates with no group trained
    twice or lost and no rollout the fault touched scored as the policy's."""
    out, iterations = tmp_path / "rl", 9  # room for each kill to land before the last update (each cycle: 1-2 updates)
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "rl", "--suite", "tiny",
            "--model", str(warm_model), "--tasks", TASKS, "-K", str(iterations), "-G", "4", "--groups-per-step", "2",
            "--max-lag", "1", "--concurrency", "6", "--option", "max_tokens=64", "--option", "max_turns=1",
            "--run-id", "rl-kill", "--out", str(out)]  # fmt: skip
    for cycle, (part, marker) in enumerate(PARTS.items()):
        log = tmp_path / f"cycle{cycle}.log"
        before = (_state(out) or {}).get("policy_version", 0)
        stale = set(_in_flight(out))  # rows the last kill left mid-flight: not this command's

        def running_after_an_update() -> bool:
            fresh = {i for i, status in _in_flight(out).items() if status == "RUNNING"} - stale
            return (_state(out) or {}).get("policy_version", 0) > before and bool(fresh)

        with _started(argv, _env(tmp_path), log) as process:
            wait_until(lambda: process.poll() is not None or running_after_an_update(),
                       f"an update of this command with its rollouts running ({part})", timeout_s=600, every_s=0.01)  # fmt: skip
            assert process.poll() is None, log.read_text()[-3000:]
            pid = _part_pid(process.pid, marker)
            assert pid is not None, f"no {part} under the command"
            os.kill(pid, signal.SIGKILL)
            assert process.wait(timeout=180) != 0
        said = log.read_text().strip().splitlines()[-1]
        assert f"the {part} exited with status -9" in said and "resumes it" in said, said
    with _started(argv, _env(tmp_path), tmp_path / "last.log") as process:
        assert process.wait(timeout=900) == 0, (tmp_path / "last.log").read_text()[-3000:]
    state = _state(out)
    assert state is not None and state["policy_version"] == iterations
    consumed = list(state["trained_rollouts"])
    assert len(consumed) == len(set(consumed)), "a rollout was consumed twice"
    db = sqlite3.connect(out / "store.db")
    query = "select id, group_id, status, error, meta, finished_seq from rollout where run_id = 'rl-kill'"
    rows = db.execute(query).fetchall()
    failed = [(r[2], r[3]) for r in rows if r[2] in ("FAILED", "TIMED_OUT")]
    assert failed and all((error or "").startswith("infrastructure") for _, error in failed), failed
    retried = {json.loads(r[4]).get("retry_of") for r in rows} - {None}
    assert {r[0] for r in rows if r[2] == "FAILED"} <= retried | {r[0] for r in rows if "no retry left" in (r[3] or "")}
    _groups_read_whole(rows, retried, state)
    report = subprocess.run([*argv[:5], "report", "rl-kill", "--dir", str(out), "--out", str(tmp_path / "report")],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    met = figures(RolloutBook(open_engine(f"sqlite:///{out / 'store.db'}")), "rl-kill").faults
    assert sum(f.attempts for f in met.values()) == len(failed)  # every lost attempt is listed, under its reason
    page = (tmp_path / "report" / "report.html").read_text()
    assert all(html.escape(reason) in page for reason in met), met
