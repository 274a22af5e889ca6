"""`rollwire rollouts` as a user runs it (a subprocess): bad inputs, a real run against the stack, interrupt and resume."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rollwire.orchestrator.scheduler import live_rows
from rollwire.rollouts import RolloutBook
from rollwire.store.db import open_engine
from tests.orchestrator.live_stack import live_stack
from tests.orchestrator.rollout_gate import RolloutGate
from tests.polling import wait_until

CLI = [sys.executable, "-m", "rollwire.app.cli", "rollouts"]
FAST = ["--option", "max_turns=2", "--option", "max_tokens=16"]


def rollouts(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--suite", "nope"], 1, "no suite 'nope' (shipped: office, ops, tiny)"),
        (["--suite", "tiny", "--harness", "nope"], 1, "no harness adapter named 'nope'; known: "),
        (["--suite", "tiny", "--tasks", "write-cat,nope"], 1, "suite 'tiny' has no task 'nope'"),
        (["--suite", "tiny", "--split", "test"], 2, "invalid choice: 'test'"),
        (["--suite", "tiny", "--option", "max_turn=2"], 1, "does not take these options"),
        (["--suite", "tiny", "--group-size", "0"], 1, "--group-size must be at least 1"),
        (["--suite", "tiny", "--metrics-port", "70000"], 1, "--metrics-port must be in 0..65535"),
        (["--suite", "tiny", "--stack", "/nonexistent/stack.json"], 1, "no running stack: /nonexistent/stack.json"),
        (["--suite", "tiny", "--proxy-url", "http://127.0.0.1:9"], 1, "--proxy-url needs --gateway-url too"),
    ],
)
def test_bad_inputs_exit_with_one_readable_line(args: list[str], code: int, message: str) -> None:
    done = rollouts(*args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_help_teaches() -> None:
    done = rollouts("--help")
    assert done.returncode == 0
    for flag in ("--suite", "--harness", "--group-size", "--split", "--tasks", "--runtime", "--run-id", "--stack"):
        assert flag in done.stdout


def stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid, from /proc; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    parents = {int(p.name): info[1] for p in Path("/proc").glob("[0-9]*") if (info := stat(int(p.name))) is not None}
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (an ended child not yet reaped by its new parent is a zombie: ended)."""
    return [pid for pid in pids if (info := stat(pid)) is not None and info[0] not in ("Z", "X")]


@pytest.mark.slow
def test_run_interrupt_and_resume(tmp_path: Path, tiny_model_dir: Path) -> None:
    gates: list[RolloutGate] = []

    def gated(app: object) -> RolloutGate:
        gates.append(RolloutGate(app))
        return gates[0]

    with live_stack(tmp_path, tiny_model_dir, wrap_proxy=gated) as stack:
        gate = gates[0]
        file = stack.save(tmp_path / "stack.json")
        book = RolloutBook(open_engine(stack.db_url))
        base = ["--suite", "tiny", "--tasks", "write-cat,write-dog", "--stack", str(file), *FAST]

        done = rollouts(*base, "-G", "2", "--run-id", "cli-run", "--concurrency", "2", "--metrics-port", "0")
        assert done.returncode == 0, done.stderr
        assert "metrics: http://127.0.0.1:" in done.stderr  # served while it ran (tests/orchestrator/test_metrics.py)
        assert "run cli-run: 4 finished, 0 failed, 0 timed out" in done.stdout
        assert "resume with: rollwire rollouts --suite tiny" in done.stdout and "--run-id cli-run" in done.stdout
        first = {row.id for row in book.rollouts("cli-run")}
        again = rollouts(*base, "-G", "2", "--run-id", "cli-run")
        assert again.returncode == 0 and "4 finished" in again.stdout
        assert {row.id for row in book.rollouts("cli-run")} == first  # nothing ran twice
        other = rollouts("--suite", "office", "--stack", str(file), "--run-id", "cli-run")
        assert other.returncode == 1 and "was started with suite 'tiny', not 'office'" in other.stderr

        # One rollout at a time; the gate lets the first rollout through and holds the second at its first
        # model call, so the interrupt lands while the run is provably in the middle (no sleep, no race).
        gate.arm()
        cut = [*CLI, *base, "-G", "3", "--run-id", "cut", "--concurrency", "1"]
        process = subprocess.Popen(cut, stderr=subprocess.PIPE, text=True)
        try:
            assert gate.held.wait(timeout=300), "no second rollout reached the proxy"
            assert process.poll() is None
            started = descendants(process.pid)  # the held rollout's harness (and its sandbox, when there is one)
            assert started, "the run has no child process while a rollout is held"
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=60)
        finally:
            gate.release()
            if process.poll() is None:
                process.kill()
        assert process.returncode == 130 and "interrupted; resume with:" in err and "--run-id cut" in err
        assert "Traceback" not in err and "Event loop is closed" not in err
        # The run killed them before it exited; a killed process inside a sandbox ends when the kernel has torn
        # its pid namespace down, which may lag the exit on a loaded machine: bounded, never left running.
        wait_until(lambda: running(started), "the interrupted run's processes to end", ok=lambda left: not left,
                   timeout_s=10)
        rows = book.rollouts("cut")
        assert any(row.status == "finished" for row in rows) and not all(row.status == "finished" for row in rows)
        resumed = rollouts(*base, "-G", "3", "--run-id", "cut")
        assert resumed.returncode == 0, resumed.stderr
        live = live_rows(book.rollouts("cut"))
        assert all(row.status == "finished" for row in live)
        assert Counter((row.task_id, row.sample_index) for row in live) == {(t, i): 1 for t in ("write-cat", "write-dog") for i in range(3)}
