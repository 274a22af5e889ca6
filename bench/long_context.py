"""What a long context costs the bundled engine: time per call and memory at harness-sized prompts, and what
prefix caching saves a multi-turn session.

    python bench/long_context.py [--max-model-len 65536] [--lengths 1000,16000,44000,64000] [--model PATH]
    python bench/long_context.py --sessions 16000,44000 [--turns 10] [--uncached-turns 2]

Starts `rollwire engine` (the tiny model by default) with `--max-model-len`, as `rollwire up` does.

Lengths: one token-id prompt of each length (Codex CLI's default prompt is ~15k tokens, Claude Code's ~45k), each
generating --max-tokens tokens (ignore_eos), --repeat times, each call with a salt of its own so none reuses an
earlier one's cached prefix. One table: seconds per call, its ratio to the shortest prompt, and the engine
process's resident memory (now and its peak so far, from /proc).

Sessions: an agent's conversation, as a harness sends it: turn 1 is a prompt of the prefix length, every later
turn is the previous prompt + the previous answer's ids + --turn-tokens new ones (a tool result). Each session
runs --turns turns on an engine with prefix caching (its default) and, side by side in the same run, its first
--uncached-turns turns on a second engine started with `--prefix-cache-mib 0` (every uncached turn prefills the
whole prompt again, so a few turns measure it). Turns are streamed: one table gives each turn's time to its
first token (the prefill, which is what the cache shortens) and its whole time (decoding --max-tokens tokens at
the full context costs the same with or without it), with and without the cache; the ratios of turn 2+; the
tokens the engine reused (its /metrics) and its memory: resident, and what the cache holds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def engine(model: str | None, max_model_len: int, *extra: str) -> Iterator[tuple[str, int]]:
    """A `rollwire engine` subprocess (``extra``: more of its flags); yields (base URL, pid) once /health answers."""
    port = _free_port()
    argv = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "engine", "--port", str(port)]
    argv += ["--max-model-len", str(max_model_len), *extra] + (["--model", model] if model else [])
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


def metric(client: httpx.Client, name: str) -> int:
    """One series of the engine's /metrics."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + "{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise SystemExit(f"the engine's /metrics has no {name}")


def complete(client: httpx.Client, body: dict[str, Any]) -> tuple[float, list[int]]:
    """(seconds, sampled ids) of one completion."""
    start = time.perf_counter()
    reply = client.post("/v1/completions", json=body)
    if reply.status_code != 200:
        raise SystemExit(f"the engine answered {reply.status_code}: {reply.text[:300]}")
    return time.perf_counter() - start, list(reply.json()["choices"][0]["token_ids"])


def lengths_table(args: argparse.Namespace, lengths: list[int]) -> None:
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
            salts = [f"call-{length}-{n}" for n in range(args.repeat)]  # no call reuses another's prefix
            seconds = sum(complete(client, {**body, "cache_salt": salt})[0] for salt in salts)
            rows.append((length, seconds / args.repeat, *memory_mib(pid)))
    base = rows[0][1]
    print(f"\n{'prompt tokens':>13} {'s per call':>10} {'x shortest':>10} {'RSS MiB':>8} {'peak RSS MiB':>12}")
    for length, seconds, rss, peak in rows:
        print(f"{length:>13} {seconds:>10.2f} {seconds / base:>10.2f} {rss:>8.0f} {peak:>12.0f}")
    print(f"(idle engine: {idle:.0f} MiB; {args.max_tokens} tokens generated per call; torch threads: "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')})")  # fmt: skip


@dataclass(frozen=True)
class Turn:
    first_token_s: float
    """Until the first token's event: the prefill, which the cache shortens."""
    seconds: float
    """The whole turn: the prefill and every token's decode step."""
    reused: int
    """Prompt tokens the engine took from its cache (its /metrics)."""


def streamed(client: httpx.Client, body: dict[str, Any]) -> tuple[float, float, list[int]]:
    """(seconds to the first token, seconds in all, sampled ids) of one streamed completion."""
    start, first = time.perf_counter(), 0.0
    ids: list[int] = []
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as reply:
        if reply.status_code != 200:
            raise SystemExit(f"the engine answered {reply.status_code}: {reply.read()[:300]!r}")
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])["choices"][0].get("token_ids") or []
            if chunk and not ids:
                first = time.perf_counter() - start
            ids += chunk
    return first, time.perf_counter() - start, ids


def session(client: httpx.Client, prefix: int, turns: int, args: argparse.Namespace) -> list[Turn]:
    """Each turn of one session; turn 1 is ``prefix`` tokens long."""
    served = client.get("/v1/models").json()["data"][0]["id"]
    prompt = [(7 * j) % 1000 + 20 for j in range(prefix)]
    out: list[Turn] = []
    for turn in range(turns):
        hits = metric(client, "vllm:prefix_cache_hits_total")
        body = {"model": served, "prompt": prompt, "max_tokens": args.max_tokens, "ignore_eos": True, "seed": turn,
                "temperature": 1.0, "return_token_ids": True, "cache_salt": f"session-{prefix}"}  # fmt: skip
        first, seconds, sampled = streamed(client, body)
        out.append(Turn(first, seconds, metric(client, "vllm:prefix_cache_hits_total") - hits))
        print(f"  turn {turn + 1}: {len(prompt)} tokens, first token {first:.2f} s, {seconds:.2f} s", flush=True)
        prompt = prompt + sampled + [(13 * j + turn) % 1000 + 20 for j in range(args.turn_tokens)]
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def sessions_table(args: argparse.Namespace, prefixes: list[int]) -> None:
    cached: dict[int, list[Turn]] = {}
    uncached: dict[int, list[Turn]] = {}
    memory: dict[int, tuple[float, float, float]] = {}
    for label, flags, into in (("with", (), cached), ("without", ("--prefix-cache-mib", "0"), uncached)):
        turns = args.turns if into is cached else args.uncached_turns
        started = engine(args.model, args.max_model_len, *flags)
        with started as (url, pid), httpx.Client(base_url=url, timeout=3600) as client:
            for prefix in prefixes:
                print(f"session at {prefix} tokens, {turns} turns, {label} the prefix cache ...", flush=True)
                into[prefix] = session(client, prefix, turns, args)
                if into is cached:
                    held = metric(client, "rollwire_engine_prefix_cache_bytes") / 2**20
                    memory[prefix] = (*memory_mib(pid), held)
    print(f"\n{'prefix':>7} {'turn':>5} {'first token s':>13} {'uncached':>8} {'turn s':>7} {'uncached':>8} "
          f"{'reused tokens':>13}")  # fmt: skip
    for prefix in prefixes:
        for n, turn in enumerate(cached[prefix]):
            other = uncached[prefix][n] if n < len(uncached[prefix]) else None
            first = f"{other.first_token_s:>8.2f}" if other else f"{'':>8}"
            whole = f"{other.seconds:>8.2f}" if other else f"{'':>8}"
            print(f"{prefix:>7} {n + 1:>5} {turn.first_token_s:>13.2f} {first} {turn.seconds:>7.2f} {whole} "
                  f"{turn.reused:>13}")  # fmt: skip
    print(f"\n{'prefix':>7} {'turn 2+:':>8} {'first token x':>13} {'worst x':>7} {'turn x':>6} {'worst x':>7} "
          f"{'RSS MiB':>8} {'peak RSS MiB':>12} {'cache MiB':>9}")  # fmt: skip
    for prefix in prefixes:
        later = cached[prefix][1:]
        full = uncached[prefix][1:] or uncached[prefix][:1]
        first_x = _mean([t.first_token_s for t in full]) / _mean([t.first_token_s for t in later])
        first_worst = min(t.first_token_s for t in full) / max(t.first_token_s for t in later)
        turn_x = _mean([t.seconds for t in full]) / _mean([t.seconds for t in later])
        turn_worst = min(t.seconds for t in full) / max(t.seconds for t in later)
        rss, peak, held = memory[prefix]
        print(f"{prefix:>7} {'':>8} {first_x:>13.1f} {first_worst:>7.1f} {turn_x:>6.1f} {turn_worst:>7.1f} "
              f"{rss:>8.0f} {peak:>12.0f} {held:>9.1f}")  # fmt: skip
    print(f"(turn 2+: the mean of turns 2..{args.turns} with the cache against turns 2..{args.uncached_turns} "
          f"without, 'worst x' the fastest turn without over the slowest with; {args.max_tokens} tokens generated "
          f"a turn, {args.turn_tokens} new tokens appended; memory is the cached engine's after the session)"
          )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-model-len", type=int, default=65536, help="the engine's context (default 65536)")
    parser.add_argument(
        "--lengths", default=None,
        help="prompt lengths in tokens (default 1000,16000,44000,64000; none with --sessions)",
    )
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens generated per call (default 32)")
    parser.add_argument("--repeat", type=int, default=2, help="calls per length (default 2)")
    parser.add_argument("--sessions", default="", help="prefix lengths of multi-turn sessions, e.g. 16000,44000")
    parser.add_argument("--turns", type=int, default=10, help="turns of a session with the cache (default 10)")
    parser.add_argument("--uncached-turns", type=int, default=2, help="turns of a session without it (default 2)")
    parser.add_argument("--turn-tokens", type=int, default=200, help="new tokens a turn appends (default 200)")
    parser.add_argument("--model", default=None, help="local HF checkpoint folder (default: the tiny model)")
    args = parser.parse_args(argv)
    prefixes = [int(n) for n in args.sessions.split(",") if n]
    if args.lengths is None:
        args.lengths = "" if prefixes else "1000,16000,44000,64000"
    lengths = [int(n) for n in args.lengths.split(",") if n]
    if lengths and max(lengths) + args.max_tokens > args.max_model_len:
        raise SystemExit("every prompt length + --max-tokens must fit in --max-model-len")
    if prefixes:
        if args.turns < 2 or args.uncached_turns < 1:
            raise SystemExit("--turns must be at least 2 and --uncached-turns at least 1")
        longest = max(prefixes) + args.turns * (args.max_tokens + args.turn_tokens)
        if longest > args.max_model_len:
            raise SystemExit(f"a session grows to {longest} tokens: raise --max-model-len or shorten it")
    if lengths:
        lengths_table(args, lengths)
    if prefixes:
        sessions_table(args, prefixes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
