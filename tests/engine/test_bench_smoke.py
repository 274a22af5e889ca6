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


def _table_rows(bench: str, args: list[str], header: str, count: int) -> list[list[str]]:
    """Run ``bench/<bench>`` with ``args``; the ``count`` rows after the line that starts with ``header``, split."""
    argv = [sys.executable, str(BENCH.parent / bench), *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(header))
    return [line.split() for line in lines[at + 1 : at + 1 + count]]


def test_continued_prefill_bench_prints_a_row_per_share_with_exact_logits(tiny_model_dir: Path) -> None:
    args = ["--lengths", "600", "--shares", "0.5,0.9", "--rounds", "1", "--model", str(tiny_model_dir)]
    rows = _table_rows("continued_prefill.py", args, "prompt", 2)
    assert [(r[0], r[1], r[2]) for r in rows] == [("600", "288", "0.500"), ("600", "512", "0.900")]
    assert all(float(r[-1]) < 1e-3 for r in rows)  # both attentions continue to the whole prefill's logits
    assert all(float(r[3]) > 0 and float(r[4]) > 0 and float(r[5]) > 0 for r in rows)


def test_decode_step_bench_prints_a_row_per_length_with_matching_logits(tiny_model_dir: Path) -> None:
    args = ["--lengths", "300,600", "--steps", "4", "--rounds", "1", "--model", str(tiny_model_dir)]
    rows = _table_rows("decode_step.py", args, "context", 2)
    assert [(r[0], r[1]) for r in rows] == [("300", "4"), ("600", "4")]
    assert all(float(r[-1]) < 1e-3 for r in rows)  # both attentions decode the same logits
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)
