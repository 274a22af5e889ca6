"""torchrun --nproc-per-node 2 on CPU (gloo) ends a step with the same parameters as one process, same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from rollwire.trajectory import Trajectory

SCRIPT = Path(__file__).with_name("ddp_step.py")


def _run(argv: list[str]) -> None:
    # faulthandler: a rank that crashes prints every thread's Python stack into the failure message
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_match_one_process(
    strategy: str, tiny_model_dir: Path, tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory], tmp_path: Path
) -> None:
    trajs = []
    for g in range(3):
        for k in range(2):
            t = sampler(tiny_model, [3 + g, 4, 5][: 2 + k], new_tokens=3 + 2 * k + g, seed=10 * g + k,
                        reward=float(k), group_id=f"g{g}")
            seg = t.segments[0]  # off-policy behaviour logprobs, so some ratios clip
            skew = [lp - 0.3 * ((i % 3) - 1) if m else lp for i, (lp, m) in enumerate(zip(seg.logprobs, seg.loss_mask))]
            trajs.append(Trajectory.from_dict(t.to_dict() | {"segments": [seg.to_dict() | {"logprobs": skew}]}))
    data = tmp_path / "trajs.jsonl"
    data.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in trajs))
    single, double = tmp_path / "one.pt", tmp_path / "two.pt"
    args = [str(tiny_model_dir), str(data)]
    _run([sys.executable, str(SCRIPT), *args, str(single), strategy])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    _run([*torchrun, str(SCRIPT), *args, str(double), strategy])

    one, two = torch.load(single, weights_only=True), torch.load(double, weights_only=True)
    assert one["metrics"]["loss_tokens"] == two["metrics"]["loss_tokens"] > 0
    assert one["metrics"]["clip_fraction"] == two["metrics"]["clip_fraction"] > 0
    start = {k: v for k, v in tiny_model.state_dict().items()}
    moved = max(float((one["weights"][k] - start[k]).abs().max()) for k in start)
    assert moved > 1e-3  # the step really changed the weights
    worst = max(float((v - two["weights"][k]).abs().max()) for k, v in one["weights"].items())
    assert worst < 1e-6, f"largest parameter difference {worst:.2e} (step moved weights by up to {moved:.2e})"
