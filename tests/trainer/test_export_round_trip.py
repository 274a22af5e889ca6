"""Every export flavour reads back to the recorded token ids, 100%: TRL's rows through TRL's own collator,
verl's rows against the fields of its multi-turn agent-loop output, and the rollwire JSONL through
Trajectory.from_dict."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from rollwire.trainer.export import export_rows, write_rows
from rollwire.trajectory import Segment, Trajectory


def _agent_segment(rng: random.Random, turns: int, version: int) -> Segment:
    """A multi-turn segment as the proxy records one: prompt, then sampled turns with tool results between."""
    ids, mask, lps, versions = [], [], [], []

    def add(n: int, sampled: bool) -> None:
        for _ in range(n):
            ids.append(rng.randrange(3, 150_000))
            mask.append(int(sampled))
            lps.append(-rng.uniform(0.01, 3.0) if sampled else 0.0)
            versions.append(version if sampled else -1)

    add(rng.randint(20, 60), False)
    for _ in range(turns):
        add(rng.randint(5, 30), True)
        add(rng.randint(10, 40), False)
    add(rng.randint(3, 10), True)
    return Segment(ids, mask, lps, versions, call_ids=list(range(turns + 1)))


def _trajectories() -> list[Trajectory]:
    rng = random.Random(7)
    out = []
    for i in range(6):
        segments = [_agent_segment(rng, turns=rng.randint(1, 20), version=i) for _ in range(1 + i % 2)]
        out.append(Trajectory(f"r{i}", "run", f"t{i // 2}", f"g{i // 2}", float(i % 3) / 2, "finished", segments,
                              cursor=i + 1, metadata={"attempt": 0}))
    return out


def _read(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    return pq.read_table(path).to_pylist()


def _recorded(trajectories: list[Trajectory]) -> list[Segment]:
    return [s for t in trajectories for s in t.segments if any(s.loss_mask)]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_trl_rows_through_trls_own_collator(tmp_path: Path, fmt: str) -> None:
    datasets = pytest.importorskip("datasets", reason="TRL's datasets loader is in the dev extra")
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    trajectories = _trajectories()
    path = tmp_path / f"trl.{fmt}"
    write_rows(export_rows(trajectories, "trl"), path, fmt)
    loaded = datasets.load_dataset("json" if fmt == "jsonl" else "parquet", data_files=str(path), split="train")
    collator = DataCollatorForLanguageModeling(pad_token_id=0)
    recorded = _recorded(trajectories)
    assert len(loaded) == len(recorded)
    for row, segment in zip(loaded, recorded):
        batch = collator([dict(row)])
        n = len(segment.token_ids)
        assert batch["input_ids"][0, :n].tolist() == segment.token_ids
        want = [tok if m else -100 for tok, m in zip(segment.token_ids, segment.loss_mask)]
        assert batch["labels"][0, :n].tolist() == want  # the loss lands on sampled tokens only


VERL_AGENT_LOOP_OUTPUT = {
    "prompt_ids": list,
    "response_ids": list,
    "response_mask": list,
    "response_logprobs": list,
    "reward_score": float,
    "num_turns": int,
}
"""The fields of verl's ``AgentLoopOutput`` (verl/experimental/agent_loop/agent_loop.py, verl 0.8.0.dev) a
row fills; verl turns them into ``prompts`` / ``responses`` / ``response_mask`` / ``rollout_log_probs``."""


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_verl_rows_reproduce_the_recorded_ids(tmp_path: Path, fmt: str) -> None:
    trajectories = _trajectories()
    path = tmp_path / f"verl.{fmt}"
    write_rows(export_rows(trajectories, "verl"), path, fmt)
    rows = _read(path, fmt)
    recorded = _recorded(trajectories)
    assert len(rows) == len(recorded)
    for index, (row, segment) in enumerate(zip(rows, recorded)):
        for name, kind in VERL_AGENT_LOOP_OUTPUT.items():
            assert isinstance(row[name], kind), name
        assert row["prompt_ids"] + row["response_ids"] == segment.token_ids
        cut = len(row["prompt_ids"])
        assert row["response_mask"] == segment.loss_mask[cut:] and row["response_mask"][0] == 1
        assert set(segment.loss_mask[:cut]) == {0}  # the prompt is everything before the first sampled token
        assert row["response_logprobs"] == segment.logprobs[cut:]
        assert row["extra_info"]["index"] == index
        assert len(row["response_ids"]) == len(row["response_mask"]) == len(row["response_logprobs"])


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_rollwire_jsonl_round_trips_everything(tmp_path: Path, fmt: str) -> None:
    trajectories = _trajectories()
    path = tmp_path / f"rollwire.{fmt}"
    write_rows(export_rows(trajectories, "rollwire"), path, fmt)
    back = [Trajectory.from_dict(row) for row in _read(path, fmt)]
    assert back == trajectories
