"""The engine's attention: transformers' SDPA, except where a prompt continues from cached keys and values.

A pass that continues a cached prefix holds Q new positions against C cached ones plus themselves. SDPA takes
that with an explicit (Q x C+Q) mask, which on a CPU leaves its causal flash kernel for a slower masked one. The
same attention splits exactly in two: every new position sees every cached one (no mask), and the new positions
see each other causally (a square, SDPA's ``is_causal``). Both halves run in the flash kernel, which also returns
each row's log-sum-exp, and the two softmaxes merge by those weights: the result equals the masked attention to
float rounding (at 16k tokens, 0.67-0.77x the masked attention's time: ``bench/continued_prefill.py``).

The engine says which passes continue a cache (``CONTINUES_CACHE``, passed through the model's keyword
arguments to its attention layers). A model whose layers do not pass the keyword on runs SDPA: slower, never
different.

A decode step with no padding (one query per row, no mask) folds a key head's query heads the same way
(``folded_decode``): transformers hands SDPA ``enable_gqa`` there, and the CPU kernel then reads the whole cache
once per query head. Decoding is bound by reading the cache, so at 16k-44k tokens a step of the tiny model takes
0.7-0.8x the time. Every other pass, and any device but the CPU, is SDPA's as transformers runs it.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

IMPLEMENTATION = "rollwire_sdpa"
"""The name the engine loads its models with (``attn_implementation``)."""
CONTINUES_CACHE = "rollwire_continues_cache"
"""Keyword argument of a forward pass whose new positions all come after the cache's (one sequence, no padding)."""


def _flash_with_lse(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, causal: bool,
                    scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(output, log-sum-exp per row) of the CPU flash kernel: (B, H, Q, D) and (B, H, Q)."""
    output, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, causal, scale=scale
    )
    return output, lse


def continued_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, groups: int, scale: float | None
) -> torch.Tensor:
    """Causal attention of ``query``'s Q positions, the last Q of ``key``/``value``'s, split at the cache's end;
    (B, H, Q, D), ``groups`` query heads per key head."""
    batch, heads, length, dim = query.shape
    cached = key.shape[2] - length
    # Against the cached positions every query sees every key: a key head's query heads fold into one longer
    # query, so the cache is read once per key head and never repeated.
    folded = query.reshape(batch, heads // groups, groups * length, dim)
    out_cached, lse_cached = _flash_with_lse(
        folded, key[:, :, :cached], value[:, :, :cached], causal=False, scale=scale
    )
    out_cached = out_cached.reshape(batch, heads, length, dim)
    lse_cached = lse_cached.reshape(batch, heads, length)
    own_keys = repeat_kv(key[:, :, cached:], groups)
    own_values = repeat_kv(value[:, :, cached:], groups)
    out_own, lse_own = _flash_with_lse(query, own_keys, own_values, causal=True, scale=scale)
    total = torch.logaddexp(lse_cached, lse_own)
    return out_cached * torch.exp(lse_cached - total).unsqueeze(-1) + out_own * torch.exp(lse_own - total).unsqueeze(-1)


def folded_decode(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, groups: int,
                  scale: float | None) -> torch.Tensor:  # fmt: skip
    """One query per row against every key (no mask), ``groups`` query heads per key head read as one key head's
    ``groups`` queries; (B, H, 1, D)."""
    batch, heads, _, dim = query.shape
    folded = query.reshape(batch, heads // groups, groups, dim)
    output = torch.nn.functional.scaled_dot_product_attention(folded, key, value, scale=scale)
    return output.reshape(batch, heads, 1, dim)


def rollwire_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: SDPA, the split above for a flagged continuation, or a folded
    decode step."""
    length, columns = query.shape[2], key.shape[2]
    groups = int(getattr(module, "num_key_value_groups", 1))
    plain = (
        query.device.type == "cpu"
        and dropout == 0.0
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
    )
    if plain and kwargs.get(CONTINUES_CACHE) is True and query.shape[0] == 1 and columns > length:
        output = continued_attention(query, key, value, groups, scaling)
    elif plain and length == 1 and groups > 1 and attention_mask is None:
        output = folded_decode(query, key, value, groups, scaling)
    else:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(IMPLEMENTATION, rollwire_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, sdpa_mask)

__all__ = ["CONTINUES_CACHE", "IMPLEMENTATION", "continued_attention", "folded_decode", "rollwire_sdpa"]
