"""Group-relative advantages (GRPO): each rollout's reward against the others of its task group.

Pure tensor functions, checkable by hand: a group's advantages are its rewards minus the group mean,
optionally divided by the group's (population) standard deviation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
    drop_zero_variance: bool = True,
    eps: float = 1e-6,
) -> GroupAdvantages:
    """Mean-centred rewards per group; ``scale_std`` divides by the group std (+eps).

    ``group_index`` holds small non-negative ints naming each rollout's group. A group whose rewards
    all agree (std <= eps) has advantage 0; with ``drop_zero_variance`` its rollouts are marked not kept.
    """
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
    advantages = centred / (std[group_index] + eps) if scale_std else centred
    advantages = torch.where(zero_var[group_index], torch.zeros_like(advantages), advantages)
    keep = ~zero_var[group_index] if drop_zero_variance else torch.ones_like(rewards, dtype=torch.bool)
    return GroupAdvantages(
        advantages=advantages.to(torch.float32),
        keep=keep,
        num_groups=int(present.sum().item()),
        num_zero_variance=int((zero_var & present).sum().item()),
    )


__all__ = ["GroupAdvantages", "group_advantages"]
