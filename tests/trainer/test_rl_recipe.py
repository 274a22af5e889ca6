"""``rollwire train`` with the recipe of ``rollwire rl`` (what its trainer Job runs): only the run's train rollouts,
groups with no reward spread left out before they fill a step and recorded as consumed, several passes per
update making one version, and a stop at the target version."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rollwire.app.cli.__main__ import main
from rollwire.trainer.checkpoint import load_state
from rollwire.trajectory import Trajectory


def test_the_rl_recipe_trains_train_groups_with_a_spread_and_stops_at_its_version(
    fake_proxy: Any, tiny_model_dir: Path, tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory],
    tmp_path: Path,
) -> None:
    proxy, url = fake_proxy
    stream = [("eval-h1", "eval", 1.0), ("eval-h1", "eval", 0.0),  # an evaluation: a spread, but not for training
              ("flat", "train", 1.0), ("flat", "train", 1.0),  # no spread: left out, consumed
              ("mixed", "train", 1.0), ("mixed", "train", 0.0),  # the update's group
              ("later", "train", 0.0), ("later", "train", 1.0)]  # past the target version: untouched  # fmt: skip
    ids: dict[str, list[str]] = {}
    for cursor, (group, purpose, reward) in enumerate(stream, start=1):
        t = sampler(tiny_model, [7, 8], completion=[30, 31], reward=reward, group_id=group, cursor=cursor)
        proxy.add(dataclasses.replace(t, metadata={"meta": {"purpose": purpose}}))
        ids.setdefault(group, []).append(t.rollout_id)
    out = tmp_path / "out"
    argv = ["train", "--admin-url", url, "--operator-key", "op-key", "--run", "run", "--model", str(tiny_model_dir),
            "--group-size", "2", "--groups-per-step", "1", "--output-dir", str(out), "--engine-url", url,
            "--exit-when-idle", "--stream-wait", "0", "--purpose", "train", "--dynamic-sampling", "--epochs", "2",
            "--until-version", "1",
            # the fake proxy's /reload_weights stands in for an engine but serves no model, so no parity probe can
            # run (tests/trainer/test_parity_probe.py covers the probe against real engines)
            "--parity-tolerance", "-1"]  # fmt: skip
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["policy_version"]) for r in lines] == [(2, 1)]  # two passes, one version
    assert len(lines[0]["pass_losses"]) == 2 and lines[0]["rollout_ids"] == ids["mixed"]
    assert proxy.versions == [1]
    state = load_state(out / "step-000002")
    assert state.trained_rollouts == [*ids["flat"], *ids["mixed"]]  # the left-out group is consumed with the update
    assert not set(state.trained_rollouts) & set(ids["eval-h1"])
    assert state.cursor == 6  # stopped at its version: the later group is for the next command to read
