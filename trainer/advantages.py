"""Group-relative advantages (GRPO, RLOO): each rollout's reward against the others of its task group.

Pure tensor functions, checkable by hand. The baseline is the group mean (GRPO) or the mean of the
*other* members (RLOO, Ahmadian et al. 2024); the centred rewards are then optionally divided by a
standard deviation: the group's (GRPO, Shao et al. 2024), the whole batch's (as in REINFORCE++ and
verl's batch-std option), or none (Dr.GRPO, Liu et al. 2025, which drops the scaling as a
difficulty bias).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollwire.errors import InvalidRequest

BASELINES = ("mean", "rloo")
STD_SCALES = ("none", "group", "batch")


@dataclass(frozen=True, slots=True)
class GroupAdvantages:
    advantages: torch.Tensor
    """One advantage per rollout, in input order."""
    keep: torch.Tensor
    """False for rollouts of a dropped (zero-variance) group."""
    num_groups: int
    num_zero_variance: int
    """Groups whose rewards were all equal: their advantages are 0 (no learning signal)."""


def group_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    *,
    scale_std: bool = False,
    std_scale: str | None = None,
    baseline: str = "mean",
    drop_zero_variance: bool = True,
    eps: float = 1e-6,
) -> GroupAdvantages:
    """Centred rewards per group, scaled by ``std_scale`` (none, group, batch; ``scale_std`` = group).

    ``group_index`` holds small non-negative ints naming each rollout's group. ``baseline="rloo"``
    subtracts the mean of the other members, i.e. n/(n-1) times the mean-centred reward (a group of one
    has no baseline and advantage 0). A group whose rewards all agree (std <= eps) has advantage 0; with
    ``drop_zero_variance`` its rollouts are marked not kept.
    """
    scale = std_scale if std_scale is not None else ("group" if scale_std else "none")
    if scale not in STD_SCALES:
        raise InvalidRequest(f"unknown advantage std scaling {scale!r} ({', '.join(STD_SCALES)})", param="std_scale")
    if baseline not in BASELINES:
        raise InvalidRequest(f"unknown advantage baseline {baseline!r} ({', '.join(BASELINES)})", param="baseline")
    rewards = rewards.to(torch.float64)
    groups = int(group_index.max().item()) + 1 if group_index.numel() else 0
    counts = torch.zeros(groups, dtype=torch.float64).index_add_(0, group_index, torch.ones_like(rewards))
    sums = torch.zeros(groups, dtype=torch.float64).index_add_(0, group_index, rewards)
    mean = sums / counts.clamp(min=1)
    centred = rewards - mean[group_index]
    sq = torch.zeros(groups, dtype=torch.float64).index_add_(0, group_index, centred**2)
    std = (sq / counts.clamp(min=1)).sqrt()
    zero_var = std <= eps
    present = counts > 0
    advantages = centred
    if baseline == "rloo":
        n = counts[group_index]
        advantages = torch.where(n > 1, centred * n / (n - 1).clamp(min=1), torch.zeros_like(centred))
    if scale == "group":
        advantages = advantages / (std[group_index] + eps)
    elif scale == "batch" and rewards.numel():
        advantages = advantages / (rewards.std(unbiased=False) + eps)
    advantages = torch.where(zero_var[group_index], torch.zeros_like(advantages), advantages)
    keep = ~zero_var[group_index] if drop_zero_variance else torch.ones_like(rewards, dtype=torch.bool)
    return GroupAdvantages(
        advantages=advantages.to(torch.float32),
        keep=keep,
        num_groups=int(present.sum().item()),
        num_zero_variance=int((zero_var & present).sum().item()),
    )


__all__ = ["BASELINES", "STD_SCALES", "GroupAdvantages", "group_advantages"]
