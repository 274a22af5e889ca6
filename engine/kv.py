"""The running batch's KV cache: rows left-padded to one length, joined and dropped between decode steps.

Continuous batching over a plain transformers model: a new sequence is prefilled alone, then its cache is
left-padded (or the batch's is) to a common length and concatenated along the batch axis; a finished row is
removed with an index select. The attention mask marks the padding, so every row computes exactly what it
would compute alone.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache

TRIM_MIN_COLUMNS = 16
"""Padding columns shared by every row are cut once at least this many have piled up."""


def tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))  # transformers < 4.56


def _left_pad(layers: list[tuple[torch.Tensor, torch.Tensor]], columns: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if columns == 0:
        return layers
    return [(F.pad(k, (0, 0, columns, 0)), F.pad(v, (0, 0, columns, 0))) for k, v in layers]


class KVBatch:
    """Cache tensors (rows x heads x columns x dim per layer) plus the (rows x columns) padding mask."""

    def __init__(self, cache: Any, mask: torch.Tensor) -> None:
        self.cache = cache
        self.mask = mask

    @classmethod
    def from_prefill(cls, cache: Any, rows: int) -> KVBatch:
        """A prompt's cache, repeated for ``rows`` choices sampled from the same prompt."""
        layers = tensors(cache)
        if rows > 1:
            layers = [(k.repeat(rows, 1, 1, 1), v.repeat(rows, 1, 1, 1)) for k, v in layers]
        columns = layers[0][0].shape[-2]
        mask = torch.ones(rows, columns, dtype=torch.long, device=layers[0][0].device)
        return cls(DynamicCache(ddp_cache_data=layers), mask)

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    def extend_mask(self) -> torch.Tensor:
        """The mask for the next step (one more real column per row); becomes current after the step."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.rows, 1)], dim=1)
        return self.mask

    def join(self, other: KVBatch) -> KVBatch:
        """Both batches' rows in one cache, the shorter one left-padded."""
        mine, theirs = tensors(self.cache), tensors(other.cache)
        width = max(self.mask.shape[1], other.mask.shape[1])
        pad_mine, pad_theirs = width - self.mask.shape[1], width - other.mask.shape[1]
        mine, theirs = _left_pad(mine, pad_mine), _left_pad(theirs, pad_theirs)
        layers = [(torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])) for a, b in zip(mine, theirs, strict=True)]
        mask = torch.cat([F.pad(self.mask, (pad_mine, 0)), F.pad(other.mask, (pad_theirs, 0))])
        return KVBatch(DynamicCache(ddp_cache_data=layers), mask)

    def row(self, row: int, columns: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Row ``row``'s last ``columns`` positions (its real ones: rows are right-aligned), as views."""
        return [(k[row : row + 1, :, -columns:], v[row : row + 1, :, -columns:]) for k, v in tensors(self.cache)]

    def keep(self, rows: list[int]) -> KVBatch:
        """Only ``rows`` (in that order), with shared leading padding cut when it has grown."""
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        real = mask.any(dim=0).nonzero()
        start = int(real[0]) if real.numel() else 0
        if start < TRIM_MIN_COLUMNS:
            start = 0
        layers = [
            (k.index_select(0, index)[:, :, start:, :], v.index_select(0, index)[:, :, start:, :])
            for k, v in tensors(self.cache)
        ]
        return KVBatch(DynamicCache(ddp_cache_data=layers), mask[:, start:])


__all__ = ["KVBatch", "tensors"]
