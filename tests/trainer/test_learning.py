"""A few GRPO steps raise the probability of rewarded completions; SFT lowers held-out loss."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from rollwire.trainer.batching import micro_batches, samples_from, token_weights
from rollwire.trainer.distributed import DistContext
from rollwire.trainer.forward import forward_logprobs
from rollwire.trainer.grpo import GRPOConfig, grpo_step, prepare_grpo
from rollwire.trainer.sft import SFTConfig, sft_eval_loss, sft_step
from rollwire.trajectory import Trajectory

GOOD = [40, 41, 42, 43]
BAD = [60, 61, 62, 63]


def _seq_logprob(model: torch.nn.Module, traj: Trajectory) -> float:
    samples = samples_from(traj, 0.0)
    batch = micro_batches(samples, token_weights(samples, "token-mean"), capacity=256, packed=True, pad_id=0)[0]
    with torch.no_grad():
        logp, _ = forward_logprobs(model, batch)
    return float(logp.sum())


def test_grpo_raises_probability_of_rewarded_completions(tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]) -> None:
    model = tiny_model
    sample_trajectory = sampler
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    prompts = [[10, 11, 12], [20, 21, 22]]
    config = GRPOConfig(max_grad_norm=1.0, micro_batch_tokens=64)
    probe = [sample_trajectory(model, p, completion=c, reward=r) for p in prompts for c, r in ((GOOD, 1), (BAD, 0))]
    before = [_seq_logprob(model, t) for t in probe]
    for step in range(4):
        groups = [
            [sample_trajectory(model, p, completion=c, reward=r, group_id=f"g{gi}", version=step)
             for c, r in ((GOOD, 1.0), (BAD, 0.0), (GOOD, 1.0), (BAD, 0.0))]
            for gi, p in enumerate(prompts)
        ]
        batch = prepare_grpo(groups, config, current_version=step)
        metrics = grpo_step(model, optimizer, batch, config, ctx=DistContext(), pad_id=0)
        if step == 0:  # on-policy: behaviour logprobs are the trainer's own
            assert metrics["ratio_deviation_max"] < 1e-4 and metrics["clip_fraction"] == 0.0
    after = [_seq_logprob(model, t) for t in probe]
    good_gain = [after[i] - before[i] for i in (0, 2)]
    bad_gain = [after[i] - before[i] for i in (1, 3)]
    assert all(g > 0.5 for g in good_gain), good_gain
    assert all(b < 0 for b in bad_gain), bad_gain


def test_grpo_zero_variance_groups_are_dropped_and_counted(tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]) -> None:
    model = tiny_model
    sample_trajectory = sampler
    flat = [[sample_trajectory(model, [1, 2], completion=GOOD, reward=1.0) for _ in range(2)]]
    mixed = [sample_trajectory(model, [3, 4], completion=c, reward=r, group_id="m") for c, r in ((GOOD, 1), (BAD, 0))]
    dropped = prepare_grpo(flat + [mixed], GRPOConfig(drop_zero_variance=True), 0)
    kept = prepare_grpo(flat + [mixed], GRPOConfig(drop_zero_variance=False), 0)
    assert dropped.stats["groups_zero_variance"] == 1 and len(dropped.samples) == 2
    assert len(kept.samples) == 4 and sorted(s.advantage for s in kept.samples) == [-0.5, 0.0, 0.0, 0.5]


def test_grpo_drops_samples_past_the_policy_lag(tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]) -> None:
    model = tiny_model
    sample_trajectory = sampler
    group = [
        sample_trajectory(model, [3, 4], completion=GOOD, reward=1.0, version=0),
        sample_trajectory(model, [3, 4], completion=GOOD, reward=1.0, version=5),
        sample_trajectory(model, [3, 4], completion=BAD, reward=0.0, version=5),
    ]
    batch = prepare_grpo([group], GRPOConfig(max_policy_lag=2), current_version=6)
    assert batch.stats["rollouts_stale"] == 1 and batch.rollout_ids == [group[1].rollout_id, group[2].rollout_id]
    assert batch.stats["policy_lag_max"] == 6
    assert [s.advantage for s in batch.samples] == [0.5, -0.5]  # centred without the stale member


def test_sft_lowers_held_out_loss(tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]) -> None:
    model = tiny_model
    sample_trajectory = sampler
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    pattern = [30, 31, 32, 33, 34]

    def trace(i: int, reward: float) -> Trajectory:
        return sample_trajectory(model, [100 + i, 101 + i], completion=pattern, reward=reward)

    train = [trace(i, 1.0) for i in range(6)] + [trace(i, 0.0) for i in range(6, 8)]
    held_out = [trace(i, 1.0) for i in range(20, 23)]
    before = sft_eval_loss(model, held_out, pad_id=0)
    config = SFTConfig(min_reward=0.5, micro_batch_tokens=64)
    for _ in range(4):
        metrics = sft_step(model, optimizer, train, config, ctx=DistContext(), pad_id=0)
        assert metrics["rollouts_kept"] == 6
    after = sft_eval_loss(model, held_out, pad_id=0)
    assert after < before * 0.8, (before, after)


def test_a_batch_emptied_by_the_filters_takes_no_step(
    tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]
) -> None:
    before = [p.detach().clone() for p in tiny_model.parameters()]
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=1e-2, weight_decay=0.1)
    flat = [[sampler(tiny_model, [1, 2], completion=GOOD, reward=1.0) for _ in range(2)]]
    batch = prepare_grpo(flat, GRPOConfig(), 0)
    metrics = grpo_step(tiny_model, optimizer, batch, GRPOConfig(), ctx=DistContext(), pad_id=0)
    assert metrics["skipped"] == 1.0 and metrics["groups_zero_variance"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_model.parameters()))


def test_kl_to_reference_is_zero_at_start_and_grows(
    tiny_model: torch.nn.Module, tiny_model_dir: Path, sampler: Callable[..., Trajectory]
) -> None:
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=1e-2)
    config = GRPOConfig(kl_coef=0.1, aggregation="sequence-mean", ratio_cap=3.0)
    group = [sampler(tiny_model, [3, 4], completion=c, reward=r) for c, r in ((GOOD, 1.0), (BAD, 0.0))]
    first = grpo_step(tiny_model, optimizer, prepare_grpo([group], config, 0), config, ctx=DistContext(), pad_id=0,
                      ref_model=ref)
    second = grpo_step(tiny_model, optimizer, prepare_grpo([group], config, 0), config, ctx=DistContext(), pad_id=0,
                       ref_model=ref)
    assert first["kl_ref"] < 1e-9 < second["kl_ref"]
