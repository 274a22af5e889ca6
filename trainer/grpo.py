"""One GRPO step: failure policy and stale-sample filter, group advantages, PPO-clip on the behaviour logprobs.

Composed from advantages.py (who gets which advantage), batching.py (tensors), losses.py (the terms)
and step.py (accumulation and clipping); this module only decides what goes into the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rollwire.trainer.advantages import group_advantages
from rollwire.trainer.batching import (
    GroupBuffer,
    MicroBatch,
    Sample,
    collate,
    micro_batches,
    samples_from,
    token_weights,
)
from rollwire.trainer.distributed import DistContext, shard
from rollwire.trainer.forward import forward_logprobs
from rollwire.trainer.losses import (
    anchored,
    approx_kl,
    gspo_log_ratio,
    is_weights,
    kl_k3,
    ppo_clip,
    weighted_sum,
)
from rollwire.trainer.step import LossFn, StepResult, optimizer_step
from rollwire.trajectory import POLICY, Trajectory, failure_cause


@dataclass(frozen=True, slots=True)
class GRPOConfig:
    clip_low: float = 0.2
    clip_high: float = 0.2
    ratio_cap: float | None = None
    kl_coef: float = 0.0
    aggregation: str = "token-mean"
    """token-mean, sequence-mean (each rollout counts once) or constant (Dr.GRPO; see ``loss_normaliser``)."""
    loss_normaliser: int = 0
    """Tokens per rollout the ``constant`` aggregation divides by (Dr.GRPO's constant, e.g. the max response length)."""
    scale_std: bool = False
    """Shorthand for ``std_scale="group"`` (kept for older configs)."""
    std_scale: str = "none"
    """Divide centred rewards by the group's std, the batch's, or nothing (none, group, batch)."""
    baseline: str = "mean"
    """mean (GRPO) or rloo (leave-one-out mean of the other members)."""
    ratio_level: str = "token"
    """token (PPO/GRPO) or sequence (GSPO: one length-normalised ratio per sequence)."""
    mask_truncated: bool = False
    """Leave rollouts with an overlong (length-truncated) call out of the loss (DAPO's overlong filter)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (the loss subtracts entropy_coef x token entropy)."""
    failure_reward: float | None = 0.0
    """Reward of a rollout the policy failed (harness exit, deadline, budget); None leaves them out."""
    tempered_logprobs: bool = True
    """Recompute logprobs under each token's recorded temperature / top_p (the engine reports processed
    logprobs: the bundled engine, vLLM with --logprobs-mode processed_logprobs); False for raw ones."""
    is_correction: str = "none"
    """Engine-trainer mismatch correction: none, tis (truncated IS) or mis (masked IS); see losses.is_weights."""
    is_level: str = "token"
    is_cap: float = 2.0
    is_floor: float | None = None
    drop_zero_variance: bool = True
    max_policy_lag: int | None = None
    micro_batch_tokens: int = 4096
    packed: bool = True
    share_prefixes: bool = True
    """Forward a prompt that several samples share once (``batching.shared_prefix_units``); packed rows only."""
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


def training_reward(trajectory: Trajectory, failure_reward: float | None) -> float | None:
    """The reward a rollout trains with, or None when it is left out (``training_reward_of``)."""
    return training_reward_of(trajectory.status, trajectory.metadata.get("error"), trajectory.reward, failure_reward)


def training_reward_of(status: str, error: str | None, reward: float | None, failure_reward: float | None) -> float | None:
    """The reward a rollout in ``status`` (with its row's ``error`` and ``reward``) trains with, or None.

    A finished rollout keeps its checker's reward; one the policy failed gets ``failure_reward`` (unless
    its row already holds a reward); infrastructure, setup and checker failures say nothing about the
    policy and are left out (the orchestrator retries infrastructure failures as fresh rows). A sampler that
    sees the rows, not the trajectories, classes a group by this same rule.
    """
    cause = failure_cause(status, error)
    if cause is None:
        return reward
    if cause == POLICY and failure_reward is not None:
        return reward if reward is not None else failure_reward
    return None


def rewards_have_signal(rewards: Sequence[float]) -> bool:
    """Whether a group's training rewards can train anything: two or more, and not all equal.

    A group whose rewards agree has advantage 0 everywhere (``group_advantages``); dynamic sampling replaces it
    with another draw rather than spend a step's share on it.
    """
    if len(rewards) < 2:
        return False
    return group_advantages(torch.tensor(rewards), torch.zeros(len(rewards), dtype=torch.long)).num_zero_variance == 0


def group_has_signal(group: Sequence[Trajectory], config: GRPOConfig) -> bool:
    """``rewards_have_signal`` over the group's rollouts that train."""
    return rewards_have_signal([r for r in (training_reward(t, config.failure_reward) for t in group) if r is not None])


def leave_out_without_signal(buffer: GroupBuffer, config: GRPOConfig) -> dict[str, list[Trajectory]]:
    """Take the full groups with no reward spread out of ``buffer`` (dynamic sampling); returns them by key, for
    the caller to record as consumed in its next checkpoint."""
    out = {}
    for key in buffer.ready():
        if not group_has_signal(buffer.pending[key], config):
            out[key] = buffer.pending.pop(key)
    return out


def prepare_grpo(groups: Sequence[Sequence[Trajectory]], config: GRPOConfig, current_version: int) -> GRPOBatch:
    """Drop rollouts that cannot train (unscored, too stale), then advantages per group over what is left.

    Filtering first keeps each group's advantages zero-mean over the rollouts that actually train.
    """
    rewards_of: dict[str, float] = {}
    unscored = failed = stale = 0
    kept: list[list[Trajectory]] = []
    lags: list[int] = []
    for group in groups:
        members = []
        for t in group:
            reward = training_reward(t, config.failure_reward)
            if reward is None:
                unscored += 1
                continue
            lag = _lag(t, current_version)
            lags.append(lag)  # the lag figures describe what arrived, stale or not
            if config.max_policy_lag is not None and lag > config.max_policy_lag:
                stale += 1
                continue
            failed += t.failure_cause is not None
            rewards_of[t.rollout_id] = float(reward)
            members.append(t)
        kept.append(members)
    flat = [t for g in kept for t in g]
    stats: dict[str, float] = {
        "rollouts_unscored": float(unscored),
        "rollouts_stale": float(stale),
        "rollouts_failed_trained": float(failed),
    }
    if not flat:
        return GRPOBatch([], stats | {"groups": 0.0, "groups_zero_variance": 0.0}, [])
    index = torch.tensor([gi for gi, g in enumerate(kept) for _ in g], dtype=torch.long)
    rewards = torch.tensor([rewards_of[t.rollout_id] for t in flat])
    adv = group_advantages(
        rewards,
        index,
        std_scale="group" if config.scale_std else config.std_scale,
        baseline=config.baseline,
        drop_zero_variance=config.drop_zero_variance,
    )
    samples: list[Sample] = []
    trained: list[str] = []
    truncated = 0
    for i, trajectory in enumerate(flat):
        if not bool(adv.keep[i]):
            continue
        if config.mask_truncated and trajectory.truncated:
            truncated += 1
            continue
        reward = rewards_of[trajectory.rollout_id]
        samples.extend(
            samples_from(
                trajectory,
                float(adv.advantages[i]),
                reward=reward,
                tempered=config.tempered_logprobs,
                main_only=not config.side_calls,
                current_version=current_version,
            )
        )
        trained.append(trajectory.rollout_id)
    stats |= {
        "groups": float(adv.num_groups),
        "groups_zero_variance": float(adv.num_zero_variance),
        "rollouts": float(len(flat)),
        "rollouts_truncated_masked": float(truncated),
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


def updates_nothing(batch: GRPOBatch, config: GRPOConfig) -> bool:
    """No sample, or only zero advantages with no KL or entropy term: a step would change nothing it should.

    (AdamW would still move the weights from its moments and weight decay, so such a step is not taken.)
    """
    if not batch.samples:
        return True
    return config.kl_coef <= 0 and config.entropy_coef == 0 and all(s.advantage == 0.0 for s in batch.samples)


def grpo_loss(config: GRPOConfig, ref_model: torch.nn.Module | None = None) -> LossFn:
    """The per-micro-batch loss: weighted PPO-clip (token or GSPO sequence ratio), times the
    importance-sampling correction if any, + kl_coef x k3 KL to the reference, - entropy_coef x entropy.

    With a correction on, a token the trainer's current policy sampled is clipped around the trainer's own
    logprob before the batch's first update (decoupled PPO, as verl's rollout correction and slime's TIS do):
    the samples' ``proximal_logprobs`` when ``with_proximal_logprobs`` took them, so several passes over one batch
    all clip against the policy they started from; otherwise ``logp.detach()``, which is that policy for the
    single step ``rollwire train`` takes per batch. The engine's logprobs enter through the truncated / masked
    weight pi_trainer / pi_engine. A token an older policy sampled is clipped around that policy, the weight
    inside its ratio (``losses.anchored``).
    """

    def loss_fn(model: torch.nn.Module, batch: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        logp, entropy = forward_logprobs(model, batch, with_entropy=True, entropy_grad=config.entropy_coef != 0)
        mask = batch.loss_mask
        behaviour = batch.behaviour_logprobs
        if config.is_correction == "none":
            old = behaviour
        else:
            old = batch.proximal_logprobs if batch.proximal_logprobs is not None else logp.detach()
        correction = is_weights(  # pi_proximal / pi_engine: the correction's weight, no gradient
            old, behaviour, mask, batch.sequence_ids, mode=config.is_correction, level=config.is_level,
            cap=config.is_cap, floor=config.is_floor,
        )
        old, weights = anchored(old, correction, batch.stale)  # without a correction: the behaviour policy, weight 1
        log_ratio = gspo_log_ratio(logp, old, mask, batch.sequence_ids) if config.ratio_level == "sequence" else None
        terms = ppo_clip(
            logp,
            old,
            batch.advantages,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            ratio_cap=config.ratio_cap,
            log_ratio=log_ratio,
        )
        per_token = terms.loss * weights
        stats: dict[str, float] = {}
        if ref_model is not None and config.kl_coef > 0:
            with torch.no_grad():
                ref_logp, _ = forward_logprobs(ref_model, batch)
            kl = kl_k3(logp, ref_logp)
            per_token = per_token + config.kl_coef * kl
            stats["kl_ref_sum"] = float((kl.detach() * mask).sum())
        if config.entropy_coef and entropy is not None:
            per_token = per_token - config.entropy_coef * entropy
        loss = weighted_sum(per_token, batch.token_weights)
        with torch.no_grad():
            mismatch = torch.exp(logp - behaviour)
            deviation = ((mismatch - 1.0).abs() * mask).max() if mask.any() else torch.tensor(0.0)
            stats |= {
                "loss": float(loss.detach()),
                "loss_tokens": float(mask.sum()),
                "clipped_tokens": float((terms.clipped * mask).sum()),
                "ratio_sum": float((mismatch * mask).sum()),
                "ratio_deviation_max": float(deviation),
                "is_weight_sum": float((correction * mask).sum()),
                "is_rejected_tokens": float(((correction == 0) & (mask > 0)).sum()),
                "approx_kl_sum": float((approx_kl(logp, behaviour) * mask).sum()),
                "entropy_sum": float((entropy.detach() * mask).sum()) if entropy is not None else 0.0,
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
        "is_weight_mean": s.get("is_weight_sum", 0.0) / n,
        "is_rejected_fraction": s.get("is_rejected_tokens", 0.0) / n,
        "grad_norm": result.grad_norm,
        "tokens_per_s": result.tokens / result.seconds if result.seconds > 0 else 0.0,
        "step_seconds": result.seconds,
    }
    if "kl_ref_sum" in s:
        out["kl_ref"] = s["kl_ref_sum"] / n
    return out


@torch.no_grad()
def with_proximal_logprobs(model: torch.nn.Module, batch: GRPOBatch, *, pad_id: int) -> GRPOBatch:
    """``batch`` with each sample's logprobs under ``model`` now, before any pass over it.

    Needed when several passes (epochs) train on one batch with an importance-sampling correction on: the
    PPO clip must hold every pass near the policy the batch started from, not the one of the previous pass
    (a ratio of 1 at each pass clips nothing, and a few unclipped passes at a high rate wreck the policy).
    One forward per sample, no gradient.
    """
    samples = []
    for sample in batch.samples:
        micro = collate([sample], [[0]], [1.0], packed=False, pad_id=pad_id)
        logp, _ = forward_logprobs(model, micro)
        shifted = logp[0, : len(sample.token_ids) - 1].tolist()  # position t holds log p(token t + 1)
        samples.append(dataclasses.replace(sample, proximal_logprobs=[0.0, *shifted]))
    return dataclasses.replace(batch, samples=samples)


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

    A batch that would update nothing (left empty by the filters, or all advantages zero) takes no
    optimizer step and says ``skipped``: the loop then costs no checkpoint, push or version for it.
    """
    if updates_nothing(batch, config):  # the same on every rank: all ranks build the same global batch
        return dict(batch.stats) | {"loss": 0.0, "loss_tokens": 0.0, "skipped": 1.0}
    weights = token_weights(batch.samples, config.aggregation, normaliser=config.loss_normaliser)
    mine = shard(list(range(len(batch.samples))), ctx)
    local = [batch.samples[i] for i in mine]
    local_w = [weights[i] for i in mine]
    mbs = micro_batches(local, local_w, capacity=config.micro_batch_tokens, packed=config.packed, pad_id=pad_id,
                        share_prefixes=config.share_prefixes)  # fmt: skip
    result = optimizer_step(
        model, optimizer, mbs, grpo_loss(config, ref_model), ctx=ctx, max_grad_norm=config.max_grad_norm
    )
    return grpo_metrics(batch, result)


__all__ = [
    "GRPOBatch",
    "GRPOConfig",
    "grpo_loss",
    "grpo_metrics",
    "grpo_step",
    "group_has_signal",
    "leave_out_without_signal",
    "rewards_have_signal",
    "prepare_grpo",
    "training_reward",
    "training_reward_of",
    "updates_nothing",
    "with_proximal_logprobs",
]
