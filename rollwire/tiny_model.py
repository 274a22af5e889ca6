"""The tiny default model, built locally on first use and cached: no download anywhere.

A Qwen3-architecture causal LM small enough to train on two CPU cores, a byte-level BPE trained with
``tokenizers`` on a corpus the package ships, and a Qwen-style chat template with tools and reasoning.
Its weights come from ``data/tiny_weights.safetensors`` (a short copy pretraining done once by
``scripts/pretrain_tiny.py``: without it the model never copies a word it was not trained on) when the file
was built for the same spec, corpus and template; otherwise they are random. The cache folder name carries
a hash of everything that shapes the model, so a change builds anew.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)


@dataclass(frozen=True, slots=True)
class TinyModelSpec:
    """Everything that shapes the tiny model; part of its cache key."""

    vocab_size: int = 2048
    hidden_size: int = 96
    intermediate_size: int = 256
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32  # vLLM's CPU attention serves head sizes 32, 64, 80, 96, ... (not 24)
    max_position_embeddings: int = 8192
    seed: int = 0
    name: str = "rollwire-tiny"


WEIGHTS = "tiny_weights.safetensors"
"""The shipped pretrained weights (float16), in the package's data folder."""


def _data(name: str) -> str:
    return (importlib.resources.files("rollwire") / "data" / name).read_text()


def corpus_text() -> str:
    """The shipped corpus the tokenizer is trained on (and the pretraining reads)."""
    return _data("tiny_corpus.txt")


def chat_template() -> str:
    """The tiny model's chat template (Qwen-family layout, reasoning kept in history)."""
    return _data("tiny_chat_template.jinja")


def base_key(spec: TinyModelSpec) -> str:
    """Hash of what shapes the untrained model (spec, corpus, template); shipped weights record it."""
    digest = hashlib.sha256()
    digest.update(json.dumps(asdict(spec), sort_keys=True).encode())
    digest.update(_data("tiny_corpus.txt").encode())
    digest.update(chat_template().encode())
    return digest.hexdigest()[:12]


def _weights_path() -> Path:
    return Path(str(importlib.resources.files("rollwire") / "data" / WEIGHTS))


def shipped_weights(spec: TinyModelSpec) -> dict[str, object] | None:
    """The shipped pretrained tensors (float32) if they were built for this spec, corpus and template."""
    path = _weights_path()
    if not path.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        if (handle.metadata() or {}).get("key") != base_key(spec):
            return None
        return {name: handle.get_tensor(name).float() for name in handle.keys()}  # noqa: SIM118 - not a dict


def _cache_key(spec: TinyModelSpec) -> str:
    key = base_key(spec)
    path = _weights_path()
    if path.is_file():
        key = hashlib.sha256(key.encode() + path.read_bytes()).hexdigest()[:12]
    return key


def _build_tokenizer(spec: TinyModelSpec, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_data("tiny_corpus.txt").splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    fast.chat_template = chat_template()
    fast.save_pretrained(str(out))


def _build_model(spec: TinyModelSpec, out: Path, pretrained: bool = True) -> None:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(spec.seed)
    model = Qwen3ForCausalLM(config)
    state = shipped_weights(spec) if pretrained else None
    if state is not None:
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:
            raise RuntimeError(f"{WEIGHTS} does not fit the model: missing {missing}, unexpected {unexpected}")
        model.tie_weights()
    model.generation_config = GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)
    model.save_pretrained(str(out), safe_serialization=True)


def build_untrained(spec: TinyModelSpec, out: Path) -> None:
    """The tokenizer and a randomly initialised model in ``out`` (what ``scripts/pretrain_tiny.py`` starts from)."""
    _build_tokenizer(spec, out)
    _build_model(spec, out, pretrained=False)


def ensure_tiny_model(home: Path, spec: TinyModelSpec | None = None) -> Path:
    """Return the cached tiny model folder under ``home``, building it atomically if missing."""
    spec = spec or TinyModelSpec()
    target = home / "models" / f"{spec.name}-{_cache_key(spec)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        _build_tokenizer(spec, staging)
        _build_model(spec, staging)
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first: theirs is identical
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


__all__ = [
    "SPECIAL_TOKENS",
    "WEIGHTS",
    "TinyModelSpec",
    "base_key",
    "build_untrained",
    "chat_template",
    "corpus_text",
    "ensure_tiny_model",
    "shipped_weights",
]
