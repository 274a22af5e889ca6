"""What a long context costs the bundled engine: time per call and memory at harness-sized prompts.

    python bench/long_context.py [--max-model-len 65536] [--lengths 1000,16000,44000,64000] [--model PATH]

Starts `rollwire engine` (the tiny model by default) with `--max-model-len`, as `rollwire up` does, and sends
one token-id prompt of each length (Codex CLI's default prompt is ~15k tokens, Claude Code's ~45k), each
generating --max-tokens tokens (ignore_eos), --repeat times. Prints one table: seconds per call, its ratio
to the shortest prompt, and the engine process's resident memory (now and its peak so far, from /proc).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def engine(model: str | None, max_model_len: int) -> Iterator[tuple[str, int]]:
    """A `rollwire engine` subprocess; yields (base URL, pid) once /health answers."""
    port = _free_port()
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "engine", "--port", str(port)]
    argv += ["--max-model-len", str(max_model_len)] + (["--model", model] if model else [])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"engine exited: {(proc.stderr.read() if proc.stderr else b'').decode()[-500:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("engine did not become healthy within 180 s")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of a process, in MiB (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-model-len", type=int, default=65536, help="the engine's context (default 65536)")
    parser.add_argument("--lengths", default="1000,16000,44000,64000", help="prompt lengths in tokens")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens generated per call (default 32)")
    parser.add_argument("--repeat", type=int, default=2, help="calls per length (default 2)")
    parser.add_argument("--model", default=None, help="local HF checkpoint folder (default: the tiny model)")
    args = parser.parse_args(argv)
    lengths = [int(n) for n in args.lengths.split(",")]
    if max(lengths) + args.max_tokens > args.max_model_len:
        raise SystemExit("every prompt length + --max-tokens must fit in --max-model-len")
    rows: list[tuple[int, float, float, float]] = []
    with engine(args.model, args.max_model_len) as (url, pid), httpx.Client(base_url=url, timeout=1800) as client:
        served = client.get("/v1/models").json()["data"][0]["id"]
        idle, _ = memory_mib(pid)
        print(f"engine up (context {args.max_model_len}), resident {idle:.0f} MiB", flush=True)
        for length in lengths:
            body = {
                "model": served,
                "prompt": [(11 * j) % 1000 + 20 for j in range(length)],
                "max_tokens": args.max_tokens,
                "ignore_eos": True,
                "temperature": 1.0,
                "return_token_ids": True,
            }
            print(f"prompt of {length} tokens x {args.repeat} ...", flush=True)
            start = time.perf_counter()
            for _ in range(args.repeat):
                reply = client.post("/v1/completions", json=body)
                if reply.status_code != 200:
                    raise SystemExit(f"the engine answered {reply.status_code}: {reply.text[:300]}")
            rows.append((length, (time.perf_counter() - start) / args.repeat, *memory_mib(pid)))
    base = rows[0][1]
    print(f"\n{'prompt tokens':>13} {'s per call':>10} {'x shortest':>10} {'RSS MiB':>8} {'peak RSS MiB':>12}")
    for length, seconds, rss, peak in rows:
        print(f"{length:>13} {seconds:>10.2f} {seconds / base:>10.2f} {rss:>8.0f} {peak:>12.0f}")
    print(f"(idle engine: {idle:.0f} MiB; {args.max_tokens} tokens generated per call; torch threads: "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
