"""bench/engine.py runs end to end with a tiny N and prints its table of rates and ratios."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "engine.py"


def test_engine_bench_prints_its_table() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--requests", "4", "--max-tokens", "3"],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("mode"))
    rows = [line.split() for line in lines[header + 1 :] if line.strip()]
    assert [r[-5] for r in rows] == ["1", "1", "4", "16"]
    assert all(r[-4] == "12" for r in rows)  # 4 requests x 3 tokens each time
    assert rows[0][-1] == "1.00" and all(float(r[-1]) > 0 for r in rows)
