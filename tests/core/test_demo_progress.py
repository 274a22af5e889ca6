"""The demo's progress moves during training: every SFT and GRPO optimizer step reports step / steps, loss
and tokens/s to the live line, which shows them beside the phase."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from rollwire.app.cli.live_line import LiveLine
from rollwire.app.rl.learner import Learner, step_detail
from rollwire.settings import TrainerSettings
from rollwire.trajectory import Segment, Trajectory

DETAIL = re.compile(r"step (\d+)/(\d+), loss -?\d+\.\d{4}, ([\d,]+) tokens/s")


def _trajectory(index: int) -> Trajectory:
    prompt, completion = [5, 6, 7, 8], [20 + index, 21 + index, 30]
    segment = Segment(
        token_ids=prompt + completion,
        loss_mask=[0] * len(prompt) + [1] * len(completion),
        logprobs=[0.0] * len(prompt) + [-1.0] * len(completion),
        policy_versions=[-1] * len(prompt) + [0] * len(completion),
    )
    group = f"g{index // 2}"
    return Trajectory(
        rollout_id=f"r{index}", run_id="run", task_id=group, group_id=group, reward=float(index % 2),
        status="completed", segments=[segment],
    )  # fmt: skip


def test_sft_and_grpo_report_every_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    settings = TrainerSettings(lr=1e-3, group_size=2)
    learner = Learner.open(tiny_model_dir, tmp_path / "checkpoints", settings)
    details: list[str] = []
    learner.on_step = lambda step, steps, metrics: details.append(step_detail(step, steps, metrics))
    trajectories = [_trajectory(i) for i in range(4)]
    try:
        learner.sft(trajectories, epochs=2, batch_size=2, seed=0)
        sft = [DETAIL.fullmatch(d) for d in details]
        assert all(sft) and [(m[1], m[2]) for m in sft] == [("1", "4"), ("2", "4"), ("3", "4"), ("4", "4")]  # type: ignore[index]
        assert all(int(m[3].replace(",", "")) > 0 for m in sft)  # type: ignore[index]
        details.clear()
        learner.grpo(trajectories, group_size=2, groups_per_step=1, epochs=2)
        grpo = [DETAIL.fullmatch(d) for d in details]
        assert all(grpo) and [(m[1], m[2]) for m in grpo] == [("1", "4"), ("2", "4"), ("3", "4"), ("4", "4")]  # type: ignore[index]
    finally:
        learner.close()


def test_live_line_shows_the_step_and_counts() -> None:
    console = Console(file=io.StringIO(), width=80)
    line = LiveLine(console)
    line("SFT warm start on 8 teacher trajectories", None, "step 3/38, loss 1.2346, 12,346 tokens/s")
    assert "SFT warm start on 8 teacher trajectories  step 3/38, loss 1.2346, 12,346 tokens/s" in line._render().plain
    line("GRPO iteration 1/30", None)
    assert "done: SFT warm start on 8 teacher trajectories" in console.file.getvalue()  # type: ignore[attr-defined]
    assert line._render().plain.endswith("GRPO iteration 1/30")
