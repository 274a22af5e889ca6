"""No test writes into the real home: a representative part of the suite (tiny model build, engine, proxy and
store, the traces CLI, harness subprocesses on the local runtime) runs in a pytest subprocess whose ``HOME``
is an empty folder, and the folder is still empty afterwards (the suite's conftest moves ``HOME`` and
``ROLLWIRE_HOME`` to temporary folders, and everything must follow them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PART = [
    "tests/core/test_tiny_model.py",
    "tests/proxy/test_traces_cli.py",
    "tests/engine/test_tokenize_endpoints.py",
    "tests/orchestrator/test_local_runtime_run.py::test_local_crash_is_failed_with_stderr_tail",
]


@pytest.mark.slow
def test_a_part_of_the_suite_leaves_an_empty_home_empty(tmp_path: Path) -> None:
    home, rollwire_home = tmp_path / "home", tmp_path / "rollwire-home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "ROLLWIRE_HOME": str(rollwire_home)}
    argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *PART]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
    assert not rollwire_home.exists()  # the session's own ROLLWIRE_HOME, not the caller's
