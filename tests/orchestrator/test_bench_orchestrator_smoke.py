"""bench/orchestrator.py runs end to end with a tiny N and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "orchestrator.py"


def test_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--rollouts", "4", "--concurrency", "2", "4"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    lines = out.strip().splitlines()
    assert lines[0].split() == ["concurrency", "rollouts", "rollouts/s", "peak", "pods", "vs", "first"]
    assert [line.split()[0] for line in lines[1:]] == ["2", "4"]
    assert all(float(line.split()[2]) > 0 for line in lines[1:])
