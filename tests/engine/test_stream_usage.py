"""Streamed usage follows vLLM: a final usage chunk with include_usage, running counts with continuous_usage_stats."""

from __future__ import annotations

import json
from typing import Any

import httpx


def _chunks(url: str, options: dict[str, Any] | None) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"prompt": [9, 8, 7], "max_tokens": 4, "stream": True, "ignore_eos": True}
    if options is not None:
        body["stream_options"] = options
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as reply:
        lines = [line for line in reply.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def test_no_usage_without_stream_options(engine_url: str) -> None:
    chunks = _chunks(engine_url, None)
    assert len(chunks) == 4 and all("usage" not in c for c in chunks)


def test_final_usage_chunk(engine_url: str) -> None:
    chunks = _chunks(engine_url, {"include_usage": True})
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert all("usage" not in c for c in chunks[:-1])


def test_continuous_usage_counts_up(engine_url: str) -> None:
    chunks = _chunks(engine_url, {"include_usage": True, "continuous_usage_stats": True})
    assert [c["usage"]["completion_tokens"] for c in chunks[:-1]] == [1, 2, 3, 4]
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 7,
        "completion_tokens": 4,
        "prompt_tokens_details": None,
    }
