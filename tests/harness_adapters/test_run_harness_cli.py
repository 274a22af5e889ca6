"""`rollwire run-harness` as a user runs it: a subprocess against a running stack named by its stack file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rollwire.app.stack import StackInfo
from rollwire.reconstruct import load_calls
from rollwire.store.db import open_engine

pytestmark = pytest.mark.slow


def _rollwire(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", *argv],
        capture_output=True, text=True, timeout=timeout, env=dict(os.environ), check=False,
    )  # fmt: skip


def test_run_harness_prints_rollout_reward_and_trace(engine_stack: StackInfo, tmp_path: Path) -> None:
    stack_file = engine_stack.save(tmp_path / "stack.json")
    done = _rollwire(
        "run-harness", "reference", "--task", "write-cat", "--stack", str(stack_file),
        "--option", "max_turns=1", "--option", "max_tokens=16", "--deadline", "60",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rollout = re.search(r"^rollout\s+(ro-\w+)", done.stdout, re.M)
    assert rollout, done.stdout
    assert re.search(r"^status\s+finished\s+reward [01]\.\d{3}\s+exit status 0$", done.stdout, re.M), done.stdout
    assert f"rollwire traces --db {engine_stack.db_url} show {rollout[1]}" in done.stdout
    assert f"{engine_stack.admin_url}/ui/?key={engine_stack.operator_key}#/rollout/{rollout[1]}" in done.stdout
    assert load_calls(open_engine(engine_stack.db_url), rollout[1])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["no-such-harness", "--task", "write-cat"], "no harness adapter named 'no-such-harness'; known: "),
        (["reference", "--task", "write-zzz"], "has no task 'write-zzz'"),
        (["reference", "--task", "write-cat", "--option", "max_turnz=2"], "does not take these options"),
        (["reference", "--task", "write-cat", "--option", "oops"], "must look like KEY=VALUE"),
        (["reference", "--task", "write-cat", "--stack", "/nonexistent/stack.json"], "no running stack"),
    ],
)
def test_run_harness_bad_input_is_one_line(argv: list[str], said: str) -> None:
    done = _rollwire("run-harness", *argv, timeout=60)
    assert done.returncode == 1 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
