"""The tiny default model builds locally, loads offline, and templates tools and reasoning Qwen-style."""

from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM, AutoTokenizer

from rollwire.tiny_model import SPECIAL_TOKENS, ensure_tiny_model


def test_cached_build_is_reused(tiny_model_dir: Path) -> None:
    assert ensure_tiny_model(tiny_model_dir.parent.parent) == tiny_model_dir


def test_loads_offline_with_special_tokens_and_template(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True)
    assert model.config.vocab_size == len(tokenizer)
    for token in SPECIAL_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1, token
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "read a.txt"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should read it.",
            "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.txt"}}}],
        },
        {"role": "tool", "content": "hello"},
    ]
    tool: dict[str, Any] = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    text = tokenizer.apply_chat_template(messages, tools=[tool], tokenize=False, add_generation_prompt=True)
    assert isinstance(text, str)
    assert '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>' in text
    assert "<think>\nI should read it.\n</think>" in text
    assert "<tool_response>\nhello\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
