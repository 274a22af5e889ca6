"""`rollwire report RUN`: figures read from a store whose rows are written here by hand, so every number in the
report can be worked out: train reward by the version a group was drawn at, held-out pass@k per evaluated version,
per-task pass rates, the draws, and the table of harnesses that ran the same suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rollwire.rollouts import RolloutBook
from rollwire.run_figures import figures, harness_table
from rollwire.store.db import open_engine
from tests.rl.rows import PROXY_DOWN, write_faults, write_group, write_rl_run


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    book = RolloutBook(open_engine(url))
    write_rl_run(book)
    write_faults(book, "rl-a")
    book.ensure_run("rl-b", "rl-b", {"suite": "tiny", "harness": "codex", "kind": "rl"})
    write_group(book, "rl-b", "rl-b:eval-v1:h1", "h1", {"purpose": "eval", "policy_version": 1}, [1.0, 0.0])
    return url


def test_figures_by_hand(store: str) -> None:
    book = RolloutBook(open_engine(store))
    found = figures(book, "rl-a")
    assert found.train_by_version == {1: [1.0, 0.0], 2: [1.0, 0.0]}  # the failed rollout counts 0
    assert [d["task_id"] for d in found.draws] == ["t1", "t2"]
    faults = {reason: (f.attempts, f.retried) for reason, f in found.faults.items()}
    assert faults == {PROXY_DOWN: (2, 1), "workload lost": (1, 1)}
    rates = found.eval_rates()
    # v1: h1 0/2, h2 1/2 -> pass@1 = (0 + 0.5) / 2; pass@2 = (0 + 1) / 2
    assert rates[1]["pass@1"] == pytest.approx(0.25) and rates[1]["pass@2"] == pytest.approx(0.5)
    # v3: h1 2/2, h2 1/2 (0.5 is partial credit) -> pass@1 = 0.75, pass^2 = (1 + 0) / 2
    assert rates[3]["pass@1"] == pytest.approx(0.75) and rates[3]["pass^2"] == pytest.approx(0.5)
    table = harness_table(book, ["rl-a", "rl-b"], "tiny")
    assert [(h, r, v) for h, r, v, _ in table] == [("codex", "rl-b", 1), ("reference", "rl-a", 3)]
    assert table[0][3]["pass@1"] == pytest.approx(0.5)


def test_the_command_writes_the_report(store: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    argv = [sys.executable, "-m", "rollwire.app.cli", "report", "rl-a", "--db", store, "--out", str(out)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    page = (out / "report.html").read_text()
    assert "<td>3</td><td>0.750</td>" in page  # version 3's pass@1 leads its row
    assert "<td>codex</td><td>rl-b</td><td>1</td>" in page
    assert f"<td>{PROXY_DOWN}</td><td>2</td><td>1</td>" in page  # the faults the run met, as the scheduler classed them
    assert (out / "versions.png").stat().st_size > 1000 and (out / "draws.png").stat().st_size > 1000
    missing = subprocess.run([*argv[:4], "nope", "--db", store, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "no run 'nope'" in missing.stderr and "Traceback" not in missing.stderr
