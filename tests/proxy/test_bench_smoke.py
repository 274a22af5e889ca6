"""bench/proxy.py runs end to end with a tiny N and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "proxy.py"


def test_bench_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--requests", "8", "--concurrency", "1", "4"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [r for r in (line.split() for line in done.stdout.splitlines()) if r[1:2] in (["direct"], ["proxy"])]
    assert [(r[0], r[1]) for r in rows] == [("1", "direct"), ("1", "proxy"), ("4", "direct"), ("4", "proxy")]
    assert all(float(r[4]) > 0 for r in rows)  # requests/s measured
