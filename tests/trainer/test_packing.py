"""Packed rows give every sequence exactly the logprobs it gets alone: no attention across sequences."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rollwire.trainer.batching import (
    MicroBatch,
    micro_batches,
    pack,
    samples_from,
    shared_prefix_units,
    token_weights,
)
from rollwire.trainer.forward import forward_logprobs
from rollwire.trajectory import Trajectory


def test_pack_is_first_fit_decreasing_and_never_cuts() -> None:
    assert pack([5, 3, 4, 2, 9], 8) == [[4], [0, 1], [2, 3]]


def test_packed_padded_and_single_logprobs_agree(
    tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]
) -> None:
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


def test_a_shared_prompt_is_forwarded_once_with_every_logprob_and_gradient_unchanged(
    tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory]
) -> None:
    """A GRPO group's samples share their prompt: forwarded once, each completion sees exactly its own context."""
    model = tiny_model
    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    group = [sampler(model, prompt, new_tokens=n, seed=k, group_id="g") for k, n in enumerate((3, 6, 4, 5))]
    other = sampler(model, [5, 6, 7, 9], new_tokens=4, seed=9, group_id="h")  # another prompt: shares nothing
    samples = [s for t in [*group, other] for s in samples_from(t, 1.0)]
    weights = token_weights(samples, "token-mean")
    assert [u.trunk for u in shared_prefix_units(samples, 64)] == [9, 0]  # the prompt but its last token

    def run(batches: list[MicroBatch]) -> tuple[dict[int, list[float]], torch.Tensor]:
        model.zero_grad(set_to_none=True)
        out: dict[int, list[float]] = {}
        for b in batches:
            logp, _ = forward_logprobs(model, b)
            (logp * b.token_weights).sum().backward()
            for i in range(len(samples)):
                sel = (b.sequence_ids == i) & (b.loss_mask > 0)
                if sel.any():
                    out[i] = logp[sel].tolist()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return out, grad

    shared = micro_batches(samples, weights, capacity=64, packed=True, pad_id=0)
    whole = micro_batches(samples, weights, capacity=64, packed=True, pad_id=0, share_prefixes=False)
    assert shared[0].attention_mask is not None and shared[0].attention_mask.dim() == 4
    assert sum(b.num_tokens for b in shared) == 9 + (3 + 6 + 4 + 5 + 4 * 1) + 8  # the prompt once, each rest, h
    assert sum(b.num_tokens for b in whole) == 4 * 10 + 3 + 6 + 4 + 5 + 8
    got, grad = run(shared)
    want, want_grad = run(whole)
    assert got.keys() == want.keys() == set(range(len(samples)))
    for i in want:
        assert torch.allclose(torch.tensor(got[i]), torch.tensor(want[i]), atol=1e-5)
    assert torch.allclose(grad, want_grad, atol=1e-5, rtol=1e-4)  # float32 sums in another order: ~4e-6 of ~0.9
    model.zero_grad(set_to_none=True)

    # Split over units when the whole group does not fit: the trunk repeats, nothing is cut.
    units = shared_prefix_units(samples, 20)
    assert sorted(i for u in units for i in u.samples) == list(range(len(samples)))
    assert all(u.length([len(s.token_ids) for s in samples]) <= 20 or len(u.samples) == 1 for u in units)
