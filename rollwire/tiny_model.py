"""The tiny default model, built locally on first use and cached: no download anywhere.

A Qwen3-architecture causal LM small enough to train on two CPU cores, a byte-level BPE trained with
``tokenizers`` on a corpus the package ships, and a Qwen-style chat template with tools and reasoning.
The cache folder name carries a hash of everything that shapes the model, so a change builds anew.
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
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32  # vLLM's CPU attention serves head sizes 32, 64, 80, 96, ... (not 24)
    max_position_embeddings: int = 8192
    seed: int = 0
    name: str = "rollwire-tiny"


def _data(name: str) -> str:
    return (importlib.resources.files("rollwire") / "data" / name).read_text()


def chat_template() -> str:
    """The tiny model's chat template (Qwen-family layout, reasoning kept in history)."""
    return _data("tiny_chat_template.jinja")


def _cache_key(spec: TinyModelSpec) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps(asdict(spec), sort_keys=True).encode())
    digest.update(_data("tiny_corpus.txt").encode())
    digest.update(chat_template().encode())
    return digest.hexdigest()[:12]


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


def _build_model(spec: TinyModelSpec, out: Path) -> None:
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
    model.generation_config = GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)
    model.save_pretrained(str(out), safe_serialization=True)


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


__all__ = ["SPECIAL_TOKENS", "TinyModelSpec", "chat_template", "ensure_tiny_model"]
