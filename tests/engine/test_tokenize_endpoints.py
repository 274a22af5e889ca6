"""/tokenize, /detokenize, /v1/models and /health answer in vLLM's shapes."""

from __future__ import annotations

from pathlib import Path

import httpx
from transformers import AutoTokenizer


def test_tokenize_prompt_and_detokenize_round_trip(engine_url: str, tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    text = "The quick brown fox"
    body = httpx.post(f"{engine_url}/tokenize", json={"prompt": text, "return_token_strs": True}, timeout=10).json()
    assert set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    assert body["tokens"] == tokenizer(text)["input_ids"] and body["count"] == len(body["tokens"])
    assert body["token_strs"] == tokenizer.convert_ids_to_tokens(body["tokens"])
    back = httpx.post(f"{engine_url}/detokenize", json={"tokens": body["tokens"]}, timeout=10).json()
    assert back == {"prompt": text}


def test_tokenize_chat_messages_uses_the_chat_template(engine_url: str, tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    messages = [{"role": "user", "content": "hello"}]
    body = httpx.post(f"{engine_url}/tokenize", json={"messages": messages}, timeout=10).json()
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert body["tokens"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert body["token_strs"] is None


def test_tokenize_needs_exactly_one_input(engine_url: str) -> None:
    reply = httpx.post(f"{engine_url}/tokenize", json={}, timeout=10)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "prompt"


def test_models_and_health(engine_url: str) -> None:
    models = httpx.get(f"{engine_url}/v1/models", timeout=10).json()
    assert models["object"] == "list" and len(models["data"]) == 1
    card = models["data"][0]
    assert card["object"] == "model" and card["max_model_len"] > 0 and card["id"]
    assert httpx.get(f"{engine_url}/health", timeout=10).status_code == 200
    assert httpx.get(f"{engine_url}/weight_version", timeout=10).json()["weight_version"] == 0
