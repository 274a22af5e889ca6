"""Proxy overhead: the same requests sent to a stub upstream directly and through `rollwire proxy`.

    python bench/proxy.py [--requests 400] [--concurrency 1 64]

The upstream is a stub vLLM-shaped /v1/completions that answers at once with fixed token ids (so the
numbers are the proxy's own cost: auth, render, splice lookup, upstream hop, parsing, the committed store
write). Both run as loopback subprocesses; requests spread over 64 rollouts. Prints p50/p99 latency and
requests/s per concurrency, with the proxy's added latency and its throughput ratio to direct calls.
LiteLLM is not in the table: installing `litellm[proxy]` would change packages shared with the project.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

ROLLOUTS = 64
SAMPLED = [72, 101, 108, 108, 111, 2]


def stub_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def completions(request: Request) -> Response:
        body = await request.json()
        choice = {
            "index": 0,
            "text": "",
            "finish_reason": "stop",
            "token_ids": SAMPLED,
            "prompt_token_ids": body["prompt"],
            "logprobs": {"token_logprobs": [-0.5] * len(SAMPLED), "tokens": None, "top_logprobs": None},
        }
        return JSONResponse({"id": "c", "object": "text_completion", "choices": [choice], "weight_version": 0})

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            time.sleep(0.05)  # a subprocess's port: nothing to wait on but polling
    raise SystemExit(f"{url} never answered")


@contextmanager
def servers(db: str) -> Iterator[tuple[str, str]]:
    """The stub upstream and a proxy in front of it; yields (upstream URL, proxy URL)."""
    up_port, proxy_port = _port(), _port()
    env = dict(os.environ)
    stub = subprocess.Popen([sys.executable, __file__, "--serve-stub", str(up_port)], env=env)
    upstream = f"http://127.0.0.1:{up_port}"
    argv = [
        sys.executable,
        "-m",
        "rollwire.cli",
        "--log-level",
        "WARNING",
        "proxy",
        "--port",
        str(proxy_port),
        "--upstream",
        upstream,
        "--db",
        db,
        "--operator-key",
        "bench",
    ]
    proxy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env)
    try:
        _wait_healthy(f"{upstream}/v1/models", stub)
        _wait_healthy(f"http://127.0.0.1:{proxy_port}/health", proxy)
        yield upstream, f"http://127.0.0.1:{proxy_port}"
    finally:
        for proc in (proxy, stub):
            proc.terminate()
            proc.wait(10)


async def _run(requests: list[tuple[str, dict[str, Any]]], concurrency: int) -> tuple[list[float], float]:
    queue = list(reversed(requests))
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker() -> None:
            while queue:
                url, body = queue.pop()
                start = time.perf_counter()
                response = await client.post(url, json=body)
                latencies.append(time.perf_counter() - start)
                if response.status_code != 200:
                    raise SystemExit(f"{url} answered {response.status_code}: {response.text[:200]}")

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - start


def _stats(latencies: list[float], wall: float) -> tuple[float, float, float]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1e3, p99 * 1e3, len(ordered) / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per row (default 400)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64], help="concurrency levels (default 1 64)")
    parser.add_argument("--serve-stub", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stub is not None:
        import uvicorn

        uvicorn.run(stub_app(), host="127.0.0.1", port=args.serve_stub, log_level="warning")
        return
    with tempfile.TemporaryDirectory() as tmp, servers(f"sqlite:///{tmp}/bench.db") as (upstream, proxy):
        admin = httpx.Client(base_url=proxy, headers={"Authorization": "Bearer bench"}, timeout=30)
        run = admin.post("/admin/v1/runs", json={"name": "bench"}).json()["id"]
        rollouts = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": ROLLOUTS}).json()
        chat = {"model": "stub", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
        direct = {
            "model": "stub",
            "prompt": [1, 872, 198, 50, 97, 121, 2, 198, 1, 77],
            "max_tokens": 8,
            "return_token_ids": True,
            "logprobs": 0,
        }
        asyncio.run(
            _run(
                [(f"{upstream}/v1/completions", direct)] * 20
                + [(f"{rollouts[0]['base_url']}/chat/completions", chat)] * 20,
                4,
            )
        )
        print(
            f"{'concurrency':>11} {'path':<8} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'added p50':>10} {'added p99':>10} {'req/s ratio':>11}"
        )
        for c in args.concurrency:
            d = _stats(*asyncio.run(_run([(f"{upstream}/v1/completions", direct)] * args.requests, c)))
            via = [(f"{rollouts[i % ROLLOUTS]['base_url']}/chat/completions", chat) for i in range(args.requests)]
            p = _stats(*asyncio.run(_run(via, c)))
            print(f"{c:>11} {'direct':<8} {d[0]:>8.2f} {d[1]:>8.2f} {d[2]:>8.0f} {'':>10} {'':>10} {1.0:>11.2f}")
            print(
                f"{c:>11} {'proxy':<8} {p[0]:>8.2f} {p[1]:>8.2f} {p[2]:>8.0f} {p[0] - d[0]:>10.2f} {p[1] - d[1]:>10.2f} {p[2] / d[2]:>11.2f}"
            )


if __name__ == "__main__":
    main()
