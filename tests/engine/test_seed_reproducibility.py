"""A seed makes sampling reproducible, whatever else is in the batch; n choices get distinct streams."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


def _ids(body: dict[str, Any]) -> list[list[int]]:
    return [c["token_ids"] for c in body["choices"]]


def _request(seed: int | None, n: int = 1) -> dict[str, Any]:
    return {
        "prompt": [12, 13, 14],
        "max_tokens": 16,
        "temperature": 1.0,
        "seed": seed,
        "n": n,
        "ignore_eos": True,
        "return_token_ids": True,
    }


def test_same_seed_same_tokens_alone_and_in_a_batch(engine_url: str) -> None:
    with httpx.Client(base_url=engine_url, timeout=60) as client:
        alone = _ids(client.post("/v1/completions", json=_request(1234)).json())
        again = _ids(client.post("/v1/completions", json=_request(1234)).json())
        other = _ids(client.post("/v1/completions", json=_request(99)).json())
    assert alone == again
    assert alone != other

    async def batched() -> list[list[list[int]]]:
        async with httpx.AsyncClient(base_url=engine_url, timeout=60) as client:
            bodies = [_request(1234)] + [_request(None) for _ in range(5)]
            replies = await asyncio.gather(*(client.post("/v1/completions", json=b) for b in bodies))
            return [_ids(r.json()) for r in replies]

    assert asyncio.run(batched())[0] == alone


def test_n_choices_with_a_seed_differ_from_each_other_and_repeat(engine_url: str) -> None:
    with httpx.Client(base_url=engine_url, timeout=60) as client:
        first = _ids(client.post("/v1/completions", json=_request(7, n=3)).json())
        second = _ids(client.post("/v1/completions", json=_request(7, n=3)).json())
    assert first == second
    assert len({tuple(ids) for ids in first}) == 3
