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

    # The LoRA row and the row that forwards every shared prompt in full, each with its ratio line.
    done = subprocess.run([*argv, "--lora-rank", "2", "--group-size", "2"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert sum(line.startswith(("trainer", "bare", "LoRA r=2 step")) for line in lines) == 6
    assert any(line.startswith("prompts shared/forwarded in full") for line in lines)
    assert any(line.startswith("LoRA/full GRPO step tokens/s") for line in lines)


def test_splice_bench_prints_its_table(qwen_tokenizer_files: Path) -> None:
    bench = BENCH.parent / "splice.py"
    done = subprocess.run([sys.executable, str(bench), "--turns", "2", "5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [r[0] for r in rows] == ["2", "5"]
    for r in rows:
        assert r[2] == "1" and int(r[4]) > int(r[3]) and r[-1] == r[-2]  # one segment; fewer tokens; same loss tokens
