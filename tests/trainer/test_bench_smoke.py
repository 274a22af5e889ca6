"""bench/trainer.py runs end to end with a tiny N and prints its ratio table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "trainer.py"


def test_bench_prints_ratios(tiny_model_dir: Path) -> None:
    argv = [sys.executable, str(BENCH), "--sequences", "4", "--repeats", "1", "--max-len", "32"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert sum("vs ceiling" in line for line in lines) == 1
    assert sum(line.startswith(("trainer", "bare")) for line in lines) == 4
    assert "packed/padded tokens/s" in lines[-1]


def test_splice_bench_prints_its_table(qwen_tokenizer_files: Path) -> None:
    bench = BENCH.parent / "splice.py"
    done = subprocess.run([sys.executable, str(bench), "--turns", "2", "5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [r[0] for r in rows] == ["2", "5"]
    for r in rows:
        assert r[2] == "1" and int(r[4]) > int(r[3]) and r[-1] == r[-2]  # one segment; fewer tokens; same loss tokens
