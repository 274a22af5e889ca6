"""One SFT step on recorded traces: negative log-likelihood of the sampled tokens only.

Optionally only rollouts whose reward reaches ``min_reward`` (rejection-sampling fine-tuning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rollwire.trainer.batching import MicroBatch, Sample, micro_batches, samples_from, token_weights
from rollwire.trainer.distributed import DistContext, shard
from rollwire.trainer.forward import forward_logprobs
from rollwire.trainer.losses import sft_nll, weighted_sum
from rollwire.trainer.step import LossFn, optimizer_step
from rollwire.trajectory import Trajectory


@dataclass(frozen=True, slots=True)
class SFTConfig:
    min_reward: float | None = None
    aggregation: str = "token-mean"
    micro_batch_tokens: int = 4096
    packed: bool = True
    share_prefixes: bool = True
    """Forward a prompt that several samples share once (``batching.shared_prefix_units``); packed rows only."""
    max_grad_norm: float | None = 1.0


def sft_samples(trajectories: Sequence[Trajectory], config: SFTConfig) -> tuple[list[Sample], list[str]]:
    """Samples of the trajectories that pass the reward filter, and those trajectories' ids."""
    kept = [
        t
        for t in trajectories
        if config.min_reward is None or (t.reward is not None and t.reward >= config.min_reward)
    ]
    samples = [s for t in kept for s in samples_from(t, 0.0, tempered=False)]
    return samples, [t.rollout_id for t in kept]


def sft_loss() -> LossFn:
    def loss_fn(model: torch.nn.Module, batch: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        logp, _ = forward_logprobs(model, batch)
        loss = weighted_sum(sft_nll(logp), batch.token_weights)
        return loss, {"loss": float(loss.detach()), "loss_tokens": float(batch.loss_mask.sum())}

    return loss_fn


def sft_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trajectories: Sequence[Trajectory],
    config: SFTConfig,
    *,
    ctx: DistContext,
    pad_id: int,
) -> dict[str, float]:
    """One step on the trajectories that pass the reward filter; none passing means no optimizer step."""
    samples, kept = sft_samples(trajectories, config)
    if not samples:
        return {"loss": 0.0, "loss_tokens": 0.0, "rollouts": float(len(trajectories)), "rollouts_kept": 0.0,
                "skipped": 1.0}
    weights = token_weights(samples, config.aggregation)
    mine = shard(list(range(len(samples))), ctx)
    mbs = micro_batches(
        [samples[i] for i in mine],
        [weights[i] for i in mine],
        capacity=config.micro_batch_tokens,
        packed=config.packed,
        pad_id=pad_id,
        share_prefixes=config.share_prefixes,
    )
    result = optimizer_step(model, optimizer, mbs, sft_loss(), ctx=ctx, max_grad_norm=config.max_grad_norm)
    rewards = [float(t.reward) for t in trajectories if t.reward is not None]
    return {
        "loss": result.stats.get("loss", 0.0),
        "loss_tokens": result.stats.get("loss_tokens", 0.0),
        "rollouts": float(len(trajectories)),
        "rollouts_kept": float(len(kept)),
        "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "grad_norm": result.grad_norm,
        "tokens_per_s": result.tokens / result.seconds if result.seconds > 0 else 0.0,
        "step_seconds": result.seconds,
    }


@torch.no_grad()
def sft_eval_loss(model: torch.nn.Module, trajectories: Sequence[Trajectory], *, pad_id: int) -> float:
    """Token-mean NLL of the sampled tokens (held-out evaluation)."""
    samples = [s for t in trajectories for s in samples_from(t, 0.0, tempered=False)]
    weights = token_weights(samples, "token-mean")
    model.eval()
    total = 0.0
    for batch in micro_batches(samples, weights, capacity=4096, packed=True, pad_id=pad_id):
        logp, _ = forward_logprobs(model, batch)
        total += float(weighted_sum(sft_nll(logp), batch.token_weights).detach())
    return total


__all__ = ["SFTConfig", "sft_eval_loss", "sft_loss", "sft_samples", "sft_step"]
