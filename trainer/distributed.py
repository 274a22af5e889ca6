"""Data-parallel setup for the same entry point under torchrun: DDP (gloo on CPU, NCCL on GPU) or FSDP2.

Every rank reads the same stream and builds the same global batch, then trains on its own slice
(``shard``); the loss weights are computed over the global batch and scaled by the world size,
so the averaged gradients equal one process training on the whole batch.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from rollwire.errors import InvalidRequest

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    strategy: str = "none"
    """none, ddp or fsdp."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


def init_distributed(device: str = "auto", strategy: str = "ddp") -> DistContext:
    """Join the torchrun process group if launched by torchrun; otherwise a single-process context."""
    if strategy not in ("ddp", "fsdp"):
        raise InvalidRequest(f"unknown distributed strategy {strategy!r} (ddp, fsdp)", param="strategy")
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if not dist.is_torchelastic_launched():
        return DistContext(device=torch.device("cuda" if use_cuda else "cpu"))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        local = rank % torch.cuda.device_count()
        torch.cuda.set_device(local)
        target = torch.device("cuda", local)
    else:
        target = torch.device("cpu")
    logger.info("distributed: rank %d of %d on %s (%s)", rank, world, target, strategy)
    return DistContext(rank=rank, world_size=world, device=target, strategy=strategy if world > 1 else "none")


def wrap_model(model: torch.nn.Module, ctx: DistContext) -> torch.nn.Module:
    """DDP or FSDP2 (``fully_shard``) around ``model``; unchanged in a single process."""
    if ctx.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    if ctx.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in getattr(getattr(model, "model", model), "layers", []):
            fully_shard(layer)
        fully_shard(model)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


@contextlib.contextmanager
def accumulate(model: torch.nn.Module, ctx: DistContext, *, last: bool) -> Iterator[None]:
    """Skip DDP's gradient all-reduce on all but the last micro-batch of a step."""
    if ctx.strategy == "ddp" and not last:
        with model.no_sync():  # type: ignore[operator]
            yield
        return
    if ctx.strategy == "fsdp":
        model.set_requires_gradient_sync(last)  # type: ignore[operator]
    yield


def shard(items: Sequence[T], ctx: DistContext) -> list[T]:
    """This rank's slice of the global batch."""
    return list(items[ctx.rank :: ctx.world_size])


def full_state_dict(model: torch.nn.Module, ctx: DistContext) -> dict[str, torch.Tensor]:
    """The whole model's weights on CPU (gathered under FSDP2; collective, so every rank calls it)."""
    if ctx.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # typed as any state dict's values; a model's are its tensors
        return get_model_state_dict(  # type: ignore[return-value]
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    return {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ctx: DistContext) -> dict[str, Any]:
    """The optimizer's whole state (gathered under FSDP2; collective, so every rank calls it)."""
    if ctx.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(model, optimizer, options=options)
    return optimizer.state_dict()


def load_optimizer(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], ctx: DistContext
) -> None:
    if ctx.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
        return
    optimizer.load_state_dict(state)


def broadcast(obj: T, ctx: DistContext) -> T:
    """Rank 0's ``obj`` on every rank (ranks must agree on what they train on)."""
    if not ctx.active:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def reduce_stats(stats: dict[str, float], ctx: DistContext) -> dict[str, float]:
    """Sum the per-rank statistics (keys ending in ``_max`` take the max)."""
    if not ctx.active or not stats:
        return stats
    keys = sorted(stats)
    sums = torch.tensor([0.0 if k.endswith("_max") else stats[k] for k in keys], dtype=torch.float64)
    maxes = torch.tensor([stats[k] if k.endswith("_max") else 0.0 for k in keys], dtype=torch.float64)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM)
    dist.all_reduce(maxes, op=dist.ReduceOp.MAX)
    return {k: float(maxes[i] if k.endswith("_max") else sums[i]) for i, k in enumerate(keys)}


def shutdown(ctx: DistContext) -> None:
    """Leave the process group while the interpreter is still whole.

    A gloo worker thread drops its last reference to a collective's tensors just after the caller's
    ``wait()`` returns; if that lands in interpreter finalization, the thread cannot take the GIL, is
    ended inside a destructor and the process aborts (``terminate called without an active
    exception``) after its work is done. So every rank finishes its collectives (barrier), the group is
    destroyed, and garbage still holding distributed tensors (FSDP's reference cycles) is collected now.
    Call it after the model and optimizer are out of scope.
    """
    if ctx.active and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    gc.collect()


__all__ = [
    "DistContext",
    "accumulate",
    "broadcast",
    "load_optimizer",
    "optimizer_state",
    "full_state_dict",
    "init_distributed",
    "reduce_stats",
    "shard",
    "shutdown",
    "unwrap",
    "wrap_model",
]
