"""Proxy overhead: the same requests sent to a stub upstream directly and through `rollwire proxy`.

    python bench/proxy.py [--requests 400] [--concurrency 1 64] [--litellm PATH]

The upstream is a stub vLLM-shaped /v1/completions that answers at once with fixed token ids (so the
numbers are the proxy's own cost: auth, render, splice lookup, upstream hop, parsing, the committed store
write). Both run as loopback subprocesses; requests spread over 64 rollouts. Prints p50/p99 latency and
requests/s per concurrency, with the proxy's added latency and its throughput ratio to direct calls.
LiteLLM's proxy sits in front of the same stub when `--litellm` names its executable: installing
`litellm[proxy]` into the project's environment would downgrade packages the project shares (rich,
huggingface_hub), so it lives in its own venv; without it its rows say "not installed".
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
LITELLM_KEY = "sk-bench"


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

    async def chat(request: Request) -> Response:
        """The same answer in chat shape, for LiteLLM (which cannot send token-id prompts)."""
        await request.json()
        message = {"role": "assistant", "content": "Hello"}
        usage = {"prompt_tokens": 10, "completion_tokens": len(SAMPLED), "total_tokens": 10 + len(SAMPLED)}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": "c", "object": "chat.completion", "created": 0, "model": "stub", "choices": [choice]}
        return JSONResponse({**body, "usage": usage})

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )


@contextmanager
def litellm(binary: str | None, upstream: str, tmp: str) -> Iterator[str | None]:
    """LiteLLM's proxy in front of the stub, or None when no executable was given."""
    if binary is None:
        yield None
        return
    port = _port()
    config = f"{tmp}/litellm.yaml"
    with open(config, "w") as fh:
        fh.write(
            "model_list:\n  - model_name: stub\n    litellm_params:\n"
            f"      model: openai/stub\n      api_base: {upstream}/v1\n      api_key: none\n"
            f"general_settings:\n  master_key: {LITELLM_KEY}\n"
        )
    argv = [binary, "--config", config, "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health/liveliness", proc)
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        proc.terminate()
        proc.wait(20)


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
                key = {"Authorization": f"Bearer {LITELLM_KEY}"} if "/r/" not in url else {}
                response = await client.post(url, json=body, headers=key)
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
    parser.add_argument("--litellm", default=None, help="LiteLLM proxy executable (its own venv) to compare with")
    parser.add_argument("--serve-stub", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stub is not None:
        import uvicorn

        uvicorn.run(stub_app(), host="127.0.0.1", port=args.serve_stub, log_level="warning")
        return
    with (
        tempfile.TemporaryDirectory() as tmp,
        servers(f"sqlite:///{tmp}/bench.db") as (upstream, proxy),
        litellm(args.litellm, upstream, tmp) as lite,
    ):
        admin = httpx.Client(base_url=proxy, headers={"Authorization": "Bearer bench"}, timeout=30)
        run = admin.post("/admin/v1/runs", json={"name": "bench"}).json()["id"]
        rollouts = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": ROLLOUTS}).json()
        table(upstream, [r["base_url"] for r in rollouts], lite, args.requests, args.concurrency)


def table(upstream: str, bases: list[str], lite: str | None, requests: int, levels: list[int]) -> None:
    """Warm every path up, then one block of rows per concurrency: direct, proxy, LiteLLM."""
    chat = {"model": "stub", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    direct = {
        "model": "stub",
        "prompt": [1, 872, 198, 50, 97, 121, 2, 198, 1, 77],
        "max_tokens": 8,
        "return_token_ids": True,
        "logprobs": 0,
    }
    warm = [(f"{upstream}/v1/completions", direct)] * 20 + [(f"{bases[0]}/chat/completions", chat)] * 20
    asyncio.run(_run(warm + ([(lite, chat)] * 20 if lite else []), 4))
    head = f"{'concurrency':>11} {'path':<8} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}"
    print(f"{head} {'added p50':>10} {'added p99':>10} {'req/s ratio':>11}")
    for c in levels:
        d = _stats(*asyncio.run(_run([(f"{upstream}/v1/completions", direct)] * requests, c)))
        print(f"{c:>11} {'direct':<8} {d[0]:>8.2f} {d[1]:>8.2f} {d[2]:>8.0f} {'':>10} {'':>10} {1.0:>11.2f}")
        via = [(f"{bases[i % len(bases)]}/chat/completions", chat) for i in range(requests)]
        rows = [("proxy", via)] + ([("litellm", [(lite, chat)] * requests)] if lite else [])
        for name, batch in rows:
            p = _stats(*asyncio.run(_run(batch, c)))
            added = f"{p[0] - d[0]:>10.2f} {p[1] - d[1]:>10.2f} {p[2] / d[2]:>11.2f}"
            print(f"{c:>11} {name:<8} {p[0]:>8.2f} {p[1]:>8.2f} {p[2]:>8.0f} {added}")
        if lite is None:
            print(f"{c:>11} {'litellm':<8} not installed (pass --litellm PATH to a litellm[proxy] venv's executable)")


if __name__ == "__main__":
    main()
