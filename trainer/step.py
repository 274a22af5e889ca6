"""One optimizer step over a list of micro-batches: gradient accumulation, grad-norm clipping, stats.

The algorithm (GRPO, SFT) only supplies a loss function per micro-batch; everything about how the
gradients of a step are accumulated, synchronised across ranks and clipped lives here, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rollwire.trainer.batching import MicroBatch
from rollwire.trainer.distributed import DistContext, accumulate, reduce_stats

LossFn = Callable[[torch.nn.Module, MicroBatch], tuple[torch.Tensor, dict[str, float]]]
"""(model, micro-batch) -> (this micro-batch's share of the step loss, summed statistics)."""


@dataclass(frozen=True, slots=True)
class StepResult:
    stats: dict[str, float]
    """Statistics summed over micro-batches and ranks (``*_max`` keys: maxima)."""
    grad_norm: float
    seconds: float
    tokens: int
    """Tokens forwarded (with padding) across ranks."""


def _merge(total: dict[str, float], part: dict[str, float]) -> None:
    for key, value in part.items():
        if key.endswith("_max"):
            total[key] = max(total.get(key, value), value)
        else:
            total[key] = total.get(key, 0.0) + value


def _idle_backward(model: torch.nn.Module, ctx: DistContext) -> None:
    """A rank with no samples still joins the gradient all-reduce, contributing zeros."""
    ids = torch.zeros((1, 1), dtype=torch.long, device=ctx.device)
    out = model(input_ids=ids, use_cache=False)
    (out.logits.sum() * 0.0).backward()


def _max_over_ranks(value: int, ctx: DistContext) -> int:
    if not ctx.active:
        return max(value, 1)
    import torch.distributed as dist

    box = torch.tensor([max(value, 1)], dtype=torch.long, device=ctx.device)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return int(box.item())


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[MicroBatch],
    loss_fn: LossFn,
    *,
    ctx: DistContext,
    max_grad_norm: float | None,
) -> StepResult:
    """Accumulate every micro-batch's gradient, clip the total norm, take one optimizer step."""
    started = time.perf_counter()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    stats: dict[str, float] = {}
    tokens = 0
    scale = float(ctx.world_size) if ctx.active else 1.0  # ranks' gradients are averaged; weights are global
    # FSDP2 gathers parameters in every forward, so all ranks run the same number of passes;
    # a rank that runs out of micro-batches (or has none) contributes zero-gradient passes
    passes = _max_over_ranks(len(batches), ctx)
    for i in range(passes):
        with accumulate(model, ctx, last=i == passes - 1):
            if i >= len(batches):
                _idle_backward(model, ctx)
                continue
            batch = batches[i].to(ctx.device)
            loss, part = loss_fn(model, batch)
            (loss * scale).backward()
        _merge(stats, part)
        tokens += batch.num_tokens
    params = [p for p in model.parameters() if p.grad is not None]
    limit = max_grad_norm if max_grad_norm and max_grad_norm > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, limit)
    if hasattr(norm, "full_tensor"):  # FSDP2 returns a DTensor
        norm = norm.full_tensor()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stats["tokens_forwarded"] = float(tokens)
    stats = reduce_stats(stats, ctx)
    return StepResult(
        stats=stats,
        grad_norm=float(norm),
        seconds=time.perf_counter() - started,
        tokens=int(stats["tokens_forwarded"]),
    )


__all__ = ["LossFn", "StepResult", "optimizer_step"]
