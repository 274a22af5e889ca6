"""Concurrent requests share batch steps, and batching (left padding, joins, n>1 rows) leaves every number exact."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import openai
import pytest

PROMPTS = [[5, 9, 100], [31, 2, 77, 8, 300, 41, 12, 9, 10, 11], [400], [60, 61, 62, 63, 64, 65]]


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


async def _one(client: openai.AsyncOpenAI, model: str, prompt: list[int], max_tokens: int, stream: bool) -> list[Any]:
    """(token_ids, logprobs) per choice, for a non-streamed or streamed request with n=2."""
    kwargs: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "n": 2,
        "logprobs": 1,
        "extra_body": {"return_token_ids": True, "ignore_eos": True},
    }
    if not stream:
        completion = await client.completions.create(**kwargs)
        return [((c.model_extra or {})["token_ids"], c.logprobs.token_logprobs) for c in completion.choices]
    ids: dict[int, list[int]] = {0: [], 1: []}
    lps: dict[int, list[float]] = {0: [], 1: []}
    async for chunk in await client.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            ids[c.index].extend((c.model_extra or {})["token_ids"])
            lps[c.index].extend(c.logprobs.token_logprobs)
    return [(ids[i], lps[i]) for i in (0, 1)]


def test_concurrent_requests_match_forward_passes(
    engine_url: str, forward_logprobs: Any, logprob_tolerance: float, model_name: str
) -> None:
    async def main() -> list[list[Any]]:
        client = _client(engine_url)
        with anyio.fail_after(60):
            return await asyncio.gather(
                *(_one(client, model_name, p, 6 + 3 * i, stream=i % 2 == 1) for i, p in enumerate(PROMPTS))
            )

    results = asyncio.run(main())
    for i, (prompt, choices) in enumerate(zip(PROMPTS, results, strict=True)):
        for sampled, logprobs in choices:
            assert len(sampled) == 6 + 3 * i
            expected = forward_logprobs(prompt, sampled)
            assert logprobs == pytest.approx(expected, abs=logprob_tolerance)


def test_a_second_request_runs_while_the_first_is_generating(engine_url: str, model_name: str) -> None:
    """B's first token arrives while A is still streaming: they share steps rather than queueing."""

    async def main() -> tuple[bool, int]:
        client = _client(engine_url)
        a_started = asyncio.Event()
        b_done = asyncio.Event()
        a_tokens_when_b_done = -1

        async def run_a() -> bool:
            nonlocal a_tokens_when_b_done
            count = 0
            stream = await client.completions.create(
                model=model_name, prompt=[3, 4, 5], max_tokens=4000, stream=True, extra_body={"ignore_eos": True}
            )
            async for chunk in stream:
                count += len(chunk.choices)
                a_started.set()
                if b_done.is_set():
                    a_tokens_when_b_done = count
                    await stream.close()  # the engine drops A's sequence
                    return True
            return False

        async def run_b() -> None:
            await a_started.wait()
            await client.completions.create(model=model_name, prompt=[8, 9], max_tokens=5)
            b_done.set()

        with anyio.fail_after(60):
            a_was_live, _ = await asyncio.gather(run_a(), run_b())
        return a_was_live, a_tokens_when_b_done

    a_was_live, a_tokens = asyncio.run(main())
    assert a_was_live and 0 < a_tokens < 4000
