"""The official openai client, a token-id prompt, logprobs and return_token_ids: the numbers are the model's."""

from __future__ import annotations

from typing import Any

import openai
import pytest

PROMPT = [17, 240, 33, 501, 90, 7, 412]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_non_streaming_logprobs_equal_a_forward_pass(
    engine_url: str, forward_logprobs: Any, logprob_tolerance: float, model_name: str
) -> None:
    completion = _client(engine_url).completions.create(
        model=model_name,
        prompt=PROMPT,
        max_tokens=12,
        temperature=1.0,
        logprobs=1,
        extra_body={"return_token_ids": True, "ignore_eos": True, "return_tokens_as_token_ids": True},
    )
    choice = completion.choices[0]
    extra = choice.model_extra or {}
    assert extra["prompt_token_ids"] == PROMPT
    sampled = extra["token_ids"]
    assert len(sampled) == 12 and choice.finish_reason == "length"
    assert choice.logprobs is not None
    returned = choice.logprobs.token_logprobs
    assert returned is not None
    expected = forward_logprobs(PROMPT, sampled)
    assert returned == pytest.approx(expected, abs=logprob_tolerance)
    # each step's top_logprobs holds the sampled token first, then the single best one (logprobs=1)
    for sampled_id, logprob, top in zip(sampled, returned, choice.logprobs.top_logprobs or [], strict=True):
        assert top[f"token_id:{sampled_id}"] == pytest.approx(logprob) and 1 <= len(top) <= 2
        assert max(top.values()) >= logprob
    assert (completion.model_extra or {})["weight_version"] == 0
    assert completion.usage is not None and completion.usage.completion_tokens == 12


def test_streaming_chunks_carry_ids_and_the_same_logprobs(
    engine_url: str, forward_logprobs: Any, logprob_tolerance: float, model_name: str
) -> None:
    stream = _client(engine_url).completions.create(
        model=model_name,
        prompt=PROMPT,
        max_tokens=10,
        logprobs=1,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    sampled: list[int] = []
    logprobs: list[float] = []
    prompt_ids_seen: list[Any] = []
    versions: set[int] = set()
    usage = None
    for chunk in stream:
        versions.add((chunk.model_extra or {})["weight_version"])
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            extra = choice.model_extra or {}
            prompt_ids_seen.append(extra.get("prompt_token_ids"))
            sampled.extend(extra["token_ids"])
            assert choice.logprobs is not None
            logprobs.extend(choice.logprobs.token_logprobs or [])
    assert prompt_ids_seen[0] == PROMPT and all(p is None for p in prompt_ids_seen[1:])
    assert len(sampled) == 10 and versions == {0}
    assert usage is not None and usage.completion_tokens == 10 and usage.prompt_tokens == len(PROMPT)
    assert logprobs == pytest.approx(forward_logprobs(PROMPT, sampled), abs=logprob_tolerance)


def test_version_header_on_completions(engine_url: str, model_name: str) -> None:
    response = _client(engine_url).completions.with_raw_response.create(model=model_name, prompt=PROMPT, max_tokens=2)
    assert response.headers["x-weight-version"] == "0"
