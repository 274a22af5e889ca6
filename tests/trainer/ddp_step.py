"""Run by tests/trainer/test_torchrun_equivalence.py under torchrun: one GRPO step, rank 0 saves the parameters.

argv: MODEL_DIR TRAJECTORIES_JSONL OUT_FILE STRATEGY
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from rollwire.trainer.distributed import DistContext


def main() -> None:
    from rollwire.trainer.distributed import init_distributed, shutdown

    model_dir, trajectories, out, strategy = sys.argv[1:5]
    ctx = init_distributed("cpu", strategy)
    try:
        step(ctx, Path(model_dir), Path(trajectories), Path(out))
    finally:
        shutdown(ctx)  # the model and optimizer are out of scope by now, as shutdown asks


def step(ctx: DistContext, model_dir: Path, trajectories: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM

    from rollwire.trainer.distributed import full_state_dict, wrap_model
    from rollwire.trainer.grpo import GRPOConfig, grpo_step, prepare_grpo
    from rollwire.trajectory import Trajectory

    torch.manual_seed(0)
    model = wrap_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), ctx)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)  # linear in the gradient: compares gradients exactly
    groups: dict[str, list[Trajectory]] = {}
    for line in trajectories.read_text().splitlines():
        t = Trajectory.from_dict(json.loads(line))
        groups.setdefault(t.group_id or "", []).append(t)
    config = GRPOConfig(micro_batch_tokens=24, clip_low=0.2, clip_high=0.2, max_grad_norm=0.5)
    batch = prepare_grpo(list(groups.values()), config, current_version=0)
    metrics = grpo_step(model, optimizer, batch, config, ctx=ctx, pad_id=0)
    weights = full_state_dict(model, ctx)
    if ctx.is_main:
        torch.save({"weights": weights, "metrics": metrics}, out)

if __name__ == "__main__":
    main()
