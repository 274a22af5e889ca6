"""Engine throughput: the same completion requests run one at a time, then at concurrency 1, 4 and 16.

    python bench/engine.py [--requests 32] [--max-tokens 64] [--model PATH] [--threads N]

Starts `rollwire engine` in a subprocess on a loopback port (the tiny model by default), sends token-id
prompts with fixed lengths (ignore_eos, so every request generates exactly --max-tokens), and prints one
table of generated tokens per second with each row's ratio to the one-at-a-time run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

CONCURRENCY = (1, 4, 16)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def engine(model: str | None, max_batch_size: int, threads: int | None) -> Iterator[str]:
    """A `rollwire engine` subprocess; yields its base URL once /health answers."""
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "rollwire.cli",
        "--log-level",
        "WARNING",
        "engine",
        "--port",
        str(port),
        "--max-batch-size",
        str(max_batch_size),
    ]
    if model:
        argv += ["--model", model]
    if threads is not None:
        argv += ["--threads", str(threads)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"engine exited: {(proc.stderr.read() if proc.stderr else b'').decode()[-500:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("engine did not become healthy within 120 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def requests_for(count: int, max_tokens: int) -> list[dict[str, Any]]:
    """Deterministic token-id prompts of 16..23 tokens; every request generates exactly ``max_tokens``."""
    return [
        {
            "prompt": [(7 * i + 3 * j) % 500 + 3 for j in range(16 + i % 8)],
            "max_tokens": max_tokens,
            "temperature": 1.0,
            "seed": i,
            "ignore_eos": True,
            "logprobs": 0,
            "return_token_ids": True,
        }
        for i in range(count)
    ]


def one_at_a_time(url: str, bodies: list[dict[str, Any]]) -> tuple[int, float]:
    tokens = 0
    start = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as client:
        for body in bodies:
            reply = client.post("/v1/completions", json=body)
            reply.raise_for_status()
            tokens += reply.json()["usage"]["completion_tokens"]
    return tokens, time.perf_counter() - start


async def _concurrent(url: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[int, float]:
    limit = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def one(body: dict[str, Any]) -> int:
            async with limit:
                reply = await client.post("/v1/completions", json=body)
                reply.raise_for_status()
                return int(reply.json()["usage"]["completion_tokens"])

        start = time.perf_counter()
        counts = await asyncio.gather(*(one(b) for b in bodies))
        return sum(counts), time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32, help="requests per run (default 32)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens generated per request (default 64)")
    parser.add_argument("--model", default=None, help="local HF checkpoint folder (default: the tiny model)")
    parser.add_argument("--threads", type=int, default=None, help="the engine's torch threads (default: its own)")
    args = parser.parse_args(argv)
    bodies = requests_for(args.requests, args.max_tokens)
    rows: list[tuple[str, int, int, float]] = []
    with engine(args.model, max(CONCURRENCY), args.threads) as url:
        one_at_a_time(url, bodies[:2])  # warm-up
        print(f"running {args.requests} requests x {args.max_tokens} tokens one at a time ...", flush=True)
        tokens, seconds = one_at_a_time(url, bodies)
        rows.append(("one at a time", 1, tokens, seconds))
        for concurrency in CONCURRENCY:
            print(f"running the same requests at concurrency {concurrency} ...", flush=True)
            tokens, seconds = asyncio.run(_concurrent(url, bodies, concurrency))
            rows.append(("concurrent", concurrency, tokens, seconds))
    base = rows[0][2] / rows[0][3]
    print(f"\n{'mode':<14} {'concurrency':>11} {'tokens':>8} {'seconds':>8} {'tokens/s':>9} {'x one-at-a-time':>16}")
    for mode, concurrency, tokens, seconds in rows:
        rate = tokens / seconds
        print(f"{mode:<14} {concurrency:>11} {tokens:>8} {seconds:>8.2f} {rate:>9.1f} {rate / base:>16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
