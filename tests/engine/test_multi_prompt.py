"""A list of prompts with n choices each: choice index = prompt * n + i, each with its own prompt_token_ids."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


def test_prompt_list_fans_out_into_indexed_choices(
    engine_url: str, forward_logprobs: Any, logprob_tolerance: float
) -> None:
    prompts = [[11, 12], [200, 201, 202, 203, 204]]
    body = {"prompt": prompts, "n": 2, "max_tokens": 5, "logprobs": 0, "ignore_eos": True, "return_token_ids": True}
    reply = httpx.post(f"{engine_url}/v1/completions", json=body, timeout=60).json()
    choices = reply["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in choices] == [prompts[0], prompts[0], prompts[1], prompts[1]]
    for choice in choices:
        expected = forward_logprobs(choice["prompt_token_ids"], choice["token_ids"])
        assert choice["logprobs"]["token_logprobs"] == pytest.approx(expected, abs=logprob_tolerance)
    assert reply["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 20,
        "total_tokens": 27,
        "prompt_tokens_details": None,
    }


def test_text_prompts_are_tokenized_like_tokenize(engine_url: str) -> None:
    text = "a small test"
    ids = httpx.post(f"{engine_url}/tokenize", json={"prompt": text}, timeout=10).json()["tokens"]
    body = {"prompt": [text, text], "max_tokens": 2, "return_token_ids": True}
    choices = httpx.post(f"{engine_url}/v1/completions", json=body, timeout=60).json()["choices"]
    assert [c["prompt_token_ids"] for c in choices] == [ids, ids]
