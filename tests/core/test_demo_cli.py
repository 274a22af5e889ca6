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
    out = " ".join(result.stdout.split())  # rich wraps long lines
    assert "turn 1 the model answered" in out and "turn 2 the model answered" in out
    # Both turns spliced into one segment: 2 x 5 sampled tokens, both calls, one policy version.
    assert "segment 0: " in out and "10 sampled by the engine (policy versions [0]), calls [1, 2]" in out
    assert "segment 1" not in out


def test_help_lists_every_command() -> None:
    result = subprocess.run([sys.executable, "-m", "rollwire.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("demo", "engine"):
        assert command in result.stdout
