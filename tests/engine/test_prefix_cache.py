"""Prefix caching: what the cache keeps and gives back (by hand-built tensors), and on a running engine that a
continuing conversation prefills only its tail while its logprobs stay those of a full forward pass, that
continuous batching and salts share nothing they should not, and that a weight push empties it."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app
from rollwire.engine.prefix_cache import PrefixCache
from rollwire.settings import EngineSettings
from tests.engine.test_reload_weights import _perturbed_copy

LAYERS, HEADS, DIM = 2, 1, 2
BLOCK_BYTES = LAYERS * 2 * HEADS * 4 * DIM * 4
"""One 4-token block of the hand-built caches below (float32)."""


def _layers(ids: list[int], padding: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A cache whose every value names its layer, kind and token id: a slice shows where it came from."""
    width = padding + len(ids)
    out = []
    for layer in range(LAYERS):
        keys = torch.zeros(1, HEADS, width, DIM)
        values = torch.zeros(1, HEADS, width, DIM)
        for column, token in enumerate(ids):
            keys[0, :, padding + column] = 1000 * layer + token
            values[0, :, padding + column] = -(1000 * layer + token)
        out.append((keys, values))
    return out


def _tokens_of(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> list[list[int]]:
    return [[int(k[0, 0, c, 0]) - 1000 * n for c in range(k.shape[2])] for n, (k, _) in enumerate(layers)]


def test_lookup_gives_back_whole_blocks_and_leaves_a_token_to_prefill() -> None:
    cache = PrefixCache(1 << 20, block_tokens=4, min_share=0)
    ids = list(range(100, 110))
    cache.insert(ids, _layers(ids))
    assert cache.stats.blocks == 2 and cache.stats.bytes == 2 * BLOCK_BYTES

    hit = cache.lookup(ids + [7, 8, 9])
    assert hit is not None and hit.tokens == 8
    assert _tokens_of(hit.layers) == [ids[:8], ids[:8]]
    assert torch.equal(hit.layers[1][1], -hit.layers[1][0])

    exactly_two_blocks = cache.lookup(ids[:8])
    assert exactly_two_blocks is not None and exactly_two_blocks.tokens == 4, "the last id must be prefilled"
    assert cache.lookup([1] + ids) is None
    assert cache.lookup(ids[:4]) is None
    assert (cache.stats.queries, cache.stats.hits, cache.stats.hit_tokens) == (4, 2, 12)
    assert cache.stats.queried_tokens == 13 + 8 + 11 + 4


def test_a_sequence_in_a_padded_batch_row_is_cut_from_its_own_columns() -> None:
    cache = PrefixCache(1 << 20, block_tokens=4, min_share=0)
    ids = list(range(200, 208))
    cache.insert(ids, _layers(ids, padding=5))
    hit = cache.lookup(ids + [1])
    assert hit is not None and _tokens_of(hit.layers)[0] == ids
    with pytest.raises(ValueError, match="fewer than"):
        cache.insert(ids + [1], _layers(ids))


def test_branches_share_their_common_blocks() -> None:
    cache = PrefixCache(1 << 20, block_tokens=4, min_share=0)
    common = [1, 2, 3, 4]
    cache.insert(common + [5, 6, 7, 8], _layers(common + [5, 6, 7, 8]))
    cache.insert(common + [9, 9, 9, 9], _layers(common + [9, 9, 9, 9]))
    assert cache.stats.blocks == 3
    second = cache.lookup(common + [9, 9, 9, 9, 0])
    assert second is not None and _tokens_of(second.layers)[0] == common + [9, 9, 9, 9]


def test_salts_keep_their_blocks_apart() -> None:
    cache = PrefixCache(1 << 20, block_tokens=4, min_share=0)
    ids = list(range(10))
    cache.insert(ids, _layers(ids), salt="rollout-a")
    assert cache.lookup(ids, salt="rollout-b") is None
    assert cache.lookup(ids) is None
    hit = cache.lookup(ids, salt="rollout-a")
    assert hit is not None and hit.tokens == 8


def test_the_budget_evicts_least_recently_used_blocks_leaves_first() -> None:
    cache = PrefixCache(3 * BLOCK_BYTES, block_tokens=4, min_share=0)
    first, second = [1, 1, 1, 1, 2, 2, 2, 2], [3, 3, 3, 3, 4, 4, 4, 4]
    cache.insert(first, _layers(first))
    cache.insert(second, _layers(second))
    assert cache.stats.bytes <= 3 * BLOCK_BYTES and cache.stats.evicted_blocks == 1
    kept = cache.lookup(first + [0])
    assert kept is not None and kept.tokens == 4, "the older sequence lost its last block, not its first"
    newer = cache.lookup(second + [0])
    assert newer is not None and newer.tokens == 8

    third = [5, 5, 5, 5]
    cache.insert(third, _layers(third))
    assert cache.lookup(first + [0]) is None, "now the least recently used block"
    survivor = cache.lookup(second + [0])
    assert survivor is not None and survivor.tokens == 8


def test_a_prefix_covering_too_little_of_a_prompt_is_not_served() -> None:
    cache = PrefixCache(1 << 20, block_tokens=4, min_share=0.7)
    ids = list(range(28))
    cache.insert(ids[:20], _layers(ids[:20]))
    assert cache.lookup(ids[:12]) is None, "8 of 12 usable: 67% of the prompt, below 70%"
    mostly = cache.lookup(ids[:21])
    assert mostly is not None and mostly.tokens == 20
    assert cache.lookup(ids + [99] * 4) is None, "20 of 32 cached: a whole prefill is faster"
    assert (cache.stats.queries, cache.stats.hits, cache.stats.hit_tokens) == (3, 1, 20)


def test_clear_and_a_zero_budget_keep_nothing() -> None:
    cache = PrefixCache(1 << 20, block_tokens=4, min_share=0)
    cache.insert(list(range(8)), _layers(list(range(8))))
    cache.clear()
    assert (cache.stats.blocks, cache.stats.bytes, cache.stats.cleared) == (0, 0, 1)
    assert cache.lookup(list(range(9))) is None
    off = PrefixCache(0)
    off.insert(list(range(64)), _layers(list(range(64))))
    assert off.lookup(list(range(65))) is None and off.stats.queries == 0


# --- a running engine -----------------------------------------------------------------------------------------


@pytest.fixture()
def cached_engine(tiny_model_dir: Path, tmp_path: Path) -> Iterator[httpx.Client]:
    """A private engine: these tests read its cache counters and push weights into it."""
    app = create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def _metric(client: httpx.Client, name: str) -> int:
    text = client.get("/metrics").text
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\d+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return int(match.group(1))


def _complete(client: httpx.Client, prompt: list[int], **fields: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 0, "return_token_ids": True}
    reply = client.post("/v1/completions", json={**body, "ignore_eos": True, **fields})
    assert reply.status_code == 200, reply.text
    choice: dict[str, Any] = reply.json()["choices"][0]
    return choice


def _prompt(seed: int, length: int) -> list[int]:
    return torch.randint(3, 500, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_a_continuing_conversation_prefills_only_its_tail_with_exact_logprobs(
    cached_engine: httpx.Client, forward_logprobs: Callable[[list[int], list[int]], list[float]],
    logprob_tolerance: float,
) -> None:  # fmt: skip
    prompt = _prompt(1, 300)
    computed = 0
    for turn in range(4):
        hits_before = _metric(cached_engine, "vllm:prefix_cache_hits_total")
        choice = _complete(cached_engine, prompt, max_tokens=40)
        reused = _metric(cached_engine, "vllm:prefix_cache_hits_total") - hits_before
        sampled = choice["token_ids"]
        assert choice["logprobs"]["token_logprobs"] == pytest.approx(
            forward_logprobs(prompt, sampled), abs=logprob_tolerance
        )
        if turn:
            # Everything the engine computed last turn (prompt + answer but its last token), in whole blocks.
            assert reused == (computed // 32) * 32 and reused > len(prompt) - 90
        else:
            assert reused == 0
        computed = len(prompt) + len(sampled) - 1
        prompt = prompt + sampled + _prompt(10 + turn, 40)  # the harness appends a tool result
    assert _metric(cached_engine, "rollwire_engine_prefix_cache_request_hits_total") == 3
    assert _metric(cached_engine, "rollwire_engine_prefix_cache_bytes") > 0


def test_a_long_continuation_is_prefilled_in_passes_with_exact_logprobs(
    cached_engine: httpx.Client, forward_logprobs: Callable[[list[int], list[int]], list[float]],
    logprob_tolerance: float,
) -> None:  # fmt: skip
    from rollwire.engine.model import CONTINUED_CHUNK_TOKENS

    head = _prompt(5, 1600)
    _complete(cached_engine, head + [1], max_tokens=1)
    prompt = head + _prompt(6, CONTINUED_CHUNK_TOKENS + 88)  # 73% cached, the rest in two passes
    hits = _metric(cached_engine, "vllm:prefix_cache_hits_total")
    choice = _complete(cached_engine, prompt)
    assert _metric(cached_engine, "vllm:prefix_cache_hits_total") - hits == 1600
    expected = forward_logprobs(prompt, choice["token_ids"])
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(expected, abs=logprob_tolerance)


def test_concurrent_conversations_sharing_a_system_prompt_batch_together_exactly(
    cached_engine: httpx.Client, forward_logprobs: Callable[[list[int], list[int]], list[float]],
    logprob_tolerance: float,
) -> None:  # fmt: skip
    system = _prompt(2, 128)
    _complete(cached_engine, system + [7])
    prompts = [system + _prompt(20 + i, 30 + 7 * i) for i in range(4)]
    results: list[dict[str, Any] | None] = [None] * len(prompts)
    hits_before = _metric(cached_engine, "vllm:prefix_cache_hits_total")

    def call(i: int) -> None:
        results[i] = _complete(cached_engine, prompts[i], max_tokens=24)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _metric(cached_engine, "vllm:prefix_cache_hits_total") - hits_before >= 4 * 128
    for prompt, choice in zip(prompts, results, strict=True):
        assert choice is not None
        expected = forward_logprobs(prompt, choice["token_ids"])
        assert choice["logprobs"]["token_logprobs"] == pytest.approx(expected, abs=logprob_tolerance)


def test_only_requests_with_the_same_salt_share_a_prefix(cached_engine: httpx.Client) -> None:
    prompt = _prompt(3, 100)
    _complete(cached_engine, prompt, cache_salt="rollout-a")
    hits = _metric(cached_engine, "vllm:prefix_cache_hits_total")
    _complete(cached_engine, prompt, cache_salt="rollout-b")
    _complete(cached_engine, prompt)
    assert _metric(cached_engine, "vllm:prefix_cache_hits_total") == hits
    _complete(cached_engine, prompt, cache_salt="rollout-a")
    assert _metric(cached_engine, "vllm:prefix_cache_hits_total") == hits + 96
    reply = cached_engine.post("/v1/completions", json={"prompt": prompt, "cache_salt": ""})
    assert reply.status_code == 400 and "cache_salt" in reply.json()["error"]["message"]


def test_a_weight_push_empties_the_cache_so_no_stale_keys_serve_the_new_policy(
    cached_engine: httpx.Client, tiny_model_dir: Path, tmp_path: Path,
) -> None:  # fmt: skip
    from transformers import AutoModelForCausalLM

    changed = _perturbed_copy(tiny_model_dir, tmp_path / "step-1")
    prompt = _prompt(4, 200)
    before = _complete(cached_engine, prompt)
    assert _metric(cached_engine, "rollwire_engine_prefix_cache_blocks") > 0

    reply = cached_engine.post("/reload_weights", json={"model_path": str(changed)})
    assert reply.status_code == 200
    assert _metric(cached_engine, "rollwire_engine_prefix_cache_clears_total") == 1
    assert _metric(cached_engine, "rollwire_engine_prefix_cache_blocks") == 0
    hits = _metric(cached_engine, "vllm:prefix_cache_hits_total")
    after = _complete(cached_engine, prompt)
    assert _metric(cached_engine, "vllm:prefix_cache_hits_total") == hits, "nothing of the old policy was reused"

    model = AutoModelForCausalLM.from_pretrained(str(changed), dtype=torch.float32).eval()
    ids = torch.tensor([prompt + after["token_ids"]])
    with torch.inference_mode():
        logprobs = model(input_ids=ids).logits[0].float().log_softmax(-1)
    start = len(prompt) - 1
    expected = [float(logprobs[start + j, t]) for j, t in enumerate(after["token_ids"])]
    assert after["logprobs"]["token_logprobs"] == pytest.approx(expected, abs=1e-4)
    assert after["logprobs"]["token_logprobs"] != pytest.approx(before["logprobs"]["token_logprobs"], abs=1e-2)
