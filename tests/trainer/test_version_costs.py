"""A GRPO step that updates nothing (every group's rewards agree) writes no checkpoint, pushes nothing and
costs no policy version; the next real step is version 1."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rollwire.app.cli.__main__ import main
from rollwire.trajectory import Trajectory


def test_zero_variance_step_costs_no_version(
    fake_proxy: Any, tiny_model_dir: Path, tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory],
    tmp_path: Path,
) -> None:
    proxy, url = fake_proxy
    rewards = [("flat", 1.0), ("flat", 1.0), ("mixed", 1.0), ("mixed", 0.0)]
    for cursor, (group, reward) in enumerate(rewards, start=1):
        proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31], reward=reward, group_id=group, cursor=cursor))
    out = tmp_path / "out"
    argv = ["train", "--admin-url", url, "--operator-key", "op-key", "--run", "run", "--model", str(tiny_model_dir),
            "--group-size", "2", "--output-dir", str(out), "--engine-url", url, "--exit-when-idle",
            "--stream-wait", "0",
            # the fake proxy's /reload_weights stands in for an engine but serves no model, so no parity probe can
            # run (tests/trainer/test_parity_probe.py covers the probe against real engines)
            "--parity-tolerance", "-1"]  # fmt: skip
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("skipped", 0.0), r["policy_version"]) for r in lines] == [(1, 1.0, 0), (2, 0.0, 1)]
    assert [r["weight_version"] for r in proxy.reloads] == [1] and proxy.versions == [1]
    assert sorted(p.name for p in out.glob("step-*")) == ["step-000002"]
