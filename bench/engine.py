"""Engine throughput and start-up, bundled engine vs vLLM's CPU build, in one run.

    python bench/engine.py [--engines bundled,vllm] [--requests 32] [--max-tokens 64] [--model NAME|PATH] [--threads N]

Starts each engine in a subprocess on a loopback port (the tiny model by default, or a model by name such as
smollm2-135m, built before any engine starts; vLLM from the venv rollwire manages, installed on first use), times
its start until /health answers, sends the same token-id prompts with fixed lengths (ignore_eos, so every request
generates exactly --max-tokens) one at a time, then at concurrency 1, 4 and 16, then streams 1 and 16 of them at
once for the time to the first token, and prints one table: tokens per second, each row's ratio to that engine's
one-at-a-time run and to the bundled engine's same row, the first-token times, and the start-up seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

CONCURRENCY = (1, 4, 16)
ENGINES = ("bundled", "vllm")
START_TIMEOUT_S = 900.0
"""vLLM compiles its model at start: about 70 s alone on two cores, minutes on a loaded machine."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _vllm_argv(model: str | None, port: int) -> tuple[list[str], dict[str, str]]:
    from rollwire.app.stack import TINY_SERVED_NAME
    from rollwire.app.vllm_runtime import ensure_python, serve_command, serve_env
    from rollwire.model_names import resolve_model
    from rollwire.settings import default_home

    python = ensure_python(default_home(), echo=lambda line: print(line, flush=True))
    folder = resolve_model(model, default_home())
    argv = serve_command(python, model=str(folder), host="127.0.0.1", port=port,
                         served_model_name=folder.name if model else TINY_SERVED_NAME, max_model_len=8192)  # fmt: skip
    return argv, serve_env()


@contextmanager
def engine(kind: str, model: str | None, max_batch_size: int, threads: int | None) -> Iterator[tuple[str, float]]:
    """The engine in a subprocess; yields its base URL and start-up seconds once /health answers."""
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "rollwire.app.cli",
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
    env = dict(os.environ)
    if kind == "vllm":  # vLLM batches up to its own --max-num-seqs (16 in rollwire's command line)
        argv, env = _vllm_argv(model, port)
    log = tempfile.TemporaryFile()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise SystemExit(f"{kind} engine exited: {log.read().decode(errors='replace')[-800:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{kind} engine did not become healthy within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        yield url, time.monotonic() - started
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # vLLM's engine-core worker goes with its API server
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


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


def with_model(url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bodies naming the engine's served model (vLLM checks the name)."""
    served = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    return [{**body, "model": served} for body in bodies]


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


async def _first_tokens(url: str, bodies: list[dict[str, Any]]) -> list[float]:
    """Seconds from sending to the first streamed token, for ``bodies`` all sent at once."""
    limits = httpx.Limits(max_connections=len(bodies) + 2)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def one(body: dict[str, Any]) -> float:
            start = time.perf_counter()
            first = 0.0
            async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as reply:
                reply.raise_for_status()
                async for line in reply.aiter_lines():
                    if not first and line.startswith("data: {"):
                        first = time.perf_counter() - start
            return first

        return list(await asyncio.gather(*(one(b) for b in bodies)))


FIRST_TOKEN = (1, 16)
"""How many requests stream at once when the time to the first token is taken."""


def run_engine(kind: str, args: argparse.Namespace) -> list[tuple[str, str, int, int, float]]:
    """(engine, mode, concurrency, tokens, seconds) rows for one engine, plus its start-up as mode "start-up"."""
    rows: list[tuple[str, str, int, int, float]] = []
    print(f"starting the {kind} engine ...", flush=True)
    with engine(kind, args.model, max(CONCURRENCY), args.threads) as (url, startup):
        rows.append((kind, "start-up", 0, 0, startup))
        bodies = with_model(url, requests_for(args.requests, args.max_tokens))
        one_at_a_time(url, bodies[:2])  # warm-up
        print(f"{kind}: {args.requests} requests x {args.max_tokens} tokens one at a time ...", flush=True)
        tokens, seconds = one_at_a_time(url, bodies)
        rows.append((kind, "one at a time", 1, tokens, seconds))
        for concurrency in CONCURRENCY:
            print(f"{kind}: the same requests at concurrency {concurrency} ...", flush=True)
            tokens, seconds = asyncio.run(_concurrent(url, bodies, concurrency))
            rows.append((kind, "concurrent", concurrency, tokens, seconds))
        for at_once in FIRST_TOKEN:
            print(f"{kind}: {at_once} streamed at once, time to the first token ...", flush=True)
            streamed = [{**bodies[i % len(bodies)], "seed": 1000 + i} for i in range(at_once)]
            times = sorted(asyncio.run(_first_tokens(url, streamed)))
            rows.append((kind, "first token", at_once, 0, times[len(times) // 2]))
    return rows


def print_table(rows: list[tuple[str, str, int, int, float]]) -> None:
    """tokens/s per row, its ratio to the engine's one-at-a-time row and to the bundled engine's same row."""
    rate = {(e, m, c): t / s for e, m, c, t, s in rows if m not in ("start-up", "first token")}
    print(f"\n{'engine':<8} {'mode':<14} {'concurrency':>11} {'tokens':>8} {'seconds':>8} {'tokens/s':>9} "
          f"{'x one-at-a-time':>16} {'x bundled':>10}")  # fmt: skip
    for kind, mode, concurrency, tokens, seconds in rows:
        if mode in ("start-up", "first token"):
            continue
        own = rate[(kind, mode, concurrency)]
        bundled = rate.get(("bundled", mode, concurrency))
        versus = f"{own / bundled:.2f}" if bundled else "-"
        print(f"{kind:<8} {mode:<14} {concurrency:>11} {tokens:>8} {seconds:>8.2f} {own:>9.1f} "
              f"{own / rate[(kind, 'one at a time', 1)]:>16.2f} {versus:>10}")  # fmt: skip
    first = {(kind, at_once): seconds for kind, mode, at_once, _, seconds in rows if mode == "first token"}
    print("\ntime to the first streamed token (median): " + ", ".join(
        f"{kind} {at_once} at once {seconds:.3f} s" + (f" ({seconds / first[('bundled', at_once)]:.2f}x bundled)"
        if kind != "bundled" and ("bundled", at_once) in first else "") for (kind, at_once), seconds in first.items()))  # fmt: skip
    startups = {kind: seconds for kind, mode, _, _, seconds in rows if mode == "start-up"}
    print("\nstart-up until /health answers: " + ", ".join(
        f"{kind} {seconds:.1f} s" + (f" ({seconds / startups['bundled']:.1f}x bundled)" if "bundled" in startups
                                     and kind != "bundled" else "") for kind, seconds in startups.items()))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="bundled,vllm", help="comma-separated, in order (default bundled,vllm)")
    parser.add_argument("--requests", type=int, default=32, help="requests per run (default 32)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens generated per request (default 64)")
    parser.add_argument(
        "--model", default=None, help="a model name (tiny, smollm2-135m) or a local HF folder (default: tiny)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="the bundled engine's torch threads (default: its own)"
    )
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.engines.split(",") if k.strip()]
    if not kinds or any(k not in ENGINES for k in kinds):
        parser.error(f"--engines takes a comma-separated list of {', '.join(ENGINES)}")
    if args.model:  # built (once) here, so neither engine's start-up counts it
        from rollwire.model_names import resolve_model
        from rollwire.settings import default_home

        resolve_model(args.model, default_home())
    rows = [row for kind in kinds for row in run_engine(kind, args)]
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
