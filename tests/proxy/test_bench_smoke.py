"""bench/proxy.py runs end to end with a tiny N and prints its table (direct and rollwire rows, both modes), with
the stub answering at once or paced like an engine (one token per HTTP chunk: the proxy reads a chunked stream)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "proxy.py"


@pytest.mark.parametrize("pace_ms", ["0", "1"])
def test_bench_prints_the_table(pace_ms: str) -> None:
    argv = [sys.executable, str(BENCH), "--requests", "4", "--concurrency", "1", "2", "--turns", "2", "--no-litellm"]
    argv += ["--pace-ms", pace_ms]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [r for r in (line.split() for line in done.stdout.splitlines()) if r[2:3] in (["direct"], ["rollwire"])]
    assert [tuple(r[:3]) for r in rows] == [
        ("1", "json", "direct"),
        ("1", "stream", "direct"),
        ("2", "json", "direct"),
        ("2", "stream", "direct"),
        ("1", "json", "rollwire"),
        ("1", "stream", "rollwire"),
        ("2", "json", "rollwire"),
        ("2", "stream", "rollwire"),
    ]
    assert all(float(r[5]) > 0 for r in rows)  # requests/s measured
    assert all(float(r[6]) >= 0 for r in rows if r[2] == "rollwire")  # the proxy's CPU time per request
