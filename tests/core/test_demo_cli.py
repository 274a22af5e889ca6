"""The README's main command runs on the embedded default and shows a real round trip."""

import subprocess
import sys


def test_demo_round_trip_prints_sampled_tokens(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rollwire.cli", "--log-level", "WARNING", "demo", "--max-tokens", "5"],
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path.parent), "COLUMNS": "120",
             "ROLLWIRE_HOME": str(tmp_path / "home")},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sampled by weight version 0" in result.stdout
    assert "finish_reason length" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 5


def test_help_lists_every_command() -> None:
    result = subprocess.run([sys.executable, "-m", "rollwire.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("demo", "engine"):
        assert command in result.stdout
