"""Generation ends on stop strings, stop_token_ids, eos and max_tokens with vLLM's finish/stop reasons; token ids
keep every sampled token while the text leaves out the stop string or stop token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

PROMPT = [44, 45, 46, 47]


@pytest.fixture(scope="module")
def greedy(engine_url: str) -> dict[str, Any]:
    """A greedy 24-token reference run without stops."""
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    return dict(httpx.post(f"{engine_url}/v1/completions", json=body, timeout=60).json()["choices"][0])


def _run(url: str, stream: bool = False, **fields: Any) -> dict[str, Any]:
    body = {
        "prompt": PROMPT,
        "max_tokens": 24,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
        **fields,
    }
    if not stream:
        return dict(httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0])
    text, ids, last = "", [], {}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["text"]
                    ids += choice["token_ids"]
                    last = choice
    return {"text": text, "token_ids": ids, "finish_reason": last["finish_reason"], "stop_reason": last["stop_reason"]}


def test_max_tokens_finishes_with_length(greedy: dict[str, Any]) -> None:
    assert greedy["finish_reason"] == "length" and greedy["stop_reason"] is None and len(greedy["token_ids"]) == 24


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_is_trimmed_from_text_but_ids_are_kept(
    engine_url: str, greedy: dict[str, Any], stream: bool
) -> None:
    text = greedy["text"]
    start = len(text) // 2
    stop = text[start : start + 3]
    assert len(stop) == 3
    cut = text.find(stop)
    choice = _run(engine_url, stream=stream, stop=[stop])
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert choice["text"] == text[:cut]
    ids = choice["token_ids"]
    assert ids == greedy["token_ids"][: len(ids)]
    # the ids run through the token that completed the stop string, and no further
    from_tokens = httpx.post(f"{engine_url}/detokenize", json={"tokens": ids}, timeout=10).json()["prompt"]
    shorter = httpx.post(f"{engine_url}/detokenize", json={"tokens": ids[:-1]}, timeout=10).json()["prompt"]
    assert stop in from_tokens and stop not in shorter


def test_include_stop_str_in_output(engine_url: str, greedy: dict[str, Any]) -> None:
    text = greedy["text"]
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    choice = _run(engine_url, stop=stop, include_stop_str_in_output=True)
    assert choice["text"] == text[: text.find(stop) + len(stop)]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_token_id_ends_with_that_token(
    engine_url: str, greedy: dict[str, Any], stream: bool, tiny_model_dir: Path
) -> None:
    target = greedy["token_ids"][5]
    at = greedy["token_ids"].index(target)
    choice = _run(engine_url, stream=stream, stop_token_ids=[target])
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == target
    assert choice["token_ids"] == greedy["token_ids"][: at + 1]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert choice["text"] == tokenizer.decode(greedy["token_ids"][:at], skip_special_tokens=True)
