"""The batch's growing KV buffers: a decode step writes in place, and what the layer shows is exactly what a
concatenation would hold, across every reallocation."""

from __future__ import annotations

import torch

from rollwire.engine.kv import SPARE_COLUMNS, GrowingLayer, growing_cache, tensors


def test_a_growing_layer_holds_what_concatenation_would_across_reallocations() -> None:
    generator = torch.Generator().manual_seed(0)
    layer = GrowingLayer()
    keys, values = torch.randn(2, 3, 10, 4, generator=generator), torch.randn(2, 3, 10, 4, generator=generator)
    layer.update(keys, values)
    buffers = {layer._key_buffer.data_ptr()}
    for _ in range(3 * SPARE_COLUMNS):
        step_k, step_v = torch.randn(2, 3, 1, 4, generator=generator), torch.randn(2, 3, 1, 4, generator=generator)
        shown_k, shown_v = layer.update(step_k, step_v)
        keys, values = torch.cat([keys, step_k], dim=-2), torch.cat([values, step_v], dim=-2)
        assert torch.equal(shown_k, keys) and torch.equal(shown_v, values)
        buffers.add(layer._key_buffer.data_ptr())
    assert layer.get_seq_length() == 10 + 3 * SPARE_COLUMNS
    assert 1 < len(buffers) <= 4, "a step writes in place; the buffer is reallocated only when full"


def test_a_growing_cache_starts_from_the_given_tensors() -> None:
    layers = [(torch.full((1, 2, 5, 3), float(n)), torch.full((1, 2, 5, 3), -float(n))) for n in range(3)]
    cache = growing_cache(layers)
    for (k, v), (shown_k, shown_v) in zip(layers, tensors(cache), strict=True):
        assert torch.equal(k, shown_k) and torch.equal(v, shown_v)
        assert shown_k.data_ptr() != k.data_ptr(), "copied: the caller's tensors stay its own"
