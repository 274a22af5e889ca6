"""The top-k / top-p rule that shapes the distribution a token is drawn from, in one place: the bundled engine
samples with it (``top_k_top_p``), and the trainer applies its top-p part again (``nucleus``) to recompute the
processed logprobs the engine recorded (a rule that differed by one token at the nucleus edge would bias every
importance ratio)."""

from __future__ import annotations

import torch


def top_k_top_p(logits: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Mask logits (rows x vocab) outside each row's top-k and top-p nucleus; ``top_k`` 0 keeps every token.
    vLLM's rule: the best token always stays."""
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    kth = sorted_logits.gather(1, (vocab - k).unsqueeze(1))
    sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    cumulative = probs.cumsum(dim=-1)
    drop = cumulative <= (1 - top_p).unsqueeze(1)
    drop[:, -1] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def nucleus(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Top-p only (rows x vocab)."""
    return top_k_top_p(logits, top_p, torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device))


__all__ = ["nucleus", "top_k_top_p"]
