"""Rollouts scheduled per second against an emulated Kubernetes API (kmock + fake kubelet) at several concurrencies.

    python bench/orchestrator.py [--rollouts N] [--concurrency 8 64 256]

Loopback only; each rollout is the full Kubernetes lifecycle: claim, Secret + Pod create, watch to the
end, log tail, delete, score, final state in a SQLite store.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "orchestrator"))

from fake_cluster import NAMESPACE, fake_cluster  # noqa: E402

from rollwire.harness_adapters.base import Launch, RolloutContext  # noqa: E402
from rollwire.orchestrator.lifecycle import RolloutBook  # noqa: E402
from rollwire.orchestrator.runtimes.kube_api import api_client_from_settings  # noqa: E402
from rollwire.orchestrator.runtimes.kubernetes import KubernetesRuntime  # noqa: E402
from rollwire.orchestrator.scheduler import Endpoints, RunPlan, Scheduler, TaskSpec  # noqa: E402
from rollwire.orchestrator.scoring import ExitCodeScorer  # noqa: E402
from rollwire.settings import KubernetesSettings, OrchestratorSettings  # noqa: E402
from rollwire.store.db import open_engine  # noqa: E402


class OkAdapter:
    name = "bench"

    def launch(self, ctx: RolloutContext) -> Launch:
        return Launch(argv=("harness",), env={"OPENAI_BASE_URL": ctx.base_url}, image="img/ok")


async def one(rollouts: int, concurrency: int, folder: Path) -> tuple[float, int]:
    async with fake_cluster() as (_api, url, kubelet):
        kube = KubernetesSettings(namespace=NAMESPACE, api_backoff_s=0.01, api_concurrency=min(64, concurrency))
        settings = OrchestratorSettings(concurrency=concurrency, deadline_s=120.0, kubernetes=kube)
        book = RolloutBook(open_engine(f"sqlite:///{folder / f'c{concurrency}.db'}"))
        plan = RunPlan(run_id=f"bench-{concurrency}", tasks=[TaskSpec("t", "p")], group_size=rollouts, harness="bench")
        started = time.perf_counter()
        async with KubernetesRuntime(kube, api_client_from_settings(kube, host=url)) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=OkAdapter(), scorer=ExitCodeScorer(), settings=settings,
                endpoints=Endpoints("http://proxy:8000", "http://gateway:8001"),
            )
            progress = await scheduler.run(plan)
        elapsed = time.perf_counter() - started
        assert progress.finished == rollouts, progress
        return rollouts / elapsed, kubelet.peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256, help="rollouts per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 64, 256])
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for level in args.concurrency:
            rate, peak = asyncio.run(one(args.rollouts, level, Path(tmp)))
            rows.append((level, rate, peak))
    base = rows[0][1]
    print(f"{'concurrency':>12} {'rollouts':>9} {'rollouts/s':>11} {'peak pods':>10} {'vs first':>9}")
    for level, rate, peak in rows:
        print(f"{level:>12} {args.rollouts:>9} {rate:>11.1f} {peak:>10} {rate / base:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
