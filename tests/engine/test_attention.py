"""The engine's split attention for prompts that continue a cached prefix: the same numbers as SDPA through the
explicit causal mask, for grouped and plain heads, and the engine's continuations really take it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from rollwire.engine import attention
from rollwire.engine.attention import CONTINUES_CACHE, continued_attention, rollwire_sdpa
from rollwire.engine.kv import KVBatch, tensors
from rollwire.engine.model import LanguageModel
from rollwire.engine.prefix_cache import PrefixCache


def _masked(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, groups: int) -> torch.Tensor:
    """What transformers' SDPA computes for a continuation: the mask's new rows end at the last column."""
    length, columns = query.shape[2], key.shape[2]
    mask = torch.ones(length, columns, dtype=torch.bool).tril(columns - length)
    return F.scaled_dot_product_attention(
        query, key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1), attn_mask=mask
    )


@pytest.mark.parametrize(("heads", "groups", "cached", "length"), [(4, 2, 700, 45), (3, 1, 64, 64), (6, 3, 9, 1)])
def test_the_split_equals_masked_attention(heads: int, groups: int, cached: int, length: int) -> None:
    generator = torch.Generator().manual_seed(heads * 1000 + cached)
    query = torch.randn(1, heads, length, 16, generator=generator)
    key = torch.randn(1, heads // groups, cached + length, 16, generator=generator)
    value = torch.randn(1, heads // groups, cached + length, 16, generator=generator)
    split = continued_attention(query, key, value, groups, None)
    assert torch.allclose(split, _masked(query, key, value, groups), atol=1e-6)


class _Layer(torch.nn.Module):
    num_key_value_groups = 2


def _counting(patch: pytest.MonkeyPatch, name: str) -> list[int]:
    """``attention.<name>`` replaced, for ``patch``'s lifetime, by a wrapper that counts its calls; the count."""
    calls: list[int] = []
    real = getattr(attention, name)

    def counted(*args: object) -> torch.Tensor:
        calls.append(1)
        return real(*args)

    patch.setattr(attention, name, counted)
    return calls


def test_only_a_flagged_single_sequence_continuation_splits() -> None:
    query, key, value = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8)
    mask = torch.ones(5, 12, dtype=torch.bool).tril(7)[None, None]
    with pytest.MonkeyPatch.context() as patch:
        calls = _counting(patch, "continued_attention")
        plain, _ = rollwire_sdpa(_Layer(), query, key, value, mask)
        flagged, _ = rollwire_sdpa(_Layer(), query, key, value, mask, **{CONTINUES_CACHE: True})
        assert calls == [1]
        rollwire_sdpa(_Layer(), query.repeat(2, 1, 1, 1), key.repeat(2, 1, 1, 1), value.repeat(2, 1, 1, 1),
                      mask, **{CONTINUES_CACHE: True})  # fmt: skip
        assert calls == [1], "a batch of rows may carry padding: SDPA with its mask"
    assert plain.shape == flagged.shape == (1, 5, 4, 8)
    assert torch.allclose(plain, flagged, atol=1e-6)


def test_the_engine_continues_a_cached_prompt_through_the_split_with_the_whole_prefills_logits(
    tiny_model_dir: Path,
) -> None:
    model = LanguageModel(tiny_model_dir, device="cpu")
    config = model.weights.module.config
    prompt = torch.randint(3, 500, (700,), generator=torch.Generator().manual_seed(7)).tolist()
    cache = PrefixCache(1 << 30)
    _, computed = model.prefill(prompt[:600])
    cache.insert(prompt[:600], tensors(computed))
    whole, _ = model.prefill(prompt)
    with pytest.MonkeyPatch.context() as patch:
        calls = _counting(patch, "continued_attention")
        prefix = cache.lookup(prompt)
        assert prefix is not None and prefix.tokens == 576
        continued, _ = model.prefill(prompt, prefix)
    assert len(calls) == config.num_hidden_layers  # every layer, one pass: the keyword reached the attention
    assert torch.allclose(continued, whole, atol=1e-4)


def test_an_architecture_without_sdpa_loads_with_its_default_attention(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers refuses an SDPA-based implementation for a model class without SDPA; the engine then loads it
    as transformers would by default (its eager attention), rather than refusing the checkpoint."""
    from transformers import AutoModelForCausalLM

    from rollwire.engine.attention import IMPLEMENTATION
    from rollwire.engine.model import load_weights

    real = AutoModelForCausalLM.from_pretrained
    asked: list[object] = []

    def without_sdpa(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("attn_implementation"))
        if kwargs.get("attn_implementation") == IMPLEMENTATION:
            raise ValueError("Qwen3ForCausalLM does not support an attention implementation through "
                             "torch.nn.functional.scaled_dot_product_attention yet.")  # fmt: skip
        return real(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", without_sdpa)
    weights = load_weights(tiny_model_dir, torch.device("cpu"), version=0)
    assert asked == [IMPLEMENTATION, None]
    assert weights.module.config._attn_implementation != IMPLEMENTATION


def test_an_unpadded_decode_step_folds_grouped_heads_and_a_padded_one_keeps_its_mask() -> None:
    generator = torch.Generator().manual_seed(11)
    query = torch.randn(3, 6, 1, 16, generator=generator)
    key, value = torch.randn(3, 2, 40, 16, generator=generator), torch.randn(3, 2, 40, 16, generator=generator)
    reference = F.scaled_dot_product_attention(query, key, value, enable_gqa=True)
    assert torch.allclose(attention.folded_decode(query, key, value, 3, None), reference, atol=1e-6)
    layer = _Layer()
    layer.num_key_value_groups = 3
    padded = torch.ones(3, 1, 1, 40, dtype=torch.bool)
    padded[1, ..., :7] = False
    with pytest.MonkeyPatch.context() as patch:
        calls = _counting(patch, "folded_decode")
        unpadded, _ = rollwire_sdpa(layer, query, key, value, None)
        assert calls == [1]
        masked, _ = rollwire_sdpa(layer, query, key, value, padded)
        assert calls == [1], "a padded batch decodes through SDPA with its mask"
    assert torch.allclose(unpadded, reference.transpose(1, 2), atol=1e-6)
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=padded, enable_gqa=True)
    assert torch.allclose(masked, expected.transpose(1, 2), atol=1e-6)


def test_the_engine_decodes_one_sequence_through_the_fold_with_the_same_logits(tiny_model_dir: Path) -> None:
    model = LanguageModel(tiny_model_dir, device="cpu")
    config = model.weights.module.config
    prompt = torch.randint(3, 500, (300,), generator=torch.Generator().manual_seed(5)).tolist()
    steps = [7, 9, 11]

    def decoded() -> torch.Tensor:
        _, cache = model.prefill(prompt)
        batch = KVBatch.from_prefill(cache, 1)
        logits = []
        for offset, token in enumerate(steps):
            position = torch.tensor([[len(prompt) + offset]])
            logits.append(model.decode(torch.tensor([[token]]), batch.extend_mask(), position, batch.cache))
        return torch.cat(logits)

    with pytest.MonkeyPatch.context() as patch:
        calls = _counting(patch, "folded_decode")
        folded = decoded()
    assert len(calls) == config.num_hidden_layers * len(steps)
    config._attn_implementation = "sdpa"
    try:
        plain = decoded()
    finally:
        config._attn_implementation = attention.IMPLEMENTATION
    assert torch.allclose(folded, plain, atol=1e-4)
