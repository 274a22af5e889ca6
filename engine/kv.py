"""The running batch's KV cache: rows left-padded to one length, joined and dropped between decode steps.

Continuous batching over a plain transformers model: a new sequence is prefilled alone, then its cache is
left-padded (or the batch's is) to a common length and concatenated along the batch axis; a finished row is
removed with an index select. The attention mask marks the padding, so every row computes exactly what it
would compute alone. The batch's keys and values live in buffers with room to spare (``GrowingLayer``), so a
decode step writes its one new column in place rather than copying the whole cache.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

TRIM_MIN_COLUMNS = 16
"""Padding columns shared by every row are cut once at least this many have piled up."""
SPARE_COLUMNS = 64
"""Room a buffer keeps beyond what it holds, at least (and a quarter of it): a reallocation every so many steps."""


class GrowingLayer(DynamicLayer):
    """A layer's keys and values in buffers with spare columns; ``keys``/``values`` are views of the filled part.

    transformers' ``DynamicLayer`` concatenates on every update, copying the whole cache once a decode step: at a
    44k-token context that was most of the step's time.
    """

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._filled = 0
            rows, heads, _, dim = key_states.shape
            self._key_buffer = self._value_buffer = key_states.new_empty(rows, heads, 0, dim)
        end = self._filled + key_states.shape[-2]
        if end > self._key_buffer.shape[-2]:
            self._key_buffer = self._grown(self._key_buffer, key_states, end)
            self._value_buffer = self._grown(self._value_buffer, value_states, end)
        self._key_buffer[:, :, self._filled : end] = key_states
        self._value_buffer[:, :, self._filled : end] = value_states
        self._filled = end
        self.keys = self._key_buffer[:, :, :end]
        self.values = self._value_buffer[:, :, :end]
        return self.keys, self.values

    @classmethod
    def over(cls, key_buffer: torch.Tensor, value_buffer: torch.Tensor, filled: int) -> GrowingLayer:
        """A layer whose keys and values are the first ``filled`` columns of these buffers (the rest is room)."""
        layer = cls()
        layer.lazy_initialization(key_buffer, value_buffer)
        layer._key_buffer, layer._value_buffer, layer._filled = key_buffer, value_buffer, filled
        layer.keys, layer.values = key_buffer[:, :, :filled], value_buffer[:, :, :filled]
        return layer

    def _grown(self, buffer: torch.Tensor, like: torch.Tensor, needed: int) -> torch.Tensor:
        rows, heads, _, dim = like.shape
        grown = like.new_empty(rows, heads, room_for(needed), dim)
        if self._filled:
            grown[:, :, : self._filled] = buffer[:, :, : self._filled]
        return grown


def growing_cache(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> Cache:
    """A cache holding ``layers``' keys and values (copied into growing buffers)."""
    growing = [GrowingLayer() for _ in layers]
    for layer, (keys, values) in zip(growing, layers, strict=True):
        layer.update(keys, values)
    return Cache(layers=list(growing))


def room_for(columns: int) -> int:
    """Columns a buffer holding ``columns`` allocates: what a ``GrowingLayer`` keeps spare."""
    return columns + max(SPARE_COLUMNS, columns // 4)


def empty_growing_cache() -> Cache:
    """A cache a prefill fills (its first update allocates room to grow, so decoding copies nothing)."""
    return Cache(layer_class_to_replicate=GrowingLayer)


def tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


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
        """A prompt's cache, repeated for ``rows`` choices sampled from the same prompt (one row of a growing
        cache is taken as it is)."""
        layers = tensors(cache)
        mask = torch.ones(rows, layers[0][0].shape[-2], dtype=torch.long, device=layers[0][0].device)
        if rows == 1 and all(isinstance(layer, GrowingLayer) for layer in cache.layers):
            return cls(cache, mask)
        if rows > 1:
            layers = [(k.repeat(rows, 1, 1, 1), v.repeat(rows, 1, 1, 1)) for k, v in layers]
        return cls(growing_cache(layers), mask)

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
        return KVBatch(growing_cache(layers), mask)

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
        return KVBatch(growing_cache(layers), mask[:, start:])


__all__ = ["GrowingLayer", "KVBatch", "empty_growing_cache", "growing_cache", "room_for", "tensors"]
