"""Loss terms as pure tensor functions over aligned [rows, length] tensors (hand-checkable in tests).

Every per-token term is summed with ``token_weights`` (see batching.token_weights), so token-mean and
sequence-mean aggregation, gradient accumulation and data parallelism all reduce to one weighted sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) at every position, computed in float32."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at every position (differentiable: the entropy bonus uses it)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


@dataclass(frozen=True, slots=True)
class ClipTerms:
    loss: torch.Tensor
    """Per-token PPO-clip loss."""
    ratio: torch.Tensor
    clipped: torch.Tensor
    """1.0 where the clipped branch was taken (its gradient is zero)."""


def ppo_clip(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ratio_cap: float | None = None,
    log_ratio: torch.Tensor | None = None,
) -> ClipTerms:
    """Token-level PPO-clip with the recorded behaviour logprobs as the old policy.

    ratio = exp(logp - behaviour_logp); loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)).
    ``ratio_cap`` truncates the importance weight for negative advantages (dual-clip): the loss is at most
    -A * ratio_cap, so one stale or mismatched token with a huge ratio cannot dominate the step.
    ``log_ratio`` replaces logp - behaviour_logp (GSPO's sequence ratio, or the ratio to the trainer's own
    old logprobs under an importance-sampling correction).
    """
    ratio = torch.exp(logp - behaviour_logp if log_ratio is None else log_ratio)
    unclipped = -advantages * ratio
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = -advantages * clipped_ratio
    loss = torch.maximum(unclipped, clipped)
    took_clip = (clipped > unclipped).float()
    if ratio_cap is not None:
        cap = -advantages * ratio_cap
        capped = (advantages < 0) & (loss > cap)
        loss = torch.where(capped, cap, loss)
        took_clip = torch.where(capped, torch.ones_like(took_clip), took_clip)
    return ClipTerms(loss=loss, ratio=ratio, clipped=took_clip)


def sequence_mean(values: torch.Tensor, mask: torch.Tensor, sequence_ids: torch.Tensor) -> torch.Tensor:
    """Each position gets the mean of ``values`` over the loss tokens of its sequence (0 for a sequence without any).

    ``sequence_ids`` indexes the step's samples (-1 on padding); packed rows hold several sequences.
    """
    flat_ids = sequence_ids.clamp(min=0).reshape(-1)
    size = int(flat_ids.max().item()) + 1 if flat_ids.numel() else 0
    m = mask.reshape(-1).to(values.dtype)
    sums = torch.zeros(size, dtype=values.dtype, device=values.device).index_add(0, flat_ids, values.reshape(-1) * m)
    counts = torch.zeros(size, dtype=values.dtype, device=values.device).index_add(0, flat_ids, m)
    means = sums / counts.clamp(min=1.0)
    return means[flat_ids].reshape(values.shape)


def sequence_sum(values: torch.Tensor, mask: torch.Tensor, sequence_ids: torch.Tensor) -> torch.Tensor:
    """Each position gets the sum of ``values`` over the loss tokens of its sequence."""
    flat_ids = sequence_ids.clamp(min=0).reshape(-1)
    size = int(flat_ids.max().item()) + 1 if flat_ids.numel() else 0
    m = mask.reshape(-1).to(values.dtype)
    sums = torch.zeros(size, dtype=values.dtype, device=values.device).index_add(0, flat_ids, values.reshape(-1) * m)
    return sums[flat_ids].reshape(values.shape)


def gspo_log_ratio(
    logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, sequence_ids: torch.Tensor
) -> torch.Tensor:
    """GSPO's sequence-level log importance ratio at every token (GSPO-token form, Zheng et al. 2025).

    log s_i = mean_t(logp - behaviour) over sequence i's loss tokens. Each token carries
    sg[log s_i] + logp - sg[logp]: its value is the sequence's log ratio, its gradient the token's own
    (GSPO-token; with one advantage per sequence, the same gradient as sequence-level GSPO).
    """
    seq = sequence_mean(logp.detach() - behaviour_logp, mask, sequence_ids)
    return seq + logp - logp.detach()


IS_CORRECTIONS = ("none", "tis", "mis")
IS_LEVELS = ("token", "sequence")


def is_weights(
    trainer_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    sequence_ids: torch.Tensor,
    *,
    mode: str,
    level: str = "token",
    cap: float = 2.0,
    floor: float | None = None,
) -> torch.Tensor:
    """Importance weights pi_trainer / pi_engine that correct the engine-trainer mismatch (no gradient).

    ``tis`` (truncated IS, Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy
    RL training"): w = min(rho, cap). ``mis`` (masked IS, Liu, Li et al. 2025, "When speed kills
    stability"; verl's rollout correction in mask mode): w = rho inside [floor, cap] (floor defaults
    to 1/cap), else 0, so outliers leave the gradient instead of being clipped into it.
    ``level="sequence"``: rho is the product of the sequence's token ratios, one weight per sequence.
    """
    if mode not in IS_CORRECTIONS or level not in IS_LEVELS:
        raise ValueError(f"importance-sampling correction {mode!r}/{level!r}: expected {IS_CORRECTIONS} / {IS_LEVELS}")
    with torch.no_grad():
        if mode == "none":
            return torch.ones_like(trainer_logp)
        log_rho = trainer_logp.detach() - behaviour_logp
        if level == "sequence":
            log_rho = sequence_sum(log_rho, mask, sequence_ids)
        rho = torch.exp(log_rho.clamp(max=50.0))
        if mode == "tis":
            return torch.clamp(rho, max=cap)
        low = floor if floor is not None else 1.0 / cap
        return torch.where((rho >= low) & (rho <= cap), rho, torch.zeros_like(rho))


def anchored(
    proximal_logp: torch.Tensor, weights: torch.Tensor, stale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's PPO anchor (the "old" logprob its ratio is taken against) and the weight left outside the clip.

    A token the trainer's own policy sampled is clipped around the trainer's logprob of it, and its correction
    weight pi_proximal / pi_engine (the engine-trainer mismatch alone) multiplies the clipped term: decoupled PPO.
    A token an older policy sampled (``stale``) is clipped around the policy that sampled it: the weight moves into
    the ratio, pi / pi_proximal x w, which where w is the whole ratio (TIS under its cap) is pi / pi_engine. Its
    trust region is then measured from the sampling policy, so an update cannot push a token further past where
    the updates since its sampling already moved it; anchored at the proximal policy instead, each update's clip
    starts afresh from the last one's result, and at lag 1 on the bundled engine the held-out reward plateaued
    ~0.15 below lockstep's (``docs/bench-log.md``, ``bench/async_rl.py``). A token a masked correction drops
    (w = 0) stays dropped.
    """
    if stale is None:
        return proximal_logp, weights
    inside = stale & (weights > 0)
    old = torch.where(inside, proximal_logp - torch.log(torch.where(inside, weights, 1.0)), proximal_logp)
    return old, torch.where(inside, torch.ones_like(weights), weights)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate k3 = exp(ref - logp) - (ref - logp) - 1 (non-negative)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def approx_kl(logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(behaviour || policy), the usual 'approx_kl' of PPO logs."""
    delta = logp - behaviour_logp
    return torch.exp(delta) - delta - 1.0


def sft_nll(logp: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood (the loss mask selects the sampled tokens)."""
    return -logp


def weighted_sum(per_token: torch.Tensor, token_weights: torch.Tensor) -> torch.Tensor:
    """The step's share of this micro-batch: sum of per-token terms times their aggregation weights."""
    return (per_token * token_weights).sum()


__all__ = [
    "IS_CORRECTIONS",
    "IS_LEVELS",
    "ClipTerms",
    "approx_kl",
    "gspo_log_ratio",
    "is_weights",
    "kl_k3",
    "ppo_clip",
    "anchored",
    "sequence_mean",
    "sequence_sum",
    "sft_nll",
    "token_entropy",
    "token_logprobs",
    "weighted_sum",
]
