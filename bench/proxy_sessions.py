"""Thousands of sessions on one proxy process: N concurrent multi-turn streamed tool conversations, each on a
kept-alive connection of its own, against the paced stub: straight to it ("direct") and through `rollwire proxy`.

    python bench/proxy_sessions.py                                  # 1,024 and 4,096 sessions, ~6 minutes
    python bench/proxy_sessions.py --sessions 8192 --turns 2        # past what one process answers
    python bench/proxy_sessions.py --sessions 256 1024 4096 --turns 4 --think-ms 20000 --pace-ms 20
    python bench/proxy_sessions.py --system-chars 16000 --tools 20  # harness-sized prompts (more RSS a session)

A session is one agent: it opens its connection, sends its conversation (``bench/proxy.py``'s: system, task, then
a tool call and its result per turn) with ``"stream": true``, reads the answer to its end, runs "the tool" for a
think time (uniform in 0.5-1.5x ``--think-ms``) and sends the next turn; after ``--turns`` calls it closes its
connection. Sessions start spread over one think time, so calls arrive at a steady rate from the first second
rather than all of them at once; each holds its connection open all along (in ``rollwire proxy``: a connection,
a rollout, its spliced calls in memory), so the proxy holds N client connections at once, and an upstream one per
call in flight. The stub samples a token every ``--pace-ms`` and streams each in an HTTP chunk of its own, as an
engine does: every call streams for ~29 tokens x pace. The direct row runs the same sessions, seeds and think times
against the stub's ``/v1/completions`` (prompts as long as the proxy's), so ``added`` (rollwire's percentile minus
direct's, p50 and p99) is the latency the proxy adds at that many sessions.

Columns: ``calls/s`` offered and answered (the sessions' pace, not a limit of the proxy), ``in flight`` the mean
number of calls in flight (summed latency over wall time) and at most, ``cpu ms/call`` the proxy's user + system
CPU time over the row per call (from /proc), ``RSS MiB`` the proxy's resident memory before the row and its peak
during it, ``fds`` its most open file descriptors during the row (sampled every 0.2 s), ``errors`` calls that got
no whole 200 answer (the first few reasons follow the table), ``others`` the cores the machine's other work kept
busy during the row (all busy time less the bench's processes: on a shared machine, a row with a large figure
there measured the neighbours as much as the proxy). The proxy runs from the first row to the last, so
rows run in the order given and the peak RSS of a row includes what earlier rows left in its caches.

Where the limits are: each session holds a client connection and each call in flight an upstream one, so the
proxy needs about sessions + in-flight + a few dozen file descriptors. `rollwire` raises its soft ``RLIMIT_NOFILE``
to the hard limit at start (``rollwire.app.open_files``); the bench's own processes (stub, load generator)
raise theirs the same way, and the proxy starts with the soft limit this shell gives (``ulimit -Sn``), so a run
under ``ulimit -Sn 1024`` shows the proxy raising its own. The header prints the proxy's limit as it serves.
The calls' rate is set by the sessions' think time and the pace: the proxy's CPU a call (``cpu ms/call``) over
a core's 1,000 ms is the rate one process can answer (~300 of these calls a second, ~3 ms each: 8,192 sessions
at the default think time offer that and saturate it, with no error); above about half of it, queueing shows in
p99. Nothing else gave out first at 8,192 sessions: memory (~450 MiB), descriptors (~2,600), the store's writer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import event_loop
import httpx
from proxy_load import Conn, Conversation, harness_tools, system_prompt

import proxy as bench
from rollwire.app.open_files import raise_open_files_limit

CALL_TIMEOUT_S = 120.0
"""A call that takes longer is an error (a stalled proxy should not hang the row)."""
WARM_SESSIONS = 8
"""Sessions the proxy answers before its first row (imports, first connections, caches), not counted."""


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def nofile_limit(pid: int) -> str:
    """``pid``'s open-files limit as /proc says it: soft / hard."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return f"{soft} / {hard}"
    return "?"


@contextlib.contextmanager
def soft_nofile(soft: int) -> Iterator[None]:
    """The soft open-files limit set to ``soft`` meanwhile (a child started inside inherits it)."""
    was = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, was[1]), was[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, was)


class Sampler(bench.Watcher):
    """The proxy's RSS and open descriptors, sampled on a thread while a row runs: the peaks."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        super().__init__(every_s)
        self.pid = pid
        self.rss = self.fds = 0.0

    def read(self) -> None:
        self.rss, self.fds = max(self.rss, rss_mib(self.pid)), max(self.fds, open_fds(self.pid))


# --- the load generator (its own process: ``python bench/proxy_sessions.py --load -``, the spec on stdin) ---------


def _direct_bodies(spec: dict[str, Any]) -> list[bytes]:
    """The completions the proxy would send the stub at each turn (``proxy_load``'s direct row's prompts)."""
    extra = spec.get("system_chars", 0)
    return [
        json.dumps(
            {
                "model": "stub",
                "prompt": [1000] * (extra // 4) + bench.PROMPT * (t + 1),
                "max_tokens": 64,
                "return_token_ids": True,
                "logprobs": 0,
                "stream": True,
            }
        ).encode()
        for t in range(spec["turns"])
    ]


async def sessions_load(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec["sessions"]`` sessions (``paths``: one each for chat, one for all direct); what they measured."""
    rng = random.Random(spec.get("seed", 0))
    think_s, turns, n = spec["think_ms"] / 1e3, spec["turns"], spec["sessions"]
    ramp_s = spec.get("ramp_s", think_s)
    chat = spec["kind"] == "chat"
    system, tools = system_prompt(spec.get("system_chars", 0)), harness_tools(spec.get("tools", 1) - 1)
    direct = [] if chat else _direct_bodies(spec)
    plans = [(rng.uniform(0, ramp_s), [think_s * rng.uniform(0.5, 1.5) for _ in range(turns - 1)]) for _ in range(n)]
    latencies: list[float] = []
    errors: list[str] = []
    started: list[float] = []
    """When each latency's call started (seconds into the row)."""
    flying = most = 0

    async def session(i: int, delay: float, thinks: list[float]) -> None:
        nonlocal flying, most
        await asyncio.sleep(delay)
        path = spec["paths"][i] if chat else spec["paths"][0]
        conn = Conn(spec["host"], spec["port"], spec.get("headers", ""))
        conv = Conversation(path, system, tools, True)
        try:
            for turn in range(turns):
                body = conv.body() if chat else direct[turn]
                flying += 1
                most = max(most, flying)
                start = time.perf_counter()
                try:
                    async with asyncio.timeout(CALL_TIMEOUT_S):
                        data = await conn.post(path, body)
                    latencies.append(time.perf_counter() - start)
                    started.append(start - begun)
                    if chat:
                        conv.answered(data)
                except (Exception, SystemExit) as exc:  # noqa: BLE001  (counted; the session ends)
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    return
                finally:
                    flying -= 1
                if turn < turns - 1:
                    await asyncio.sleep(thinks[turn])
        finally:
            if conn.writer is not None:
                conn.writer.close()

    begun = time.perf_counter()
    await asyncio.gather(*(session(i, d, t) for i, (d, t) in enumerate(plans)))
    wall = time.perf_counter() - begun
    return {
        "latencies_ms": [x * 1e3 for x in latencies], "started_s": started, "wall_s": wall, "errors": errors,
        "most_in_flight": most,
    }  # fmt: skip


# --- the driver ----------------------------------------------------------------------------------------------------


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has been busy (user, nice, system, irq, softirq, steal) since boot."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


class Result:
    """One row: the load generator's latencies, and what the machine's other work took meanwhile (``others``:
    cores busy with anything but the bench's own processes, the figure that says a row ran on a loaded machine)."""

    def __init__(self, out: dict[str, Any], others: float) -> None:
        self.latencies = sorted(out["latencies_ms"])
        self.wall, self.errors, self.most = out["wall_s"], out["errors"], out["most_in_flight"]
        self.others = others
        self.p50 = statistics.median(self.latencies) if self.latencies else float("nan")
        at = min(len(self.latencies) - 1, int(len(self.latencies) * 0.99))
        self.p99 = self.latencies[at] if self.latencies else float("nan")
        self.in_flight = sum(self.latencies) / 1e3 / self.wall

    def line(self, n: int, name: str, direct: Result | None) -> str:
        answered = len(self.latencies)
        line = f"{n:>8} {name:<9} {answered:>6} {len(self.errors):>6} {answered / self.wall:>7.0f}"
        line += f" {self.in_flight:>5.0f}/{self.most:<4} {self.p50:>8.1f} {self.p99:>8.1f}"
        if direct is not None:
            line += f" {self.p50 - direct.p50:>9.1f} {self.p99 - direct.p99:>9.1f}"
        else:
            line += f" {'':>9} {'':>9}"
        return line + f" {self.others:>6.2f}"


def run_load(spec: dict[str, Any], cores: set[int], servers: list[int]) -> Result:
    """One row's load (its own process, pinned to ``cores``), and the machine's other load meanwhile (all but the
    load generator and the ``servers`` processes)."""
    ours = sum(bench.cpu_seconds(pid) for pid in servers)
    busy = machine_busy_s()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [sys.executable, __file__, "--load", "-"]  # the spec on stdin: thousands of paths outrun a command line
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, cores)
    out, err = proc.communicate(json.dumps(spec), timeout=1800)
    if proc.returncode != 0:
        last = next((line for line in reversed(err.splitlines()) if line.strip()), "no output")
        raise bench.LoadFailed(f"load generator exited {proc.returncode}: {last.strip()}")
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = done.ru_utime + done.ru_stime - children.ru_utime - children.ru_stime
    ours = sum(bench.cpu_seconds(pid) for pid in servers) - ours + load
    result = json.loads(out)
    return Result(result, max(0.0, machine_busy_s() - busy - ours) / result["wall_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1024, 4096], help="default 1024 4096")
    parser.add_argument("--turns", type=int, default=3, help="calls per session (default 3)")
    parser.add_argument(
        "--think-ms", type=float, default=20_000, help="mean time between a session's calls (default 20000)"
    )
    parser.add_argument("--pace-ms", type=float, default=20.0, help="the stub samples a token every N ms (default 20)")
    parser.add_argument("--system-chars", type=int, default=0, help="guidance added to the system prompt (default 0)")
    parser.add_argument("--tools", type=int, default=1, help="tool definitions sent with every call (default 1)")
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        spec = json.loads(sys.stdin.read() if args.load == "-" else args.load)
        print(json.dumps(event_loop.run(sessions_load(spec))))
        return
    if args.turns < 1 or args.tools < 1:
        parser.error("--turns and --tools must be at least 1")
    shell_soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    raise_open_files_limit()  # as rollwire's servers do: the stub and load generator hold a connection a session
    server_cores, load_cores = bench._cores()
    ids = bench.tool_call_ids()
    base = {"host": "127.0.0.1", "turns": args.turns, "think_ms": args.think_ms, "system_chars": args.system_chars}
    base["tools"] = args.tools
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as running:
        up = bench._port()
        stub_argv = bench.stub_argv(up, ids, args.pace_ms)
        stub = running.enter_context(bench.process(stub_argv, f"http://127.0.0.1:{up}/v1/models", load_cores))
        port, admin_port = bench._port(), bench._port()
        argv = bench.rollwire_argv(port, up, Path(tmp) / "sessions.db", admin_port=admin_port)
        with soft_nofile(shell_soft):  # the proxy starts as this shell would start it
            proxy = running.enter_context(bench.process(argv, f"http://127.0.0.1:{port}/health", server_cores))
        admin = running.enter_context(
            httpx.Client(base_url=f"http://127.0.0.1:{admin_port}", headers={"Authorization": "Bearer bench"})
        )
        servers = [stub.pid, proxy.pid]
        paths = [f"/{p}/chat/completions" for p in bench.rollouts(admin, WARM_SESSIONS)]
        warm = {**base, "kind": "chat", "port": port, "sessions": WARM_SESSIONS, "paths": paths, "think_ms": 0}
        run_load(warm, load_cores, servers)
        print(
            f"{args.turns} streamed calls a session, think {args.think_ms / 1e3:g} s (x0.5-1.5), a token every "
            f"{args.pace_ms:g} ms ({len(ids)} tokens an answer); proxy's open-files limit (soft / hard): "
            f"{nofile_limit(proxy.pid)} (started with soft {shell_soft}); proxy on core(s) {sorted(server_cores)}, "
            f"stub and load generator on {sorted(load_cores)}",
            flush=True,
        )
        head = f"{'sessions':>8} {'path':<9} {'calls':>6} {'errors':>6} {'calls/s':>7} {'in flight':>10}"
        head += f" {'p50 ms':>8} {'p99 ms':>8} {'added p50':>9} {'added p99':>9} {'others':>6} {'cpu ms/call':>11}"
        print(f"{head} {'RSS MiB before/peak':>19} {'fds':>5}", flush=True)
        reasons: list[str] = []
        for n in args.sessions:
            spec = {**base, "sessions": n, "seed": n}
            try:
                direct = run_load(
                    {**spec, "kind": "direct", "port": up, "paths": ["/v1/completions"]}, load_cores, servers
                )
            except bench.LoadFailed as exc:
                print(f"{n:>8} {'direct':<9} failed: {exc}", flush=True)
                continue
            print(direct.line(n, "direct", None), flush=True)
            paths = [f"/{p}/chat/completions" for p in bench.rollouts(admin, n)]
            before_cpu, before_rss = bench.cpu_seconds(proxy.pid), rss_mib(proxy.pid)
            try:
                with Sampler(proxy.pid) as sampled:
                    ours = run_load({**spec, "kind": "chat", "port": port, "paths": paths}, load_cores, servers)
            except bench.LoadFailed as exc:
                print(f"{n:>8} {'rollwire':<9} failed: {exc}", flush=True)
            else:
                cpu = (bench.cpu_seconds(proxy.pid) - before_cpu) / max(1, len(ours.latencies)) * 1e3
                print(
                    f"{ours.line(n, 'rollwire', direct)} {cpu:>11.3f} {before_rss:>9.0f}/{sampled.rss:<9.0f} "
                    f"{sampled.fds:>5.0f}",
                    flush=True,
                )
                reasons += [f"{n} sessions: {e}" for e in dict.fromkeys(ours.errors)][:5]
            if proxy.poll() is not None:
                print(f"rollwire {bench._exited(proxy.returncode)}: the rows after this one are not run", flush=True)
                break
        print("others: cores busy with the machine's other work during the row (not the bench's processes)")
        for reason in reasons:
            print(f"  error: {reason}")


if __name__ == "__main__":
    main()
