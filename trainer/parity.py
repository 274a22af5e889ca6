"""Parity probe: after a weight push, does the engine now compute what the trainer computes?

A push can succeed at the HTTP level and still leave the engine serving something else: vLLM's in-place
reload keeps the old output head when only the tied input embedding is in the checkpoint (measured: -5.06
served vs -2.04 recomputed for the greedy token), and the trainer would then train against logprobs of a
model nobody serves. So after every push the trainer sends a fixed probe (greedy continuation of fixed
token ids) straight to the engine, recomputes the same tokens' logprobs with its own forward on the pushed
weights, and fails the push loudly, with the figures, when they differ by more than a tolerance.

Both engines report raw logprobs (before temperature), which is what a greedy probe compares.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch

from rollwire.errors import RollwireError, UpstreamError

logger = logging.getLogger(__name__)

PROBE_LENGTH = 24
"""Prompt tokens of the probe: enough positions for attention and RoPE to matter, cheap on any engine."""


class ParityError(RollwireError):
    """The engine's logprobs after a push are not the trainer's: it serves other weights than were pushed."""

    status_code = 502
    code = "parity_mismatch"


@dataclass(frozen=True, slots=True)
class ParityResult:
    """The probe's figures: the tokens the engine chose, both sides' logprobs and their largest gap."""

    token_ids: list[int]
    engine: list[float]
    trainer: list[float]
    max_abs_diff: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def describe(self) -> str:
        worst = max(range(len(self.engine)), key=lambda i: abs(self.engine[i] - self.trainer[i]), default=0)
        return (
            f"max |engine - trainer| logprob {self.max_abs_diff:.4g} > tolerance {self.tolerance:g} over "
            f"{len(self.engine)} greedy tokens (worst at token {worst}: engine {self.engine[worst]:.4f}, "
            f"trainer {self.trainer[worst]:.4f})"
        )


def probe_prompt(vocab_size: int, length: int = PROBE_LENGTH) -> list[int]:
    """Fixed, spread-out token ids below ``vocab_size`` (no tokenizer needed; the same probe every push)."""
    return [(7919 * i + 13) % vocab_size for i in range(length)]


class ParityProbe:
    """``check(base_url, model)`` after a push; raises ParityError with the figures beyond ``tolerance``."""

    def __init__(self, client: httpx.Client, tolerance: float, max_tokens: int = 8) -> None:
        self.client = client
        self.tolerance = tolerance
        self.max_tokens = max_tokens

    def engine_logprobs(
        self, base_url: str, prompt: list[int], served_model: str | None
    ) -> tuple[list[int], list[float]]:
        """The engine's greedy continuation of ``prompt`` and its raw logprobs (one completions call)."""
        base_url = base_url.rstrip("/")
        try:
            model = served_model or str(self.client.get(f"{base_url}/v1/models").json()["data"][0]["id"])
            body = {"model": model, "prompt": prompt, "max_tokens": self.max_tokens, "temperature": 0.0,
                    "logprobs": 0, "return_token_ids": True, "ignore_eos": True}  # fmt: skip
            response = self.client.post(f"{base_url}/v1/completions", json=body)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"parity probe to {base_url} failed: {exc}") from exc
        if response.status_code != 200:
            raise UpstreamError(
                f"parity probe to {base_url} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        choice = response.json()["choices"][0]
        return list(choice["token_ids"]), [float(x) for x in choice["logprobs"]["token_logprobs"]]

    @staticmethod
    @torch.no_grad()
    def trainer_logprobs(model: torch.nn.Module, prompt: list[int], token_ids: list[int]) -> list[float]:
        """log p(token) under ``model`` for each engine-chosen token, one float32 forward without a KV cache."""
        device = next(model.parameters()).device
        ids = torch.tensor([prompt + token_ids], device=device)
        was_training = model.training
        model.eval()
        try:
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
        finally:
            model.train(was_training)
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        return logp.gather(-1, torch.tensor(token_ids, device=device).unsqueeze(-1)).squeeze(-1).tolist()

    def measure(self, base_url: str, model: torch.nn.Module, served_model: str | None = None) -> ParityResult:
        # a Hugging Face model's config: torch types every attribute a Module lacks as Tensor | Module
        prompt = probe_prompt(int(model.config.vocab_size))  # type: ignore[union-attr, arg-type]
        token_ids, engine = self.engine_logprobs(base_url, prompt, served_model)
        trainer = self.trainer_logprobs(model, prompt, token_ids)
        gap = max((abs(a - b) for a, b in zip(engine, trainer, strict=True)), default=0.0)
        return ParityResult(token_ids, engine, trainer, gap, self.tolerance)

    def check(self, base_url: str, model: torch.nn.Module, served_model: str | None = None) -> ParityResult:
        """Measure; past the tolerance the push has failed: raise with the figures."""
        result = self.measure(base_url, model, served_model)
        if not result.ok:
            raise ParityError(
                f"after the weight push, {base_url} does not serve the pushed weights: {result.describe()}"
            )
        logger.debug("parity probe %s: max |diff| %.3g (tolerance %g)", base_url, result.max_abs_diff, self.tolerance)
        return result


def check_sink(sink: object, model: torch.nn.Module, tolerance: float) -> ParityResult | None:
    """The probe against the engine a sink just pushed to (its ``base_url`` and ``client``); None if it has none.

    A LoRA sink's engine serves the adapter under its own name, so the probe asks for that name.
    """
    base_url, client = getattr(sink, "base_url", None), getattr(sink, "client", None)
    if not base_url or client is None:
        return None
    return ParityProbe(client, tolerance).check(base_url, model, getattr(sink, "lora_name", None))


def pushed_model(folder: Path, in_memory: torch.nn.Module | None) -> torch.nn.Module:
    """The model to probe with: the trainer's own when it is whole on this process, else the pushed folder's."""
    if in_memory is not None:
        return in_memory
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)


__all__ = ["PROBE_LENGTH", "ParityError", "ParityProbe", "ParityResult", "check_sink", "probe_prompt", "pushed_model"]
