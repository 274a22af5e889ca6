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


def forward_logprobs(
    model: torch.nn.Module, batch: MicroBatch, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) for every position of ``batch`` (zero where there is no target), and optionally entropy."""
    logits = forward_logits(model, batch)
    if not with_entropy:
        return token_logprobs(logits, batch.targets) * (batch.loss_mask > 0), None
    every = torch.log_softmax(logits.float(), dim=-1)  # one log-softmax serves both
    logp = every.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1) * (batch.loss_mask > 0)
    with torch.no_grad():
        entropy = -(every.exp() * every).sum(-1)
    return logp, entropy


__all__ = ["forward_logits", "forward_logprobs"]
