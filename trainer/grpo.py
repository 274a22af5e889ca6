"""One GRPO step: group advantages, stale-sample filter, PPO-clip on the recorded behaviour logprobs.

Composed from advantages.py (who gets which advantage), batching.py (tensors), losses.py (the terms)
and step.py (accumulation and clipping); this module only decides what goes into the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rollwire.trainer.advantages import group_advantages
from rollwire.trainer.batching import MicroBatch, Sample, micro_batches, samples_from, token_weights
from rollwire.trainer.distributed import DistContext, shard
from rollwire.trainer.forward import forward_logprobs
from rollwire.trainer.losses import approx_kl, kl_k3, ppo_clip, weighted_sum
from rollwire.trainer.step import LossFn, StepResult, optimizer_step
from rollwire.trajectory import Trajectory


@dataclass(frozen=True, slots=True)
class GRPOConfig:
    clip_low: float = 0.2
    clip_high: float = 0.2
    ratio_cap: float | None = None
    kl_coef: float = 0.0
    aggregation: str = "token-mean"
    scale_std: bool = False
    drop_zero_variance: bool = True
    max_policy_lag: int | None = None
    micro_batch_tokens: int = 4096
    packed: bool = True
    max_grad_norm: float | None = 1.0
    side_calls: bool = False
    """Also train on the harness's side-call segments (their reward is the task's, which they did not earn)."""


@dataclass(frozen=True, slots=True)
class GRPOBatch:
    """What a step trains on, and what was left out and why."""

    samples: list[Sample]
    stats: dict[str, float]
    rollout_ids: list[str]


def _lag(trajectory: Trajectory, current_version: int) -> int:
    versions = trajectory.policy_versions
    return current_version - min(versions) if versions else 0


def prepare_grpo(groups: Sequence[Sequence[Trajectory]], config: GRPOConfig, current_version: int) -> GRPOBatch:
    """Advantages per task group, then drop zero-variance groups (if asked) and samples staler than the lag limit."""
    scored = [[t for t in g if t.reward is not None] for g in groups]
    flat = [t for g in scored for t in g]
    index = torch.tensor([gi for gi, g in enumerate(scored) for _ in g], dtype=torch.long)
    stats: dict[str, float] = {"rollouts_unscored": float(sum(len(g) for g in groups) - len(flat))}
    if not flat:
        return GRPOBatch([], stats | {"groups": 0.0, "groups_zero_variance": 0.0}, [])
    rewards = torch.tensor([float(t.reward) for t in flat])  # type: ignore[arg-type]
    adv = group_advantages(
        rewards, index, scale_std=config.scale_std, drop_zero_variance=config.drop_zero_variance
    )
    lags = [_lag(t, current_version) for t in flat]
    samples: list[Sample] = []
    trained: list[str] = []
    stale = 0
    for i, trajectory in enumerate(flat):
        if not bool(adv.keep[i]):
            continue
        if config.max_policy_lag is not None and lags[i] > config.max_policy_lag:
            stale += 1
            continue
        samples.extend(samples_from(trajectory, float(adv.advantages[i]), main_only=not config.side_calls))
        trained.append(trajectory.rollout_id)
    stats |= {
        "groups": float(adv.num_groups),
        "groups_zero_variance": float(adv.num_zero_variance),
        "rollouts": float(len(flat)),
        "rollouts_stale": float(stale),
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std(unbiased=False)),
        "advantage_mean": float(adv.advantages.mean()),
        "advantage_std": float(adv.advantages.std(unbiased=False)),
        "advantage_min": float(adv.advantages.min()),
        "advantage_max": float(adv.advantages.max()),
        "policy_lag_mean": sum(lags) / len(lags),
        "policy_lag_max": float(max(lags)),
    }
    return GRPOBatch(samples, stats, trained)


def grpo_loss(config: GRPOConfig, ref_model: torch.nn.Module | None = None) -> LossFn:
    """The per-micro-batch loss: weighted PPO-clip (+ kl_coef * k3 KL to the reference model)."""

    def loss_fn(model: torch.nn.Module, batch: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        logp, entropy = forward_logprobs(model, batch, with_entropy=True)
        mask = batch.loss_mask
        terms = ppo_clip(
            logp,
            batch.behaviour_logprobs,
            batch.advantages,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            ratio_cap=config.ratio_cap,
        )
        per_token = terms.loss
        stats: dict[str, float] = {}
        if ref_model is not None and config.kl_coef > 0:
            with torch.no_grad():
                ref_logp, _ = forward_logprobs(ref_model, batch)
            kl = kl_k3(logp, ref_logp)
            per_token = per_token + config.kl_coef * kl
            stats["kl_ref_sum"] = float((kl.detach() * mask).sum())
        loss = weighted_sum(per_token, batch.token_weights)
        with torch.no_grad():
            deviation = ((terms.ratio - 1.0).abs() * mask).max() if mask.any() else torch.tensor(0.0)
            stats |= {
                "loss": float(loss.detach()),
                "loss_tokens": float(mask.sum()),
                "clipped_tokens": float((terms.clipped * mask).sum()),
                "ratio_sum": float((terms.ratio * mask).sum()),
                "ratio_deviation_max": float(deviation),
                "approx_kl_sum": float((approx_kl(logp, batch.behaviour_logprobs) * mask).sum()),
                "entropy_sum": float((entropy * mask).sum()) if entropy is not None else 0.0,
            }
        return loss, stats

    return loss_fn


def grpo_metrics(batch: GRPOBatch, result: StepResult) -> dict[str, float]:
    """Per-token means from the summed statistics, plus the batch's reward/advantage/lag figures."""
    s = result.stats
    n = max(s.get("loss_tokens", 0.0), 1.0)
    out = dict(batch.stats)
    out |= {
        "loss": s.get("loss", 0.0),
        "loss_tokens": s.get("loss_tokens", 0.0),
        "clip_fraction": s.get("clipped_tokens", 0.0) / n,
        "ratio_mean": s.get("ratio_sum", 0.0) / n,
        "ratio_deviation_max": s.get("ratio_deviation_max", 0.0),
        "approx_kl": s.get("approx_kl_sum", 0.0) / n,
        "entropy": s.get("entropy_sum", 0.0) / n,
        "grad_norm": result.grad_norm,
        "tokens_per_s": result.tokens / result.seconds if result.seconds > 0 else 0.0,
        "step_seconds": result.seconds,
    }
    if "kl_ref_sum" in s:
        out["kl_ref"] = s["kl_ref_sum"] / n
    return out


def grpo_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: GRPOBatch,
    config: GRPOConfig,
    *,
    ctx: DistContext,
    pad_id: int,
    ref_model: torch.nn.Module | None = None,
) -> dict[str, float]:
    """Train on this rank's slice of ``batch``; weights are shared over the whole global batch.

    A batch left empty by the filters (all groups zero-variance, all stale) takes no optimizer step.
    """
    if not batch.samples:  # the same on every rank: all ranks build the same global batch
        return dict(batch.stats) | {"loss": 0.0, "loss_tokens": 0.0, "skipped": 1.0}
    weights = token_weights(batch.samples, config.aggregation)
    mine = shard(list(range(len(batch.samples))), ctx)
    local = [batch.samples[i] for i in mine]
    local_w = [weights[i] for i in mine]
    mbs = micro_batches(local, local_w, capacity=config.micro_batch_tokens, packed=config.packed, pad_id=pad_id)
    result = optimizer_step(
        model, optimizer, mbs, grpo_loss(config, ref_model), ctx=ctx, max_grad_norm=config.max_grad_norm
    )
    return grpo_metrics(batch, result)


__all__ = ["GRPOBatch", "GRPOConfig", "grpo_loss", "grpo_metrics", "grpo_step", "prepare_grpo"]
