"""Long conversations through the proxy: what a call costs at 32k, 64k and 128k tokens of context, and what it
costs per new token, side by side with the same calls straight to the stub.

    python bench/proxy_context.py                                    # both harnesses below, ~15 seconds
    python bench/proxy_context.py --harness synthetic                # no `claude` needed
    python bench/proxy_context.py --contexts 32768 131072 --tails 100 2000 --calls 30

A harness resends its whole conversation with every call: its system prompt and tool definitions, then every
turn so far. Two harnesses' requests run, each row naming its own:

- ``claude-code`` (where ``claude`` is installed): Claude Code's own. The bench runs ``claude -p`` once against a
  capture server on 127.0.0.1 (its non-essential traffic off, as ``rollwire.harness_adapters.claude_code`` runs
  it), keeps its first request (system prompt, 24 tool definitions in 2.1, its opening messages and fields) and
  sends the conversation to the proxy's Anthropic Messages route the way Claude Code does (UTF-8 JSON, as
  Node writes it). Its opening request alone is ~43k of the tiny model's tokens, so it has no 32k row.
- ``synthetic``: ``bench/proxy.py``'s harness-sized prompt (``--system-chars 16000 --tools 20``, the first tool a
  shell tool) on Chat Completions, ~21k tokens before the first turn.

The stub answers every call with the same Bash tool call (hermes, ~35 tokens), and reports a context past the
largest row. Each row is one rollout: its conversation grows through the proxy turn by turn, each tool result a
source file of ``--grow-tokens`` (unmeasured calls, the way a harness's context fills: dozens of turns to 128k),
until its prompt is about ``--calls`` x tail / 2 short of the row's context; then ``--calls`` measured calls
follow, each answering the last tool call with a result of about ``--tails`` tokens (so ``mean``, the measured
prompts' mean, lands near the row's context). After each measured call the same prompt's length goes straight
to the stub (``/v1/completions``, the ids the proxy would send it, non-streamed), so the two paths alternate call
by call and a loaded machine slows both alike.

Columns: ``new/call`` the tokens a call adds to the one before (its prompt minus the earlier prompt and answer:
what the proxy renders and tokenizes), ``turns`` the calls that grew the conversation first, ``req kB`` the
request body, ``added`` rollwire's latency minus direct's, call by call (median, 90th percentile), ``cpu
ms/call`` the proxy's CPU time over the measured calls (/proc's per-thread schedstat, nanosecond-grained). The
closing lines read the table: a call's CPU at the largest context over the smallest (same harness, same tail:
1.0 is a cost that does not grow with the context) and the CPU each new token adds (same context, the larger
tail against the smaller). Answers are not streamed: what a context adds is on the request's side, and
streaming adds the same per-token cost at any context (``bench/proxy.py --pace-ms``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import event_loop
import httpx
from proxy_load import Conn, harness_tools, system_prompt

import proxy as bench

TASK = "The tests in tests/test_parser.py fail. Read the code under src/, find the bug and fix it."
COMMAND = {"command": "cat src/module.py", "description": "Read the module"}
BASH = {
    "type": "function",
    "function": {
        "name": "Bash",
        "description": "Run a shell command in the task's workspace and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"],
        },
    },
}
"""The synthetic harness's shell tool, named as Claude Code's (the stub answers every call with a call of it)."""


def _compact(body: dict[str, Any]) -> bytes:
    """A request body as harnesses write it: Node's ``JSON.stringify`` and the official Python SDKs (httpx's
    ``json=``, ``separators=(",", ":")``) write compact UTF-8 JSON."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


# --- the harness's conversation -----------------------------------------------------------------------------------


def capture_claude_code(tmp: Path) -> dict[str, Any]:
    """Claude Code's first request with its tools (``claude -p`` against a capture server on 127.0.0.1, which
    answers "done"): the body as it sent it."""
    from rollwire.harness_adapters.claude_code import QUIET_ENV

    bodies: list[dict[str, Any]] = []

    class Capture(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_HEAD(self) -> None:  # noqa: N802  (http.server's name)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            with contextlib.suppress(ValueError):
                bodies.append(json.loads(body))
            content = [{"type": "text", "text": "done"}]
            usage = {"input_tokens": 1, "output_tokens": 1}
            answer = {"id": "msg_0", "type": "message", "role": "assistant", "model": "m", "content": content}
            data = json.dumps({**answer, "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home = tmp / "claude-home"
    home.mkdir()
    env = {**os.environ, **QUIET_ENV, "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude")}
    env |= {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}", "ANTHROPIC_API_KEY": "bench"}
    try:
        subprocess.run(
            ["claude", "-p", "--output-format", "text", "--", TASK], cwd=home, env=env, timeout=180,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    with_tools = [b for b in bodies if b.get("tools")]
    if not with_tools:
        raise SystemExit("claude -p sent no request with tools to the capture server; try --harness synthetic")
    return max(with_tools, key=lambda b: len(b["tools"]))


def file_text(tokens: int, seed: int, chars_per_token: float) -> str:
    """A tool result about ``tokens`` long: source code, as a harness reads files (each ``seed`` its own)."""
    lines, size, i = [], 0, 0
    while size < tokens * chars_per_token:
        n = seed * 1000 + i
        line = f"def handle_{n}(request, limit={n % 97}):\n    return [item.key for item in request.items[:limit]]\n"
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)


class Harness(ABC):
    """A conversation as its harness sends it: ``body(result)`` is the next call, the last answer's tool call
    answered with ``result`` (the first call answers none); ``answered`` takes the proxy's answer in."""

    name = ""
    path = ""

    @abstractmethod
    def body(self, result: str | None) -> bytes:
        """The next call's request body."""

    @abstractmethod
    def answered(self, data: bytes) -> tuple[int, int]:
        """(prompt tokens, completion tokens) of the answer, as its usage says."""


class ClaudeCode(Harness):
    name = "claude-code"
    path = "/messages"

    def __init__(self, captured: dict[str, Any]) -> None:
        self.head = {k: v for k, v in captured.items() if k not in ("messages", "stream")}
        self.messages: list[dict[str, Any]] = list(captured["messages"])
        self.pending: str | None = None

    def body(self, result: str | None) -> bytes:
        if result is not None:
            assert self.pending is not None
            block = {"type": "tool_result", "tool_use_id": self.pending, "content": result}
            self.messages.append({"role": "user", "content": [block]})
        return _compact({**self.head, "messages": self.messages})

    def answered(self, data: bytes) -> tuple[int, int]:
        answer = json.loads(data)
        uses = [b for b in answer["content"] if b["type"] == "tool_use"]
        if not uses:
            raise SystemExit(f"no tool call in the answer: {answer}")
        self.messages.append({"role": "assistant", "content": answer["content"]})
        self.pending = uses[0]["id"]
        return answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]


class Synthetic(Harness):
    name = "synthetic"
    path = "/chat/completions"

    def __init__(self) -> None:
        self.tools = [BASH, *harness_tools(19)[1:]]
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(16_000)},
            {"role": "user", "content": TASK},
        ]
        self.pending: str | None = None

    def body(self, result: str | None) -> bytes:
        if result is not None:
            self.messages.append({"role": "tool", "tool_call_id": self.pending, "content": result})
        return _compact({"model": "stub", "messages": self.messages, "tools": self.tools})

    def answered(self, data: bytes) -> tuple[int, int]:
        answer = json.loads(data)
        message = answer["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:
            raise SystemExit(f"no tool call in the answer: {message}")
        self.messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls") and v})
        self.pending = calls[0]["id"]
        return answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]


# --- measuring -----------------------------------------------------------------------------------------------------


def cpu_ns(pid: int) -> int:
    """Time ``pid``'s threads have run, in ns (/proc's schedstat: finer than the 10 ms clock ticks of /proc's
    stat, which a few calls of a few ms would not resolve). A thread that ended takes its time with it: the
    proxy's threads (its store writer's, anyio's pool) live on."""
    total = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    return total


@dataclass
class Row:
    harness: str
    context: int
    tail: int
    contexts: list[int]
    new: list[int]
    ours: list[float]
    direct: list[float]
    cpu_ms: float
    request_kb: float
    grown_in: int

    @property
    def added(self) -> list[float]:
        """Rollwire's latency minus direct's, call by call (ms)."""
        return [(a - d) * 1e3 for a, d in zip(self.ours, self.direct)]


def _direct_body(prompt_len: int) -> bytes:
    """The completion the proxy sends the stub for a prompt of ``prompt_len`` ids, non-streamed."""
    body = {"model": "stub", "prompt": [1000] * prompt_len, "max_tokens": 64, "return_token_ids": True}
    return json.dumps({**body, "logprobs": 0}).encode()


async def run_row(
    harness: Harness, rollout: str, context: int, tail: int, args: argparse.Namespace, proxy: Conn, stub: Conn,
    pid: int, chars_per_token: float,
) -> Row | None:  # fmt: skip
    """Grow one rollout's conversation to about ``context`` tokens, then measure ``args.calls`` calls that add
    ``tail`` tokens each (None: the harness's opening request alone is longer than ``context``)."""
    path = f"/{rollout}{harness.path}"
    prompt, answer = harness.answered(await proxy.post(path, harness.body(None)))
    if prompt >= context:
        return None
    grown, seed = 1, 0
    goal = context - args.calls * tail // 2  # the measured calls' mean prompt lands at ``context``
    while prompt + args.grow_tokens < goal:
        seed += 1
        result = file_text(args.grow_tokens, seed, chars_per_token)
        prompt, answer = harness.answered(await proxy.post(path, harness.body(result)))
        grown += 1
    ours, direct, contexts, new, sizes = [], [], [], [], []
    before = cpu_ns(pid)
    for i in range(args.calls):
        body = harness.body(file_text(tail, 10_000 + i, chars_per_token))
        sizes.append(len(body))
        start = time.perf_counter()
        data = await proxy.post(path, body)
        ours.append(time.perf_counter() - start)
        last = prompt + answer
        prompt, answer = harness.answered(data)
        contexts.append(prompt)
        new.append(prompt - last)
        plain = _direct_body(prompt)
        start = time.perf_counter()
        await stub.post("/v1/completions", plain)
        direct.append(time.perf_counter() - start)
    cpu = (cpu_ns(pid) - before) / 1e6 / args.calls
    return Row(harness.name, context, tail, contexts, new, ours, direct, cpu, statistics.mean(sizes) / 1e3, grown)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


HEAD = (
    f"{'harness':<11} {'context':>7} {'mean':>7} {'new/call':>8} {'turns':>5} {'req kB':>6} {'direct p50':>10} "
    f"{'ours p50':>8} {'added p50':>9} {'added p90':>9} {'cpu ms/call':>11}"
)


def show(row: Row) -> None:
    line = f"{row.harness:<11} {row.context:>7} {statistics.mean(row.contexts):>7.0f} {statistics.mean(row.new):>8.0f}"
    line += f" {row.grown_in:>5} {row.request_kb:>6.0f} {statistics.median(row.direct) * 1e3:>10.2f}"
    line += f" {statistics.median(row.ours) * 1e3:>8.2f} {statistics.median(row.added):>9.2f}"
    print(f"{line} {_quantile(row.added, 0.9):>9.2f} {row.cpu_ms:>11.3f}", flush=True)


def summary(rows: list[Row]) -> None:
    """The closing lines: how a call's CPU follows the context (same tail) and the new tokens (same context)."""
    for name in dict.fromkeys(r.harness for r in rows):
        mine = [r for r in rows if r.harness == name]
        for tail in dict.fromkeys(r.tail for r in mine):
            same = sorted((r for r in mine if r.tail == tail), key=lambda r: r.context)
            if len(same) > 1:
                low, high = same[0], same[-1]
                print(
                    f"{name}, ~{statistics.mean(low.new):.0f} new tokens a call: {high.cpu_ms / low.cpu_ms:.2f}x the CPU "
                    f"at {statistics.mean(high.contexts):.0f} tokens of context as at {statistics.mean(low.contexts):.0f} "
                    f"(added p50 {statistics.median(low.added):.2f} -> {statistics.median(high.added):.2f} ms)"
                )
        for context in dict.fromkeys(r.context for r in mine):
            same = sorted((r for r in mine if r.context == context), key=lambda r: statistics.mean(r.new))
            if len(same) > 1:
                low, high = same[0], same[-1]
                more = statistics.mean(high.new) - statistics.mean(low.new)
                print(
                    f"{name}, {context} context: {(high.cpu_ms - low.cpu_ms) * 1e3 / more:.1f} us of CPU per new "
                    f"token ({statistics.mean(low.new):.0f} -> {statistics.mean(high.new):.0f} new tokens a call: "
                    f"{low.cpu_ms:.2f} -> {high.cpu_ms:.2f} ms)"
                )


def answer_ids(name: str) -> list[int]:
    """The tiny model's tokens for one hermes call of tool ``name`` (``COMMAND``) and its end of turn."""
    from rollwire.proxy.app import model_folder
    from rollwire.proxy.render import Renderer
    from rollwire.settings import Settings

    settings = Settings()
    renderer = Renderer.from_folder(model_folder(settings.proxy, settings.home))
    text = f"<tool_call>\n{json.dumps({'name': name, 'arguments': COMMAND})}\n</tool_call>"
    return renderer.encode(text) + renderer.encode(renderer.end_text)


def chars_per_token() -> float:
    """Characters of ``file_text`` per token of the tiny model's tokenizer."""
    from rollwire.proxy.app import model_folder
    from rollwire.proxy.render import Renderer
    from rollwire.settings import Settings

    settings = Settings()
    renderer = Renderer.from_folder(model_folder(settings.proxy, settings.home))
    text = file_text(2000, 1, 3.0)
    return len(text) / len(renderer.encode(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--contexts", type=int, nargs="+", default=[32768, 65536, 131072], help="tokens (default 32768 65536 131072)"
    )
    parser.add_argument(
        "--tails", type=int, nargs="+", default=[100, 1000], help="tokens of tool result a measured call adds"
    )
    parser.add_argument("--calls", type=int, default=20, help="measured calls a row (default 20)")
    parser.add_argument("--grow-tokens", type=int, default=1500, help="tokens of each growing turn's tool result")
    parser.add_argument(
        "--harness", nargs="+", choices=["claude-code", "synthetic"], default=None,
        help="whose requests (default: both, claude-code where `claude` is installed)",
    )  # fmt: skip
    args = parser.parse_args()
    names = args.harness or (["synthetic", "claude-code"] if shutil.which("claude") else ["synthetic"])
    server_cores, load_cores = bench._cores()
    ratio = chars_per_token()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as running:
        captured = capture_claude_code(Path(tmp)) if "claude-code" in names else None
        up = bench._port()
        stub = bench.stub_argv(up, answer_ids("Bash")) + [str(2 * max(args.contexts))]  # unpaced, a long context
        running.enter_context(bench.process(stub, f"http://127.0.0.1:{up}/v1/models", load_cores))
        port, admin_port = bench._port(), bench._port()
        argv = bench.rollwire_argv(port, up, Path(tmp) / "context.db", admin_port=admin_port)
        proxy = running.enter_context(bench.process(argv, f"http://127.0.0.1:{port}/health", server_cores))
        admin = running.enter_context(
            httpx.Client(base_url=f"http://127.0.0.1:{admin_port}", headers={"Authorization": "Bearer bench"})
        )
        os.sched_setaffinity(0, load_cores)  # this process is the client
        if captured:
            system = captured.get("system")
            chars = sum(len(b.get("text", "")) for b in system) if isinstance(system, list) else len(system or "")
            print(
                f"claude-code: Claude Code's first request (Anthropic Messages), {chars} characters of system prompt, "
                f"{len(captured['tools'])} tools ({len(json.dumps(captured['tools']))} characters)"
            )
        if "synthetic" in names:
            print("synthetic: bench/proxy.py's harness (Chat Completions), 16,000 characters of guidance, 20 tools")

        def harness(name: str) -> Harness:
            return ClaudeCode(captured) if name == "claude-code" and captured else Synthetic()

        async def measure() -> list[Row]:
            proxy_conn, stub_conn = Conn("127.0.0.1", port, ""), Conn("127.0.0.1", up, "")
            kinds = [(c, n, t) for c in args.contexts for n in names for t in args.tails]
            paths = bench.rollouts(admin, len(kinds) + len(names))
            for name, rollout in zip(names, paths[len(kinds) :]):  # warm: imports, first connections, memos
                warm = harness(name)
                opened, _ = warm.answered(await proxy_conn.post(f"/{rollout}{warm.path}", warm.body(None)))
                for i in range(5):
                    warm.answered(await proxy_conn.post(f"/{rollout}{warm.path}", warm.body(file_text(200, i, ratio))))
                print(f"{name}: its opening request is {opened} tokens", flush=True)
            print(HEAD, flush=True)
            rows = []
            for (context, name, tail), rollout in zip(kinds, paths):
                row = await run_row(
                    harness(name), rollout, context, tail, args, proxy_conn, stub_conn, proxy.pid, ratio
                )
                if row is None:
                    print(f"{name:<11} {context:>7} none: its opening request alone is longer", flush=True)
                    continue
                show(row)
                rows.append(row)
            return rows

        rows = event_loop.run(measure())
        summary(rows)
        print(
            "mean: the measured calls' mean prompt (tokens); new/call: what each adds to the call before (the tail the "
            "proxy renders); turns: calls that grew the conversation first; machine shared with other work"
        )


if __name__ == "__main__":
    main()
