"""Group advantages: mean-centred per group, optionally std-scaled; zero-variance groups counted, dropped or kept."""

from __future__ import annotations

import math

import torch

from rollwire.trainer.advantages import group_advantages


def test_centred_and_std_scaled_by_hand() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 5.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    plain = group_advantages(rewards, groups, drop_zero_variance=False)
    assert plain.advantages.tolist() == [0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0]
    assert plain.num_groups == 3 and plain.num_zero_variance == 2 and bool(plain.keep.all())

    scaled = group_advantages(rewards, groups, scale_std=True, drop_zero_variance=True)
    std = math.sqrt((0.75**2 + 3 * 0.25**2) / 4)  # population std of group 0
    assert torch.allclose(scaled.advantages[:4], torch.tensor([0.75, -0.25, -0.25, -0.25]) / (std + 1e-6))
    assert scaled.keep.tolist() == [True] * 4 + [False] * 3
