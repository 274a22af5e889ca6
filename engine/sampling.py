"""Sampling parameters and one batched sampling step: temperature, top-k, top-p, per-sequence seeds, logprobs.

Logprobs are those of the distribution a token was drawn from: the log-softmax of the temperature-scaled,
top-k/top-p filtered logits (vLLM's ``--logprobs-mode processed_logprobs``), so a trainer that applies the
recorded sampling parameters recomputes them exactly; at temperature 1 without filtering, and for greedy
rows, they are the raw logprobs (vLLM's default mode). Each sequence with a seed draws from its own
generator, so its samples do not depend on its batch mates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rollwire.engine.grammar import Constraint
from rollwire.logit_filter import top_k_top_p


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """One request's validated sampling settings, in the engine's own form."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    logprobs: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    grammar: str | None = None
    """A compiled ``structured_outputs`` grammar (``grammar.Grammars``): each sequence samples within it."""


@dataclass(frozen=True, slots=True)
class Sample:
    """A sampled token with its (processed) logprob and, when asked, the top alternatives (id, logprob), best first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def generator_for(seed: int | None, fallback: torch.Generator) -> torch.Generator:
    """A private generator for a seeded sequence; unseeded ones share the engine's."""
    if seed is None:
        return fallback
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)
    return gen


def sample_step(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator],
    constraints: Sequence[Constraint | None] = (),
) -> list[Sample]:
    """Sample one token per row of ``logits`` (rows x vocab, float32 on the CPU); a row with a constraint samples
    only what its grammar allows (its logprobs are those of the masked distribution)."""
    logits = logits.to("cpu", torch.float32)
    if any(c is not None for c in constraints):
        logits = logits.clone()  # its own rows: the caller's may be a view (one prefill expanded to n)
        for row, constraint in zip(logits, constraints):
            if constraint is not None:
                constraint.mask(row)
    logprobs = logits.log_softmax(dim=-1)
    tokens = logits.argmax(dim=-1)
    hot = [i for i, p in enumerate(params) if p.temperature > 0]
    if hot:
        rows = torch.tensor(hot, dtype=torch.long)
        temps = torch.tensor([params[i].temperature for i in hot], dtype=torch.float32)
        scaled = logits.index_select(0, rows) / temps.unsqueeze(1)
        top_p = torch.tensor([params[i].top_p for i in hot], dtype=torch.float32)
        top_k = torch.tensor([params[i].top_k for i in hot], dtype=torch.long)
        if bool((top_p < 1).any() or (top_k > 0).any()):
            scaled = top_k_top_p(scaled, top_p, top_k)
        processed = scaled.log_softmax(dim=-1)
        probs = processed.exp()
        for j, i in enumerate(hot):
            tokens[i] = torch.multinomial(probs[j], 1, generator=generators[i])[0]
        logprobs = logprobs.index_copy(0, rows, processed)
    samples: list[Sample] = []
    for i, p in enumerate(params):
        token = int(tokens[i])
        top: tuple[tuple[int, float], ...] = ()
        if p.logprobs:
            values, ids = logprobs[i].topk(p.logprobs)
            top = tuple(zip(ids.tolist(), values.tolist(), strict=True))
        samples.append(Sample(token, float(logprobs[i, token]), top))
    return samples


__all__ = ["Sample", "SamplingParams", "generator_for", "sample_step"]
