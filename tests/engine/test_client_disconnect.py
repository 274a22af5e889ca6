"""A client that goes away (streamed or not) frees its batch rows; /metrics shows vLLM's running gauge drop."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.polling import wait_until

LONG = {"prompt": [5, 6, 7], "max_tokens": 8000, "ignore_eos": True}


def _running(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    match = re.search(r"^vllm:num_requests_running\{[^}]*\} (\d+)$", text, re.MULTILINE)
    assert match, text
    return int(match.group(1))


def _wait_for_running(url: str, want: int) -> None:
    """Read the gauge (the engine has no event to wait on from outside) until it reads ``want``."""
    wait_until(lambda: _running(url), f"the running gauge to read {want}", ok=lambda n: n == want, timeout_s=20)


def test_non_streaming_client_timeout_cancels_generation(engine_url: str) -> None:
    _wait_for_running(engine_url, 0)
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(10, read=0.5)) as client:
        client.post(f"{engine_url}/v1/completions", json=LONG)
    _wait_for_running(engine_url, 0)


def test_closed_stream_cancels_generation(engine_url: str) -> None:
    _wait_for_running(engine_url, 0)
    with httpx.stream("POST", f"{engine_url}/v1/completions", json={**LONG, "stream": True}, timeout=30) as reply:
        lines = reply.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
        assert _running(engine_url) == 1
    _wait_for_running(engine_url, 0)
