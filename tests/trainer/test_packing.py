"""Packed rows give every sequence exactly the logprobs it gets alone: no attention across sequences."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rollwire.trainer.batching import MicroBatch, micro_batches, pack, samples_from, token_weights
from rollwire.trainer.forward import forward_logprobs
from rollwire.trajectory import Trajectory


def test_pack_is_first_fit_decreasing_and_never_cuts() -> None:
    assert pack([5, 3, 4, 2, 9], 8) == [[4], [0, 1], [2, 3]]


def test_packed_padded_and_single_logprobs_agree(tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]) -> None:
    model = tiny_model
    sample_trajectory = sampler
    shapes = [([5, 6], 3), ([5, 6, 7], 4), ([5, 6, 7, 8], 10)]  # lengths 5, 7, 14: the two short share a row
    trajs = [
        sample_trajectory(model, prompt, new_tokens=n, seed=k, group_id=f"g{k}") for k, (prompt, n) in enumerate(shapes)
    ]
    samples = [s for t in trajs for s in samples_from(t, 1.0)]
    weights = token_weights(samples, "token-mean")

    def per_sample(batches: list[MicroBatch]) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        with torch.no_grad():
            for b in batches:
                logp, _ = forward_logprobs(model, b)
                for i in range(len(samples)):
                    sel = (b.sequence_ids == i) & (b.loss_mask > 0)
                    if sel.any():
                        out[i] = logp[sel].tolist()
        return out

    packed = micro_batches(samples, weights, capacity=28, packed=True, pad_id=0)
    padded = micro_batches(samples, weights, capacity=64, packed=False, pad_id=0)
    assert len(packed) == 1 and packed[0].input_ids.shape == (2, 14)  # rows as long as the longest sequence
    assert packed[0].position_ids[1].tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 0, 1]  # 7 + 5, then padding
    assert padded[0].attention_mask is not None and padded[0].input_ids.shape[0] == 3
    alone = {}
    for i in range(3):
        (only,) = micro_batches([samples[i]], [1.0], capacity=64, packed=True, pad_id=0)
        with torch.no_grad():
            logp, _ = forward_logprobs(model, only)
        alone[i] = logp[only.loss_mask > 0].tolist()
    for got in (per_sample(packed), per_sample(padded)):
        for i in range(3):
            assert torch.allclose(torch.tensor(got[i]), torch.tensor(alone[i]), atol=1e-5)
