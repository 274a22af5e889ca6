"""The renderer encodes and decodes on the Rust tokenizer itself (skipping transformers' wrapper, which costs
more than the work on a short tail): the ids and text must be exactly the wrapper's, for the tiny model and the
real Qwen tokenizer, special tokens, odd bytes and a tokenizer that cleans up spaces included."""

from __future__ import annotations

import random
from pathlib import Path

from transformers import AutoTokenizer

from rollwire.proxy.render import Renderer
from rollwire.tokenizers import qwen_tokenizer

TEXTS = [
    "<|im_start|>user\nhello , world ! it's   spaced<|im_end|>\n",
    "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"é/ü/文件\"}}\n</tool_call><|im_end|>",
    " leading space, trailing space \n\n\t tab",
    "emoji 🙂 and a lone byte-level piece",
]


def _check(renderer: Renderer, tokenizer: object, vocab_size: int) -> None:
    rng = random.Random(7)
    for text in TEXTS:
        assert renderer.encode(text) == tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    for _ in range(200):  # any id run, also ones that split a character's bytes
        ids = [rng.randrange(vocab_size) for _ in range(rng.randrange(1, 12))]
        assert renderer.decode(ids) == tokenizer.decode(ids, skip_special_tokens=False)  # type: ignore[attr-defined]


def test_tiny_model(tiny_model_dir: Path) -> None:
    renderer = Renderer.from_folder(tiny_model_dir)
    _check(renderer, renderer.tokenizer, len(renderer.tokenizer))


def test_real_qwen_tokenizer(qwen_tokenizer_files: Path) -> None:
    tokenizer = qwen_tokenizer("qwen3")
    _check(Renderer(tokenizer), tokenizer, len(tokenizer))


def test_a_tokenizer_that_cleans_up_spaces_decodes_through_the_wrapper(tiny_model_dir: Path) -> None:
    """With ``clean_up_tokenization_spaces`` the wrapper post-processes the text: the renderer leaves it to it."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, clean_up_tokenization_spaces=True)
    tokenizer.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = True
    renderer = Renderer(tokenizer)
    ids = renderer.encode("a , b . c ! it 's")
    assert renderer.decode(ids) == tokenizer.decode(ids, skip_special_tokens=False)
    assert renderer.decode(ids) != renderer._backend.decode(ids, skip_special_tokens=False)  # type: ignore[union-attr]
