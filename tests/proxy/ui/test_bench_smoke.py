"""bench/viewer.py runs end to end in Chromium with tiny sizes and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from viewer import find_chromium

BENCH = Path(__file__).resolve().parents[3] / "bench" / "viewer.py"


def test_bench_prints_the_table() -> None:
    if find_chromium() is None:
        pytest.skip("needs Debian's chromium package (apt-get install chromium); not on PATH")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--tokens", "200", "2000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert [int(r[0]) >= n for r, n in zip(rows, (200, 2000), strict=True)] == [True, True]
    assert all(0 < float(r[2]) <= float(r[3]) for r in rows)  # usable before done, both measured
