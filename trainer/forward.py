"""The trainer's forward pass: recomputed logprobs (and entropy) of each micro-batch's targets.

One place runs the model on a MicroBatch, so the faithfulness check, the losses and the benchmark
all see the same numbers (float32 log-softmax over the logits, no KV cache).
"""

from __future__ import annotations

import torch

from rollwire.trainer.batching import MicroBatch
from rollwire.trainer.losses import token_logprobs


def forward_logits(model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
    out = model(
        input_ids=batch.input_ids,
        position_ids=batch.position_ids,
        attention_mask=batch.attention_mask,
        use_cache=False,
    )
    return out.logits


def processed_logits(logits: torch.Tensor, temperature: torch.Tensor | None, top_p: torch.Tensor | None) -> torch.Tensor:
    """The logits of the distribution each target was sampled from: divided by its temperature, then the
    top-p nucleus kept (the rule the engine samples with, ``rollwire.logit_filter``), so the logprobs match the
    engine's processed ones."""
    out = logits.float()
    if temperature is not None:
        out = out / temperature.unsqueeze(-1)
    if top_p is not None and bool((top_p < 1).any()):
        from rollwire.logit_filter import nucleus

        vocab = out.shape[-1]
        flat = out.reshape(-1, vocab)
        rows = (top_p.reshape(-1) < 1).nonzero().squeeze(1)
        kept = nucleus(flat.index_select(0, rows), top_p.reshape(-1).index_select(0, rows))
        out = flat.index_copy(0, rows, kept).reshape(out.shape)
    return out


LOGPROB_FLOOR = -1e4
"""A target outside the trainer's nucleus (a rounding edge) gets this, not -inf (no NaN in the loss)."""


def forward_logprobs(
    model: torch.nn.Module, batch: MicroBatch, *, with_entropy: bool = False, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) for every position of ``batch`` (zero where there is no target), and optionally entropy
    (with its gradient when ``entropy_grad``: an entropy bonus in the loss)."""
    logits = forward_logits(model, batch)
    on = batch.loss_mask > 0
    if batch.temperature is None and batch.top_p is None:
        if not with_entropy:
            return token_logprobs(logits, batch.targets) * on, None
        every = torch.log_softmax(logits.float(), dim=-1)  # one log-softmax serves both
    else:
        every = torch.log_softmax(processed_logits(logits, batch.temperature, batch.top_p), dim=-1)
    picked = every.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1).clamp(min=LOGPROB_FLOOR)
    logp = torch.where(on, picked, torch.zeros_like(picked))
    if not with_entropy:
        return logp, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        probs = every.exp()
        entropy = -(probs * every.masked_fill(probs == 0, 0.0)).sum(-1)
    return logp, entropy


__all__ = ["LOGPROB_FLOOR", "forward_logits", "forward_logprobs", "processed_logits"]
