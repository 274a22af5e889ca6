"""bench/engine.py runs end to end with a tiny N and prints its table of rates and ratios (the bundled engine
here; the vLLM side starts the same way through rollwire's vLLM command line, which the vLLM tests use)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "engine.py"


def test_engine_bench_prints_its_table() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--engines", "bundled", "--requests", "4", "--max-tokens", "3"],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("engine"))
    end = next(i for i in range(header + 1, len(lines)) if not lines[i].strip())
    rows = [line.split() for line in lines[header + 1 : end]]
    assert [r[0] for r in rows] == ["bundled"] * 4
    assert [r[-6] for r in rows] == ["1", "1", "4", "16"]
    assert all(r[-5] == "12" for r in rows)  # 4 requests x 3 tokens each time
    assert rows[0][-2] == "1.00" and all(float(r[-2]) > 0 for r in rows)
    assert all(r[-1] == "1.00" for r in rows)  # the bundled engine against itself
    assert any(line.startswith("start-up until /health answers: bundled ") for line in lines)
