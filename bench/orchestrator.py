"""Rollouts scheduled per second: against an emulated Kubernetes API (kmock + fake kubelet) at several
concurrencies, and with the local runtime, a real ``python -m`` harness per rollout with the warm pool on and off,
each without and with the bubblewrap sandbox (the sandbox's start-up cost beside the unsandboxed figure).

    python bench/orchestrator.py [--rollouts N] [--concurrency 8 64 256] [--warm-rollouts N] [--warm-concurrency C]
        [--start-delay S] [--run-time S] [--local-rollouts N] [--local-concurrency C]

Loopback only. Kubernetes: each rollout is the full lifecycle (claim, Secret + Pod create, watch to the end,
log tail, delete, score, final state in a SQLite store) against kmock's emulator and a fake kubelet served by a
process of their own (an API server is never in the orchestrator's process; in one process the emulator's CPU
was counted as the orchestrator's). "CPU ms/rollout" is this process's (the orchestrator's) alone, "API CPU
ms/rollout" the emulated API server's and kubelet's. The warm-pool
table gives every new pod a modelled start (``--start-delay``: scheduling, image pull, container start) and
every harness a modelled run (``--run-time``, longer than a start, as real rollouts are), and compares start latency (``start()`` called -> harness running) with cold pods against a pool of ready pods. Local: each rollout is a process that imports what
the reference agent imports (the CLI parser, openai, mcp) and writes its answer; CPU is every process's own
(the orchestrator's children, the fork server's included), so the pool's one-off start-up is counted.
Sandboxed, each rollout also gets its bwrap namespaces, mounts, rlimits and the proxy/gateway relay (two
loopback endpoints; nothing listens behind them, as the harness calls neither); the sandboxed warm pool keeps
``warm_spares`` sandboxes ready ahead. A sandbox's CPU shows as ``-``: bwrap's monitor exits on its init's
report without reaping it, so the sandbox's CPU never reaches this process's children's rusage.
``--local-rollouts 0`` skips the local table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project root, for the tests' fake cluster

from rollwire.harness_adapters.base import Launch, RolloutContext  # noqa: E402
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings  # noqa: E402
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime  # noqa: E402
from rollwire.orchestrator.scheduler import Endpoints, RunPlan, Scheduler, TaskSpec  # noqa: E402
from rollwire.orchestrator.scoring import ExitCodeScorer  # noqa: E402
from rollwire.rollouts import RolloutBook  # noqa: E402
from rollwire.sandbox import probe  # noqa: E402
from rollwire.settings import KubernetesSettings, OrchestratorSettings  # noqa: E402
from rollwire.store.db import open_engine  # noqa: E402
from tests.orchestrator.fake_cluster import NAMESPACE, STATS_PATH  # noqa: E402


class OkAdapter:
    name = "bench"
    image = "img/ok"

    def launch(self, ctx: RolloutContext) -> Launch:
        return Launch(argv=("harness",), env={"OPENAI_BASE_URL": ctx.base_url}, image=self.image)


FAKE_CLUSTER = Path(__file__).resolve().parents[1] / "tests" / "orchestrator" / "fake_cluster.py"


@contextlib.asynccontextmanager
async def cluster_process(start_delay_s: float = 0.0, run_s: float = 0.0) -> AsyncIterator[str]:
    """The emulated API server and kubelet in a process of their own (as a real API server is): its URL."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(FAKE_CLUSTER), "--start-delay", str(start_delay_s), "--run-time", str(run_s),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line.startswith("READY "):
            raise RuntimeError(f"the fake cluster did not start: {line!r}")
        yield line.split()[1]
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def cluster_stats(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return dict((await http.get(url + STATS_PATH)).json())


async def one(
    rollouts: int, concurrency: int, folder: Path, warm_pool: int = 0, start_delay_s: float = 0.0, run_s: float = 0.0
) -> dict[str, float]:
    """One run: rollouts/s, peak pods, CPU ms per rollout of this process and of the API server's, start latencies."""
    children = _children_cpu()
    async with cluster_process(start_delay_s, run_s) as url:
        kube = KubernetesSettings(
            namespace=NAMESPACE, api_backoff_s=0.01, api_concurrency=min(64, concurrency), warm_pool=warm_pool
        )
        settings = OrchestratorSettings(concurrency=concurrency, deadline_s=120.0, kubernetes=kube)
        name = f"c{concurrency}-w{warm_pool}"
        book = RolloutBook(open_engine(f"sqlite:///{folder / f'{name}.db'}"))
        plan = RunPlan(run_id=f"bench-{name}", tasks=[TaskSpec("t", "p")], group_size=rollouts, harness="bench")
        async with KubernetesRuntime(kube, api_client_from_settings(kube, host=url)) as runtime:
            if warm_pool:
                await runtime.prewarm(plan.run_id, OkAdapter.image, settings.deadline_s)
            asked: dict[str, float] = {}
            start = runtime.start

            async def timed_start(job: Any) -> Any:
                began = time.monotonic()
                handle = await start(job)
                asked[handle.ref] = began
                return handle

            runtime.start = timed_start  # type: ignore[method-assign]
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=OkAdapter(), scorer=ExitCodeScorer(), settings=settings,
                endpoints=Endpoints("http://proxy:8000", "http://gateway:8001"),
            )  # fmt: skip
            cpu, started = time.process_time(), time.perf_counter()
            progress = await scheduler.run(plan)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert progress.finished == rollouts, progress
        stats = await cluster_stats(url)
    api_cpu = _children_cpu() - children  # the API server process, now exited
    latencies = sorted(stats["started"][ref] - asked[ref] for ref in asked)
    return {
        "rate": rollouts / elapsed, "peak": stats["peak"], "cpu_ms": 1000 * cpu / rollouts,
        "api_cpu_ms": 1000 * api_cpu / rollouts, "claimed": sum(ref.startswith("rw-warm-") for ref in asked),
        "p50": latencies[len(latencies) // 2], "p95": latencies[int(len(latencies) * 0.95)],
    }  # fmt: skip


REFERENCE_LIKE = """
from rollwire.app.cli.__main__ import build_parser
args = build_parser().parse_args(["agent", "--max-turns", "1", "Write cat to answer.txt."])
import openai, mcp  # what the reference agent's loop imports
from rollwire.harness_adapters.reference_agent import AgentConfig
AgentConfig(base_url="http://127.0.0.1:1/v1", mcp_url=None)
open("final_answer.txt", "w").write("ok")
"""


class ModuleAdapter:
    """``python -m harness`` from the workspace: the launch form the warm pool forks."""

    name = "bench-local"

    def launch(self, ctx: RolloutContext) -> Launch:
        files = {"harness.py": REFERENCE_LIKE}
        return Launch(argv=(sys.executable, "-m", "harness"), env={"OPENAI_BASE_URL": ctx.base_url}, files=files)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


LOOPBACK_ENDPOINTS = Endpoints("http://127.0.0.1:18000", "http://127.0.0.1:18001")
"""Bound only inside each sandbox's own network namespace (and relayed to unix sockets), never on this host."""


async def one_local(rollouts: int, concurrency: int, pool: bool, sandbox: bool, folder: Path) -> tuple[float, float]:
    """(rollouts per second, CPU seconds per rollout) for one local run."""
    name = f"{pool}-{sandbox}"
    settings = OrchestratorSettings(
        concurrency=concurrency, deadline_s=300.0, workspace_root=str(folder / f"ws-{name}"), warm_pool=pool,
        sandbox=sandbox,
    )  # fmt: skip
    book = RolloutBook(open_engine(f"sqlite:///{folder / f'local-{name}.db'}"))
    plan = RunPlan(run_id=f"local-{name}", tasks=[TaskSpec("t", "p")], group_size=rollouts, harness="bench")
    cpu, started = _children_cpu(), time.perf_counter()
    async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
        scheduler = Scheduler(
            book=book, runtime=runtime, adapter=ModuleAdapter(), scorer=ExitCodeScorer(), settings=settings,
            endpoints=LOOPBACK_ENDPOINTS,
        )  # fmt: skip
        progress = await scheduler.run(plan)
    elapsed = time.perf_counter() - started
    assert progress.finished == rollouts, [row.log_tail for row in book.rollouts(plan.run_id)][:1]
    return rollouts / elapsed, (_children_cpu() - cpu) / rollouts


def local_table(rollouts: int, concurrency: int) -> list[str]:
    why_not = probe("bwrap")
    sandboxes = (False, True) if why_not is None else (False,)
    rates: dict[tuple[bool, bool], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for sandbox in sandboxes:
            for pool in (False, True):
                rates[pool, sandbox] = asyncio.run(one_local(rollouts, concurrency, pool, sandbox, Path(tmp)))
    base = rates[False, False][0]
    lines = [
        f"{'local runtime':>14} {'sandbox':>8} {'rollouts':>9} {'rollouts/s':>11} {'CPU s/rollout':>14}"
        f" {'vs subprocess':>14} {'vs unsandboxed':>15}"
    ]
    for (pool, sandbox), (rate, cpu) in rates.items():
        mode, plain = "warm pool" if pool else "subprocess", rates[pool, False][0]
        cpu_text = "-" if sandbox else f"{cpu:.3f}"
        lines.append(
            f"{mode:>14} {'on' if sandbox else 'off':>8} {rollouts:>9} {rate:>11.2f} {cpu_text:>14}"
            f" {rate / base:>13.2f}x {rate / plain:>14.2f}x"
        )
    if why_not is not None:
        lines.append(f"(sandboxed rows skipped: {why_not})")
    return lines


def warm_table(rollouts: int, concurrency: int, start_delay_s: float, run_s: float) -> list[str]:
    """Cold pods vs a warm pool (one ready pod per slot), with a modelled pod start and harness run."""
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pool in (0, concurrency):
            rows[pool] = asyncio.run(one(rollouts, concurrency, Path(tmp), pool, start_delay_s, run_s))
    cold = rows[0]
    lines = [
        f"{'kubernetes':>12} {'pod start':>10} {'harness':>8} {'concurrency':>12} {'rollouts':>9} {'rollouts/s':>11}"
        f" {'claimed':>8} {'start p50 s':>12} {'start p95 s':>12} {'p50 gain':>9} {'rate gain':>10}"
    ]
    for pool, row in rows.items():
        mode = f"pool {pool}" if pool else "cold pods"
        lines.append(
            f"{mode:>12} {start_delay_s:>9.2f}s {run_s:>7.2f}s {concurrency:>12} {rollouts:>9} {row['rate']:>11.1f}"
            f" {row['claimed']:>8}"
            f" {row['p50']:>12.3f} {row['p95']:>12.3f} {cold['p50'] / row['p50']:>8.1f}x {row['rate'] / cold['rate']:>9.2f}x"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256, help="rollouts per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--warm-rollouts", type=int, default=96, help="rollouts per warm-pool mode (0: skip)")
    parser.add_argument("--warm-concurrency", type=int, default=32, help="concurrency and pool size of that table")
    parser.add_argument("--start-delay", type=float, default=1.0, help="modelled seconds before a new pod runs")
    parser.add_argument("--run-time", type=float, default=2.0, help="modelled seconds a harness runs (warm table)")
    parser.add_argument("--local-rollouts", type=int, default=24, help="local runtime rollouts per mode (0: skip)")
    parser.add_argument("--local-concurrency", type=int, default=2, help="local runtime concurrency (default 2)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for level in args.concurrency:
            rows.append((level, asyncio.run(one(args.rollouts, level, Path(tmp)))))
    base = rows[0][1]["rate"]
    print(
        f"{'concurrency':>12} {'rollouts':>9} {'rollouts/s':>11} {'peak pods':>10} {'CPU ms/rollout':>15}"
        f" {'API CPU ms/rollout':>19} {'vs first':>9}"
    )
    for level, row in rows:
        print(
            f"{level:>12} {args.rollouts:>9} {row['rate']:>11.1f} {row['peak']:>10} {row['cpu_ms']:>15.2f}"
            f" {row['api_cpu_ms']:>19.2f} {row['rate'] / base:>8.2f}x"
        )
    if args.warm_rollouts > 0:
        print()
        print("\n".join(warm_table(args.warm_rollouts, args.warm_concurrency, args.start_delay, args.run_time)))
    if args.local_rollouts > 0:
        print()
        print("\n".join(local_table(args.local_rollouts, args.local_concurrency)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
