"""Proxy cost, fairly measured: the same multi-turn tool conversations straight to a stub upstream, through
`rollwire proxy` (recording on) and through LiteLLM's proxy, with each server's own CPU time per request.

    python bench/proxy.py [--requests 200] [--concurrency 1 16 64 256] [--workers 1 2] [--litellm PATH]
    python bench/proxy.py --pace-ms 1 --requests 200      # tokens arrive one at a time, as from an engine
    python bench/proxy.py --system-chars 16000            # a system prompt as long as a real harness's
    python bench/proxy.py --tools 20                      # as many tool definitions as a real harness sends
    python bench/proxy.py --passthrough                   # and the server stack alone, doing none of rollwire's work
    python bench/proxy.py --concurrency 1 --modes json --rounds 5   # one kind of row, five samples, pooled

The stub upstream (``proxy_stub.py``) and the load generator (``proxy_load.py``) are bare asyncio HTTP in
processes of their own, pinned to other cores than the proxy where the machine has them, so the "direct" row
(the load generator against the stub alone) runs far faster than any proxy row: the proxy rows measure the
proxy. Every call carries the conversation so far (system, task, then tool call + tool result per turn,
``--turns`` calls per rollout; a row sends at least concurrency x turns requests, so every worker
runs whole conversations), so the proxy splices, renders only the new tail, parses a hermes tool call
and commits the call to its SQLite store before answering. Rows come non-streamed ("json") and streamed
(one token per upstream chunk). ``cpu ms/req`` is the server processes' user + system CPU time (from
/proc, children included) over the row divided by its requests: the per-core figure that the machine's
other load does not distort; ``req/cpu-s`` is its inverse, and the closing lines compare rollwire's with
LiteLLM's. ``--workers 2`` adds rows for `rollwire proxy --workers 2` (two processes, one store), with the
connections the busiest worker held during the row (``max share``, read from /proc: the load generator keeps
one connection per concurrent conversation, and the kernel spreads them over the workers). ``kB/call``
is what rollwire's store keeps for each call of the row (request, response, prompt and sampled ids, logprobs:
the columns that grow with a conversation), read from its database after the row.

By default the stub sends each answer in one write, so a streamed answer's token chunks reach the proxy
together. An engine samples one token at a time: ``--pace-ms N`` makes the stub sample a token every N ms and
send each streamed one as its own HTTP chunk (as vLLM does), so the rows count what a proxy does per token that
arrives on its own. Wall-clock rates then measure the pace; the CPU columns still measure the servers.

The conversations open with a one-line system prompt. A real harness sends 10-20k characters of guidance with
every call (Claude Code, Codex): ``--system-chars N`` adds that much, so the rows count what a proxy does per
character of a prompt that every call repeats. ``--tools N`` likewise sends N tool definitions (~1.5k characters
each) where the default sends one.

``--passthrough`` adds rows for ``proxy_passthrough.py``: uvicorn, Starlette and the proxy's upstream client as
`rollwire proxy` runs them, passing each call through untouched (nothing rendered, tokenized, parsed or recorded).
Its CPU time is what a call costs before rollwire does anything, and the closing lines split rollwire's row into
that and rollwire's own work.

LiteLLM lives in its own venv (``.venv-bench/litellm``, git-ignored; create it with
``python3 -m venv .venv-bench/litellm && .venv-bench/litellm/bin/pip install 'litellm[proxy]'``): installing
it into the project's environment would change packages the project shares. Without it its rows say so.

Every server runs from the first row to the last, and each concurrency and mode runs direct, then every server
in turn: a shared machine's speed can drift by a fifth within minutes, and rows of a kind that run minutes
apart would compare the hours, not the servers. A server's own cost moves too (LiteLLM's json call at
concurrency 1 cost 8.5-12.5 ms in runs of one hour), so one row pair is one sample: ``--rounds N`` runs each
concurrency and mode N times in turn and closes with the pooled figures (every request of every round) and the
rounds' range.

A row that fails (a server refusing or dropping connections) says why, and the others still run. A server
that died under a row (LiteLLM 1.108.7 once segfaulted at 16 concurrent calls) is named with how it exited and
started again, so the rows after it measure a live one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import httpx
from connections import accepted_by

HERE = Path(__file__).resolve().parent
LITELLM = HERE.parent / ".venv-bench" / "litellm" / "bin" / "litellm"
LITELLM_KEY = "sk-bench"
PROMPT = list(range(1000, 1300))
"""Direct rows' prompt ids per turn (about what the proxy sends the stub per turn)."""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cores() -> tuple[set[int], set[int]]:
    """(cores for the server under test, cores for stub + load generator): split where there are two or more."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(cores), set(cores)
    half = len(cores) // 2
    return set(cores[half:]), set(cores[:half])


def _tree(pid: int) -> list[int]:
    pids, i = [pid], 0
    while i < len(pids):
        try:
            tasks = Path(f"/proc/{pids[i]}/task").iterdir()
            for task in tasks:
                pids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
        i += 1
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _wait_healthy(url: str, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2, headers={"Authorization": f"Bearer {LITELLM_KEY}"}).status_code < 500:
                return
        except httpx.TransportError:
            time.sleep(0.05)  # a subprocess's port: nothing to wait on but polling
    raise SystemExit(f"{url} never answered")


@contextmanager
def process(
    argv: list[str], health: str, cores: set[int], env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[Any]]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        os.sched_setaffinity(proc.pid, cores)
        _wait_healthy(health, proc)
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def tool_call_ids() -> list[int]:
    """The tiny model's tokens for one hermes tool call and its end of turn: what the stub "samples"."""
    from rollwire.proxy.app import model_folder
    from rollwire.proxy.render import Renderer
    from rollwire.settings import Settings

    settings = Settings()
    renderer = Renderer.from_folder(model_folder(settings.proxy, settings.home))
    text = '<tool_call>\n{"name": "run_shell", "arguments": {"command": "ls"}}\n</tool_call>'
    return renderer.encode(text) + renderer.encode(renderer.end_text)


class LoadFailed(Exception):
    """The load generator gave up on a row (a server closed or refused its connections): the row says why and the
    bench goes on with the others."""


def load(spec: dict[str, Any], cores: set[int]) -> tuple[list[float], float]:
    argv = [sys.executable, str(HERE / "proxy_load.py"), json.dumps(spec)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, cores)
    out, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        last = next((line for line in reversed(err.splitlines()) if line.strip()), "no output")
        raise LoadFailed(f"load generator exited {proc.returncode}: {last.strip()}")
    result = json.loads(out)
    return result["latencies_ms"], result["wall_s"]


class Row:
    def __init__(self, latencies: list[float], wall: float, cpu: float | None) -> None:
        self.latencies, self.wall, self.cpu = latencies, wall, cpu
        ordered = sorted(latencies)
        self.p50 = statistics.median(ordered)
        self.p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        self.rate = len(ordered) / wall
        self.cpu_ms = None if cpu is None else cpu / len(ordered) * 1e3

    @classmethod
    def pooled(cls, rows: list[Row]) -> Row:
        """Rounds of one row as one: every latency, the summed time and CPU (so each request weighs the same)."""
        cpus = [r.cpu for r in rows]
        cpu = None if any(c is None for c in cpus) else sum(c for c in cpus if c is not None)
        return cls([t for r in rows for t in r.latencies], sum(r.wall for r in rows), cpu)


def measure(spec: dict[str, Any], server: int | None, cores: set[int]) -> Row:
    before = cpu_seconds(server) if server else 0.0
    latencies, wall = load(spec, cores)
    return Row(latencies, wall, cpu_seconds(server) - before if server else None)


class Watcher(ABC):
    """``with`` a watcher: ``read()`` every ``every_s`` while the block runs, on a thread of this process (not the
    servers'), from the block's start to its end."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @abstractmethod
    def read(self) -> None:
        """One reading, kept on ``self``."""

    def _watch(self) -> None:
        while not self._done.is_set():
            self.read()
            self._done.wait(self.every_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


class WorkerSpread(Watcher):
    """``with WorkerSpread(port, parent):`` which of ``parent``'s worker processes held each connection to ``port``
    while the block ran (read from /proc a few times a second)."""

    def __init__(self, port: int, parent: int) -> None:
        super().__init__(every_s=0.25)
        self.port, self.parent = port, parent
        self.held: dict[int, int] = {}
        """The worker's pid by the client's port, for every connection seen."""

    def read(self) -> None:
        children = Path(f"/proc/{self.parent}/task/{self.parent}/children")
        with contextlib.suppress(OSError):
            self.held.update(accepted_by(self.port, [int(p) for p in children.read_text().split()]))

    def max_share(self) -> str:
        """The busiest worker's connections / all of them (and as a share), or "-" when none was seen."""
        counts = Counter(self.held.values())
        if not counts:
            return "-"
        top, total = max(counts.values()), sum(counts.values())
        return f"{top}/{total} {top / total:.0%}"


def stub_argv(port: int, ids: list[int], pace_ms: float = 0.0) -> list[str]:
    """The stub upstream (``proxy_stub.py``) on ``port``, sampling ``ids`` (``tool_call_ids``), one token every
    ``pace_ms`` (0: all at once)."""
    return [sys.executable, str(HERE / "proxy_stub.py"), str(port), ",".join(map(str, ids)), str(pace_ms)]


def rollwire_argv(
    port: int, up_port: int, db: Path, workers: int = 1, admin_port: int | None = None, cli: str = "rollwire.app.cli"
) -> list[str]:
    """`rollwire proxy` as the bench runs it: on ``port``, in front of the stub, recording to ``db``, its admin API
    on ``admin_port`` (``Server.admin``; without one, the proxy's default) with the operator key ``bench`` (a
    throwaway key, so on the command line); ``cli`` is the module that runs the CLI."""
    argv = [sys.executable, "-m", cli, "--log-level", "WARNING", "proxy", "--port", str(port)]
    argv += ["--upstream", f"http://127.0.0.1:{up_port}", "--db", f"sqlite:///{db}"]
    argv += ["--admin-port", str(admin_port)] if admin_port is not None else []
    return argv + ["--operator-key", "bench", "--workers", str(workers)]


def rollouts(admin: httpx.Client, count: int) -> list[str]:
    run = admin.post("/admin/v1/runs", json={"name": "bench"}).json()["id"]
    made = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": count})
    made.raise_for_status()
    return [r["base_url"].split("//", 1)[1].split("/", 1)[1] for r in made.json()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--requests", type=int, default=200, help="requests per row, at least concurrency x turns (default 200)"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256], help="default 1 16 64 256")
    parser.add_argument("--turns", type=int, default=3, help="calls per conversation (default 3)")
    parser.add_argument("--modes", nargs="+", default=["json", "stream"], choices=["json", "stream"])
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1], help="rollwire proxy --workers values (default 1)"
    )
    parser.add_argument("--litellm", default=None, help=f"LiteLLM proxy executable (default {LITELLM} if present)")
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's rows")
    parser.add_argument(
        "--passthrough",
        action="store_true",
        help="add rows for the server stack alone (bench/proxy_passthrough.py): what a call costs before rollwire's own work",
    )
    parser.add_argument(
        "--pace-ms", type=float, default=0.0, help="the stub samples one token every N ms (default 0: all at once)"
    )
    parser.add_argument(
        "--system-chars", type=int, default=0, help="characters of guidance added to the system prompt (default 0)"
    )
    parser.add_argument(
        "--tools", type=int, default=1, help="tool definitions sent with every call, ~1.5k characters each (default 1)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each concurrency and mode's rows this many times in turn, then pool them (default 1)",
    )
    args = parser.parse_args()
    if args.tools < 1:
        parser.error("--tools must be at least 1: every conversation calls a tool")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    lite_bin = None if args.no_litellm else (args.litellm or (str(LITELLM) if LITELLM.exists() else None))
    server_cores, load_cores = _cores()
    ids = tool_call_ids()
    with tempfile.TemporaryDirectory() as tmp:
        up_port = _port()
        with process(stub_argv(up_port, ids, args.pace_ms), f"http://127.0.0.1:{up_port}/v1/models", load_cores):
            table(args, tmp, up_port, lite_bin, server_cores, load_cores)


def table(args: argparse.Namespace, tmp: str, up_port: int, lite_bin: str | None, sc: set[int], lc: set[int]) -> None:
    base = {"host": "127.0.0.1", "turns": args.turns, "requests": args.requests, "prompt": PROMPT}
    base["system_chars"] = args.system_chars
    base["tools"] = args.tools
    results: dict[tuple[int, str, str], list[Row | LoadFailed]] = {}
    head = f"{'conc':>5} {'mode':<6} {'path':<11} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'cpu ms/req':>10}"
    print(f"{head} {'req/cpu-s':>9} {'added p50':>9} {'direct/x':>8} {'kB/call':>7} {'max share':>13}", flush=True)

    def show(c: int, mode: str, name: str, spec: dict[str, Any], server: Server | None) -> None:
        spread = WorkerSpread(server.port, server.pid) if server and server.workers > 1 else None
        try:
            with spread or contextlib.nullcontext():
                row = measure(spec, server.pid if server else None, lc)
        except LoadFailed as exc:
            results.setdefault((c, mode, name), []).append(exc)
            print(f"{c:>5} {mode:<6} {name:<11} failed: {exc}", flush=True)
            return
        results.setdefault((c, mode, name), []).append(row)
        d = results.get((c, mode, "direct"), [None])[-1]  # this round's
        d = d if isinstance(d, Row) else None
        cpu = f"{'':>10} {'':>9}"  # direct: no server of ours to measure
        if row.cpu_ms is not None:  # a short row may finish inside one clock tick of CPU time: 0, printed as such
            cpu = f"{row.cpu_ms:>10.3f} {1e3 / row.cpu_ms if row.cpu_ms else math.inf:>9.0f}"
        extra = f"{row.p50 - d.p50:>9.2f} {d.rate / row.rate:>8.1f}" if d and name != "direct" else ""
        stored = server.stored_per_call() if server else None
        extra += f" {stored / 1e3:>7.1f}" if stored is not None else ""
        extra += f" {spread.max_share():>13}" if spread else ""
        print(f"{c:>5} {mode:<6} {name:<11} {row.p50:>8.2f} {row.p99:>8.2f} {row.rate:>8.0f} {cpu} {extra}", flush=True)

    servers: list[Server] = []
    for w in args.workers:
        port, admin = _port(), _port()
        db = Path(tmp) / f"bench{w}.db"
        cores = sc | lc if w > 1 else sc  # several workers: every core
        name = "rollwire" if w == 1 else f"rollwire x{w}"
        argv = rollwire_argv(port, up_port, db, w, admin)
        rollwire = Server(name, argv, port, "", "/health", cores, admin_port=admin, workers=w)
        rollwire.db = db
        servers.append(rollwire)
    if args.passthrough:
        port = _port()
        argv = [sys.executable, str(HERE / "proxy_passthrough.py"), str(port), f"http://127.0.0.1:{up_port}"]
        servers.append(Server("passthrough", argv, port, "", "/health", sc))
    if lite_bin:
        port = _port()
        config = f"{tmp}/litellm.yaml"
        Path(config).write_text(
            "model_list:\n  - model_name: stub\n    litellm_params:\n"
            f"      model: openai/stub\n      api_base: http://127.0.0.1:{up_port}/v1\n      api_key: none\n"
            f"general_settings:\n  master_key: {LITELLM_KEY}\n"
        )
        argv = [lite_bin, "--config", config, "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
        headers = f"authorization: Bearer {LITELLM_KEY}\r\n"
        servers.append(Server("litellm", argv, port, headers, "/health/liveliness", sc))
    with contextlib.ExitStack() as running:
        for server in servers:
            running.callback(server.stop)
            running.callback(server.admin.close)
            server.start()
        kinds = [(c, mode) for c in args.concurrency for mode in args.modes]
        for c, mode in (kind for kind in kinds for _ in range(args.rounds)):  # a kind's rounds back to back
            spec = {**base, "kind": "direct", "port": up_port, "paths": ["/v1/completions"], "concurrency": c}
            spec["requests"] = max(args.requests, c * args.turns)
            show(c, mode, "direct", {**spec, "stream": mode == "stream"}, None)
            for server in servers:
                spec = {**base, "kind": "chat", "port": server.port, "headers": server.headers, "concurrency": c}
                spec["requests"] = max(args.requests, c * args.turns)  # every worker runs whole conversations
                count = math.ceil(spec["requests"] / args.turns) + c
                paths = (
                    [f"/{p}/chat/completions" for p in rollouts(server.admin, count)]
                    if server.name.startswith("rollwire")
                    else ["/v1/chat/completions"] * count
                )
                spec = {**spec, "stream": mode == "stream", "paths": paths}
                if server.cold:  # warm: imports, first connections
                    with contextlib.suppress(LoadFailed):  # the row itself then says what fails
                        load({**spec, "requests": 2 * args.turns, "concurrency": 2, "paths": paths[-2:]}, lc)
                    spec["paths"], server.cold = paths[:-2], False
                    server.stored_per_call()  # the row counts its own calls, not these
                show(c, mode, server.name, spec, server)
                code = server.exited()
                if code is not None:  # it died under that row: the rows after it get a new one
                    print(f"{'':>5} {'':<6} {server.name:<11} {_exited(code)}: started again", flush=True)
                    server.stop()
                    server.start()
    summary(results, args)


class Server:
    """A server under test, started once for every row (so rows of each server alternate, and a machine whose
    speed drifts over the run slows each server's row of a kind alike), and again if it dies under one."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        headers: str,
        health: str,
        cores: set[int],
        env: dict[str, str] | None = None,
        admin_port: int | None = None,
        workers: int = 1,
    ) -> None:
        self.name, self.argv, self.port, self.headers, self.cores, self.env = name, argv, port, headers, cores, env
        self.workers = workers
        """Its worker processes (children of ``pid`` when more than one): the row shows how they shared its
        connections."""
        self.health = f"http://127.0.0.1:{port}{health}"
        self.cold = True
        """No row has run on this process yet (the first is preceded by a few warming calls)."""
        self._stack = contextlib.ExitStack()
        self._proc: subprocess.Popen[Any] | None = None
        self.admin = httpx.Client(
            base_url=f"http://127.0.0.1:{admin_port or port}", headers={"Authorization": "Bearer bench"}
        )
        """rollwire's admin API (its rollouts' URLs) on its admin listener, with the key the bench starts it with."""
        self.db: Path | None = None
        """rollwire's SQLite store (None for a server that keeps none)."""
        self._stored_up_to = 0
        """The last call id ``stored_per_call`` counted."""

    def start(self) -> None:
        self._proc = self._stack.enter_context(process(self.argv, self.health, self.cores, self.env))
        self.cold = True

    def stop(self) -> None:
        self._stack.close()

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def exited(self) -> int | None:
        """Its exit status if it has exited, else None."""
        return self._proc.poll() if self._proc is not None else None

    def stored_per_call(self) -> float | None:
        """Bytes the store keeps a call for the calls written since the last count (None: no store, no call).
        Read-only beside the running server: SQLite's WAL lets a reader see every commit without a lock."""
        if self.db is None:
            return None
        grows = ("request_json", "response_json", "prompt_ids", "completion_ids", "completion_logprobs")
        size = " + ".join(f"length(CAST({c} AS BLOB))" for c in grows)
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)) as conn:
            calls, stored, last = conn.execute(
                f"SELECT count(*), sum({size}), max(id) FROM modelcall WHERE id > ?", (self._stored_up_to,)
            ).fetchone()
        if not calls:
            return None
        self._stored_up_to = last
        return float(stored) / calls


def _exited(code: int) -> str:
    """A server's exit status in words: a signal by its name."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exited on {signal.Signals(-code).name}"
    return f"exited with status {code}"


def summary(results: dict[tuple[int, str, str], list[Row | LoadFailed]], args: argparse.Namespace) -> None:
    """The closing lines, each over every round of its concurrency and mode (pooled: ``Row.pooled``); with
    ``--rounds`` > 1 the rounds' own range follows the pooled figure."""

    def rows(c: int, mode: str, name: str) -> list[Row] | LoadFailed | None:
        found = results.get((c, mode, name))
        if not found:
            return None
        failed = [r for r in found if isinstance(r, LoadFailed)]
        return failed[0] if failed else [r for r in found if isinstance(r, Row)]

    def spread(values: list[float], unit: str) -> str:
        return f" (rounds: {min(values):.2f}-{max(values):.2f}{unit})" if len(values) > 1 else ""

    for c in args.concurrency:
        for mode in args.modes:
            ours, lite, direct = rows(c, mode, "rollwire"), rows(c, mode, "litellm"), rows(c, mode, "direct")
            if isinstance(ours, LoadFailed) or isinstance(lite, LoadFailed):
                print(f"{c:>5} {mode:<6} rollwire / LiteLLM: a row failed (see above); run it again")
            elif ours and lite and all(r.cpu_ms for r in ours + lite):
                ratio = Row.pooled(lite).cpu_ms / Row.pooled(ours).cpu_ms  # type: ignore[operator]
                each = [b.cpu_ms / a.cpu_ms for a, b in zip(ours, lite)]  # type: ignore[operator]
                print(f"{c:>5} {mode:<6} rollwire / LiteLLM requests per CPU-second: {ratio:.1f}x{spread(each, 'x')}")
            elif ours and not lite:
                print(f"{c:>5} {mode:<6} litellm: not run (--no-litellm, or not installed: see --litellm)")
            if args.rounds > 1 and isinstance(ours, list) and isinstance(direct, list) and ours:
                added = Row.pooled(ours).p50 - Row.pooled(direct).p50
                each = [a.p50 - d.p50 for a, d in zip(ours, direct)]
                print(f"{c:>5} {mode:<6} rollwire's added p50, pooled: {added:.2f} ms{spread(each, ' ms')}")
            bare = rows(c, mode, "passthrough")
            if isinstance(ours, list) and isinstance(bare, list) and ours and bare:
                whole, stack = Row.pooled(ours).cpu_ms, Row.pooled(bare).cpu_ms
                if whole is not None and stack is not None:
                    print(
                        f"{c:>5} {mode:<6} rollwire's own work: {whole - stack:.3f} of its {whole:.3f} CPU ms a call "
                        f"(stack: {stack:.3f})"
                    )
            for w in args.workers[1:]:
                more = rows(c, mode, f"rollwire x{w}")
                if isinstance(ours, list) and isinstance(more, list) and ours and more:
                    each = [b.rate / a.rate for a, b in zip(ours, more)]
                    print(
                        f"{c:>5} {mode:<6} rollwire --workers {w} / --workers 1 requests per second: "
                        f"{Row.pooled(more).rate / Row.pooled(ours).rate:.2f}x{spread(each, 'x')}"
                    )


if __name__ == "__main__":
    main()
