"""`rollwire export` writes exact ids in the sft, trl and verl layouts, as JSONL and Parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from rollwire.app.cli.__main__ import main
from rollwire.trajectory import Segment, Trajectory


def _trajectories() -> list[Trajectory]:
    first = Segment([5, 6, 7, 8], [0, 0, 1, 1], [0.0, 0.0, -0.5, -0.25], [-1, -1, 3, 3])
    second = Segment([5, 9, 10], [0, 1, 1], [0.0, -1.0, -2.0], [-1, 4, 4], break_reason="history_rewritten")
    prompt_only = Segment([1, 2], [0, 0], [0.0, 0.0], [-1, -1])
    return [
        Trajectory("r1", "run", "t1", "g1", 1.0, "completed", [first, second], cursor=1),
        Trajectory("r2", "run", "t1", "g1", 0.0, "completed", [prompt_only, first], cursor=2),
    ]


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in _trajectories()))
    return path


def _read(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_sft_and_trl_rows_keep_exact_ids(source: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"sft.{fmt}"
    assert main(["export", "--input", str(source), "--flavor", "sft", "--format", fmt, "--out", str(out)]) == 0
    rows = _read(out, fmt)
    assert [(r["rollout_id"], r["segment"]) for r in rows] == [("r1", 0), ("r1", 1), ("r2", 1)]
    assert rows[0]["labels"] == [-100, -100, 7, 8] and rows[1]["logprobs"] == [0.0, -1.0, -2.0]

    trl = tmp_path / f"trl.{fmt}"
    argv = ["export", "--input", str(source), "--flavor", "trl", "--format", fmt, "--min-reward", "0.5"]
    assert main([*argv, "--out", str(trl)]) == 0
    trl_rows = _read(trl, fmt)
    assert trl_rows == [
        {"input_ids": [5, 6, 7, 8], "assistant_masks": [0, 0, 1, 1], "labels": [-100, -100, 7, 8]},
        {"input_ids": [5, 9, 10], "assistant_masks": [0, 1, 1], "labels": [-100, 9, 10]},
    ]


def test_verl_rows_are_pre_tokenized_agent_loop_outputs(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "verl.parquet"
    argv = ["export", "--input", str(source), "--flavor", "verl", "--format", "parquet", "--out", str(out)]
    assert main(argv) == 0
    row = pq.read_table(out).to_pylist()[0]
    assert row["data_source"] == "rollwire/run" and "prompt" not in row  # no text for verl to template again
    assert row["prompt_ids"] == [5, 6] and row["response_ids"] == [7, 8] and row["response_mask"] == [1, 1]
    assert row["response_logprobs"] == [-0.5, -0.25] and row["reward_score"] == 1.0
    assert row["extra_info"]["index"] == 0 and row["extra_info"]["rollout_id"] == "r1"


def test_bad_input_is_one_readable_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["export", "--input", str(bad), "--out", str(tmp_path / "x.jsonl")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a JSONL file of trajectories" in err[0]
