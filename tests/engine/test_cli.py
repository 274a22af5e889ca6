"""`rollwire engine` has a helpful --help and turns a bad --model into one readable line and exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollwire.app.cli", "engine", *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_help_lists_the_flags() -> None:
    result = _cli("--help")
    assert result.returncode == 0
    for flag in ("--host", "--port", "--model", "--max-batch-size", "--threads"):
        assert flag in result.stdout


def test_missing_model_folder_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = _cli("--model", str(tmp_path / "nope"))
    assert result.returncode == 1
    err = result.stderr.strip()
    assert err.startswith("rollwire engine:") and "does not exist" in err and "\n" not in err


def test_negative_threads_is_a_usage_error() -> None:
    result = _cli("--threads", "-1")
    assert result.returncode == 1 and "--threads" in result.stderr
