"""`rollwire train --algo sft` trains on the stream's rewarded traces and checkpoints them, then exits when idle."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rollwire.app.cli.__main__ import main
from rollwire.trajectory import Trajectory


def test_sft_run_filters_by_reward_and_checkpoints(
    fake_proxy: Any, tiny_model_dir: Path, tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory],
    tmp_path: Path,
) -> None:
    proxy, url = fake_proxy
    trajs = [
        sampler(tiny_model, [7, 8], completion=[30, 31, 32], reward=float(i % 2), group_id=f"g{i}", cursor=i + 1)
        for i in range(4)
    ]
    for t in trajs:
        proxy.add(t)
    out = tmp_path / "out"
    argv = ["train", "--admin-url", url, "--operator-key", "op-key", "--run", "run", "--model", str(tiny_model_dir),
            "--algo", "sft", "--sft-batch-size", "2", "--sft-min-reward", "0.5", "--output-dir", str(out),
            "--exit-when-idle", "--stream-wait", "0", "--lr", "1e-2"]
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["rollouts"], r["rollouts_kept"]) for r in lines] == [(1, 2, 1), (2, 2, 1)]
    assert lines[1]["loss"] < lines[0]["loss"]  # the same trace, seen again after one update
    state = json.loads((out / "step-000002" / "trainer_state.json").read_text())
    assert state["cursor"] == 4 and state["trained_rollouts"] == [t.rollout_id for t in trajs]
    assert (out / "step-000002" / "model.safetensors").is_file() and (out / "step-000002" / "tokenizer.json").is_file()
    assert proxy.reloads == []  # no sink configured: nothing pushed, no version published
