"""`rollwire report RUN`: figures read from a store whose rows are written here by hand, so every number in the
report can be worked out: train reward by the version a group was drawn at, held-out pass@k per evaluated version,
per-task pass rates, the draws, and the table of harnesses that ran the same suite."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from rollwire.rollouts import PlannedRollout, RolloutBook
from rollwire.run_figures import figures, harness_table
from rollwire.store.db import open_engine
from rollwire.store.schema import RolloutStatus as S


def _rows(book: RolloutBook, run_id: str, group: str, task: str, meta: dict[str, object], rewards: Sequence[float | None]) -> None:
    ids = book.plan(run_id, [PlannedRollout(task, group, i, meta) for i in range(len(rewards))])
    for rollout_id, reward in zip(ids, rewards, strict=True):
        book.set_status(rollout_id, S.STARTING)
        book.set_status(rollout_id, S.RUNNING)
        if reward is None:  # a rollout the policy failed: counted as 0
            book.set_status(rollout_id, S.FAILED, error="harness exited with status 1")
        else:
            book.set_status(rollout_id, S.FINISHED, reward=reward)


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    book = RolloutBook(open_engine(url))
    book.ensure_run("rl-a", "rl-a", {"suite": "tiny", "harness": "reference", "kind": "rl"})
    draw = {"index": 0, "task_id": "t1", "weight": 0.25, "pass_rate": None, "total_weight": 0.5, "seed": 0}
    _rows(book, "rl-a", "rl-a:draw-00000", "t1", {"purpose": "train", "drawn_at_version": 1, "draw": draw}, [1.0, 0.0])
    draw2 = draw | {"index": 1, "task_id": "t2"}
    _rows(book, "rl-a", "rl-a:draw-00001", "t2", {"purpose": "train", "drawn_at_version": 2, "draw": draw2}, [1.0, None])
    for version, h1, h2 in ((1, [0.0, 0.0], [1.0, 0.0]), (3, [1.0, 1.0], [1.0, 0.5])):
        meta = {"purpose": "eval", "policy_version": version}
        _rows(book, "rl-a", f"rl-a:eval-v{version}:h1", "h1", meta, h1)
        _rows(book, "rl-a", f"rl-a:eval-v{version}:h2", "h2", meta, h2)
    book.ensure_run("rl-b", "rl-b", {"suite": "tiny", "harness": "codex", "kind": "rl"})
    _rows(book, "rl-b", "rl-b:eval-v1:h1", "h1", {"purpose": "eval", "policy_version": 1}, [1.0, 0.0])
    return url


def test_figures_by_hand(store: str) -> None:
    book = RolloutBook(open_engine(store))
    found = figures(book, "rl-a")
    assert found.train_by_version == {1: [1.0, 0.0], 2: [1.0, 0.0]}  # the failed rollout counts 0
    assert [d["task_id"] for d in found.draws] == ["t1", "t2"]
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
    assert (out / "versions.png").stat().st_size > 1000 and (out / "draws.png").stat().st_size > 1000
    missing = subprocess.run([*argv[:4], "nope", "--db", store, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "no run 'nope'" in missing.stderr and "Traceback" not in missing.stderr
