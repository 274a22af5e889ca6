"""The README's main command: a shortened `rollwire demo` closes the loop through the real stack (and logs its
curves to TensorBoard with --tracker).

Asserted from the store the demo leaves behind, not from what it prints: teacher rollouts recorded and
labelled, rewards from the checkers, weights pushed (the engine's version advanced), the RL loop's updates
on groups with a reward spread, and each evaluation sampled under the one policy version it names.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

DEMO = ["-K", "2", "-G", "4", "--train-tasks", "3", "--tasks-per-iteration", "2", "--eval-group", "2", "--eval-tasks",
        "2", "--teacher-group", "1", "--concurrency", "6"]  # fmt: skip


def _run(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The demo in its own session, so a run that overstays ``timeout`` goes with its whole stack."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ROLLWIRE_HOME": str(tmp_path / "home")}  # 80 columns
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "demo", *args]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    with subprocess.Popen(argv, env=env, start_new_session=True, **pipes) as process:  # type: ignore[call-overload]
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the stack's servers too, had the demo not stopped them
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.timeout(900)  # the run's own limit (600 s) ends it first; the suite's 300 s is too short on a busy machine
def test_shortened_demo_closes_the_loop(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = _run(tmp_path, *DEMO, "--out", str(out), "--tracker", "tensorboard")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    numbers = json.loads((out / "results.json").read_text())
    _check_tensorboard_curves(out / "tensorboard", numbers)
    assert (out / "report.html").is_file() and (out / "reward_curve.png").stat().st_size > 1000

    db = sqlite3.connect(out / "store.db")
    runs = {row[0]: json.loads(row[1]) for row in db.execute("select id, config from run")}
    assert list(runs) == ["demo"] and runs["demo"]["kind"] == "rl"  # one training run is one run in the store

    def rollouts(prefix: str) -> list[tuple[str, str, float | None]]:
        query = "select id, status, reward from rollout where group_id like ?"
        return [(i, s.lower(), r) for i, s, r in db.execute(query, (prefix + "%",))]

    def versions(prefix: str) -> set[int]:
        query = ("select distinct m.policy_version from modelcall m join rollout r on m.rollout_id = r.id "
                 "where r.group_id like ?")  # fmt: skip
        return {row[0] for row in db.execute(query, (prefix + "%",))}

    teacher, before, after, rl_groups = "demo:teacher:", "demo:eval-v1:", "demo:eval-v3:", "demo:draw-"
    assert numbers["teacher"]["groups"] == teacher + "*" and numbers["after_rl"]["groups"] == after + "*"
    assert [r[1:] for r in rollouts(teacher)] == [("finished", 1.0)] * 3  # the expert solves every train task
    assert versions(teacher) == {0}
    # SFT pushed v1; eval-before ran on v1; the RL loop sampled from v1 on and pushed v2 and v3; eval-after ran on v3.
    assert versions(before) == {1}
    assert 1 in versions(rl_groups) and versions(rl_groups) <= {1, 2, 3}
    assert versions(after) == {3}
    for prefix, phase in ((before, numbers["before_rl"]), (after, numbers["after_rl"])):
        rows = rollouts(prefix)
        assert len(rows) == phase["rollouts"] and all(status in ("finished", "failed", "timed_out") for _, status, _ in rows)
    assert len(rollouts(before)) == 2 * 2
    assert all(status in ("finished", "failed", "timed_out", "cancelled") for _, status, _ in rollouts(rl_groups))
    for prefix in (before, after, rl_groups):
        rows = rollouts(prefix)
        assert all(reward is not None for _, status, reward in rows if status == "finished")  # scored by the checker
        calls = db.execute(
            "select count(*) from modelcall m join rollout r on m.rollout_id = r.id where r.group_id like ? and "
            "r.status != 'CANCELLED'", (prefix + "%",)
        ).fetchone()[0]
        assert calls >= len([r for r in rows if r[1] != "cancelled"])  # each made a model call through the proxy
    # each update trained on two groups of four, each with a reward spread (the rest were redrawn)
    assert [it["rollouts"] for it in numbers["iterations"]] == [8, 8]
    assert [it["policy_version"] for it in numbers["iterations"]] == [2, 3]
    rl = numbers["rl"]
    assert rl["groups_drawn"] >= 4 and rl["groups_finished"] >= 4 and rl["max_policy_lag"] <= 1
    assert len(rl["draws"]) == rl["groups_drawn"] and {d["task_id"] for d in rl["draws"]} <= {"write-cat", "write-dog", "write-sun"}
    checkpoints = sorted(p.name for p in (out / "checkpoints").glob("step-*"))
    assert checkpoints, "no checkpoint was written"
    assert "held-out mean reward" in result.stdout and "gain" in result.stdout
    store = f"sqlite:///{out / 'store.db'}"
    assert f"browse the traces: rollwire traces ls --db {store}\n" in result.stdout  # longer than 80, not wrapped
    assert "Reward (task write-map): 0.5 if file_exists(path=answer.txt) + 0.5 if file_equals(path=answer.txt, value=map)" in result.stdout
    page = (out / "report.html").read_text()
    assert "scripted-expert rollout(s) of each of the first 3 train tasks" in page and "train_tasks" not in page
    assert "but the last (file_equals) earns 0.5" in page  # what the reward measures, and where the format alone stops
    for task in ("write-map", "write-egg"):  # per held-out task its best (and its worst, if they differ)
        assert f"task {task} · best · reward" in page
    assert page.count("<details><summary>the prompt every rollout below starts with") == 1


def _check_tensorboard_curves(folder: Path, numbers: dict[str, Any]) -> None:
    """`--tracker tensorboard`: read back with TensorBoard's own event reader, the run holds the SFT and GRPO loss
    curves, GRPO's reward curve, and each phase's mean reward as the report states it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"sft/loss", "grpo/loss", "grpo/reward_mean", "rollouts/grpo_mean_reward", "rollouts/eval_mean_reward"} <= tags
    sft_steps = [e.step for e in events.Scalars("sft/loss")]
    grpo_steps = [e.step for e in events.Scalars("grpo/loss")]
    assert sft_steps == sorted(sft_steps) and grpo_steps and min(grpo_steps) > max(sft_steps)  # one step axis
    assert [e.step for e in events.Scalars("grpo/reward_mean")] == grpo_steps
    iterations = [e.value for e in events.Scalars("rollouts/grpo_mean_reward")]
    assert iterations == pytest.approx([it["mean_reward"] for it in numbers["iterations"]], abs=1e-4)
    evals = [e.value for e in events.Scalars("rollouts/eval_mean_reward")]
    assert evals == pytest.approx([numbers["before_rl"]["mean_reward"], numbers["after_rl"]["mean_reward"]], abs=1e-4)


def test_demo_bad_options_fail_with_one_line(tmp_path: Path) -> None:
    result = _run(tmp_path, "-G", "1", timeout=120)
    assert result.returncode != 0
    assert "group-size must be at least 2" in result.stderr and "Traceback" not in result.stderr
    result = _run(tmp_path, "--upstream", "http://127.0.0.1:9", timeout=120)
    assert result.returncode != 0 and "--upstream needs --model" in result.stderr


def test_help_lists_every_command() -> None:
    result = subprocess.run([sys.executable, "-m", "rollwire.app.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("demo", "rl", "report", "up", "engine", "proxy", "train", "traces"):
        assert command in result.stdout


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
                found.add(int(child))
                todo.append(int(child))
    return found


def _start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot): with the pid, names one process even if the pid is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _still_running(stack: dict[int, str | None], timeout: float) -> list[int]:
    """The stack's processes still running after ``timeout``: waits on each one's pidfd, which becomes readable
    when it exits (a process just killed takes a moment to; a grandchild is not ours to wait for)."""
    deadline = time.monotonic() + timeout
    left = []
    for pid, started in stack.items():
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            if started is None or _start_time(pid) != started:
                continue  # gone, and the pid already names another process
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                left.append(pid)
        finally:
            os.close(fd)
    return left


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_stops_the_demo_and_its_whole_stack(tmp_path: Path) -> None:
    """`kill` on the demo (not on its process group) stops the engine, env servers, gateway and proxy it
    started, as Ctrl-C does; before, they were left running."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ROLLWIRE_HOME": str(tmp_path / "home")}
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "demo", *DEMO, "--out", str(tmp_path / "o")]
    with subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            seen: list[str] = []
            for line in process.stdout:  # the stack is up once its phase is reported done
                seen.append(line)
                if "done: starting the stack" in line:
                    break
            else:
                raise AssertionError(f"the demo ended before its stack was up: {''.join(seen)[-2000:]}")
            stack = {pid: _start_time(pid) for pid in _descendants(process.pid)}
            assert len(stack) >= 4, stack  # engine, env servers, gateway, proxy (and their helpers)
            process.send_signal(signal.SIGTERM)
            rest, _ = process.communicate(timeout=120)
            assert process.returncode == 130, rest[-2000:]
            left = _still_running(stack, timeout=30)
            assert not left, [Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:120] for p in left]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
