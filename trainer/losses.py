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
    """Entropy of the next-token distribution at every position (a metric, no gradient)."""
    with torch.no_grad():
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
) -> ClipTerms:
    """Token-level PPO-clip with the recorded behaviour logprobs as the old policy.

    ratio = exp(logp - behaviour_logp); loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)).
    ``ratio_cap`` truncates the importance weight for negative advantages (dual-clip): the loss is at most
    -A * ratio_cap, so one stale or mismatched token with a huge ratio cannot dominate the step.
    """
    ratio = torch.exp(logp - behaviour_logp)
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
    "ClipTerms",
    "approx_kl",
    "kl_k3",
    "ppo_clip",
    "sft_nll",
    "token_entropy",
    "token_logprobs",
    "weighted_sum",
]
