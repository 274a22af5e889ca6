"""The loaded causal LM: weights, tokenizer and the two forward passes the batcher runs (prefill, decode).

Logits come back as float32 on the CPU; the sampler's logprobs are ``log_softmax`` of those logits after the
request's temperature and nucleus (see sampling.py), so a direct forward pass of the same model, processed
the same way, reproduces them.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers.cache_utils import Cache

from rollwire.engine.attention import CONTINUES_CACHE, IMPLEMENTATION
from rollwire.engine.grammar import Grammars
from rollwire.engine.kv import GrowingLayer, empty_growing_cache
from rollwire.engine.prefix_cache import CachedPrefix
from rollwire.errors import InvalidRequest, NotFound

logger = logging.getLogger(__name__)

CONTINUED_CHUNK_TOKENS = 512
"""A prompt continued from cached positions is prefilled this many tokens a pass: transformers builds each pass's
mask (queries x all positions) before the attention, and a long tail in one pass would hold a large one (15k x 16k
booleans, 240 MB); each pass reads the cache once more, a small cost beside its attention's."""


def pick_device(name: str) -> torch.device:
    """``auto`` means CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass(slots=True)
class Weights:
    """One loaded copy of the network; swapped whole on reload so a batch step never sees half of two."""

    module: Any
    path: Path
    version: int


def _checkpoint_dir(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise NotFound(f"checkpoint folder {folder} does not exist", param="model_path")
    if not (folder / "config.json").is_file():
        raise InvalidRequest(f"{folder} is not a Hugging Face checkpoint (no config.json)", param="model_path")
    return folder


def load_weights(path: str | Path, device: torch.device, version: int) -> Weights:
    """Load a local HF causal-LM checkpoint in eval mode (float32 on CPU, the checkpoint's dtype on GPU)."""
    from transformers import AutoModelForCausalLM

    folder = _checkpoint_dir(path)
    dtype: Any = torch.float32 if device.type == "cpu" else "auto"
    try:
        try:
            module: Any = AutoModelForCausalLM.from_pretrained(
                str(folder), dtype=dtype, local_files_only=True, attn_implementation=IMPLEMENTATION
            )
        except ValueError as exc:  # an architecture without SDPA: transformers' own choice (eager), no split
            if "attention implementation" not in str(exc) and "attn_implementation" not in str(exc):
                raise
            logger.info("%s: %s; loading with its default attention", folder, str(exc).splitlines()[0])
            module = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise InvalidRequest(f"cannot load the checkpoint in {folder}: {exc}".splitlines()[0], param="model_path")
    module.to(device).eval()
    logger.info("loaded weights version %d from %s", version, folder)
    return Weights(module=module, path=folder, version=version)


def _full_attention_only(config: Any) -> bool:
    """No layer attends through a sliding window (whose cache keeps only the window, not the prefix)."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return all(kind == "full_attention" for kind in layer_types)
    return not (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True))


class LanguageModel:
    """Tokenizer + current weights + the forward calls; the batcher is the only caller of the forwards."""

    def __init__(self, path: str | Path, device: str = "auto", max_model_len: int = 0) -> None:
        from rollwire.tokenizers import load_tokenizer

        self.device = pick_device(device)
        self.weights = load_weights(path, self.device, version=0)
        self.tokenizer = load_tokenizer(self.weights.path)
        config = self.weights.module.config
        self.vocab_size = int(config.vocab_size)
        limit = int(getattr(config, "max_position_embeddings", 0) or 0)
        self.max_model_len = max_model_len or limit or 2048
        self.eos_token_ids = self._eos_ids()
        self.grammars = Grammars(self.tokenizer, sorted(self.eos_token_ids), self.vocab_size)
        """``structured_outputs`` compiled for this tokenizer (``grammar``)."""
        self.prefix_cacheable = _full_attention_only(config)
        """Every layer keeps every position's keys and values, so a cached prefix is the whole truth."""
        params = inspect.signature(self.weights.module.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (
            self.tokenizer.eos_token_id,
            getattr(self.weights.module.generation_config, "eos_token_id", None),
        ):
            if isinstance(source, int):
                ids.add(source)
            elif isinstance(source, list):
                ids.update(int(i) for i in source)
        return frozenset(ids)

    def check_compatible(self, weights: Weights) -> None:
        """A reload must keep the vocabulary, since the tokenizer and every in-flight id stay the same."""
        vocab = int(weights.module.config.vocab_size)
        if vocab != self.vocab_size:
            raise InvalidRequest(
                f"checkpoint vocabulary has {vocab} tokens but the served model has {self.vocab_size}",
                param="model_path",
            )

    def _run(self, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        cache = kwargs.pop("cache", None)
        if cache is not None:
            kwargs[self._cache_kw] = cache
        out = self.weights.module(use_cache=True, **kwargs)
        new_cache = getattr(out, self._cache_kw, None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        return out.logits[:, -1, :].float(), new_cache

    @torch.inference_mode()
    def prefill(self, prompt_ids: list[int], prefix: CachedPrefix | None = None) -> tuple[torch.Tensor, Any]:
        """Forward one prompt alone (no padding), after ``prefix``'s cached positions when given; returns the
        last position's logits (1, V) and the whole prompt's KV cache."""
        if prefix is None:
            ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            return self._run(input_ids=ids, logits_to_keep=1, cache=empty_growing_cache())
        cache: Any = Cache(layers=[GrowingLayer.over(keys, values, prefix.tokens) for keys, values in prefix.buffers])
        for start in range(prefix.tokens, len(prompt_ids), CONTINUED_CHUNK_TOKENS):
            ids = torch.tensor([prompt_ids[start : start + CONTINUED_CHUNK_TOKENS]], dtype=torch.long, device=self.device)
            logits, cache = self._run(input_ids=ids, logits_to_keep=1, cache=cache, **{CONTINUES_CACHE: True})
        return logits, cache

    @torch.inference_mode()
    def decode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """One batched step: each row feeds its last sampled token; the cache grows by one column."""
        logits, _ = self._run(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache
        )
        return logits

    def decode_text(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens))


__all__ = ["LanguageModel", "Weights", "load_weights", "pick_device"]
