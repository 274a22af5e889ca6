"""Helpers for the orchestrator suites: adapters that need no real harness, settings, plans, and a helper that runs
a whole run."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.orchestrator.runtimes.base import Runtime
from rollwire.orchestrator.scheduler import Endpoints, Progress, RunPlan, Scheduler, TaskSpec
from rollwire.orchestrator.scoring import ExitCodeScorer, Scorer
from rollwire.rollouts import RolloutBook
from rollwire.settings import KubernetesSettings, OrchestratorSettings
from tests.orchestrator.fake_cluster import NAMESPACE

ENDPOINTS = Endpoints(proxy_url="http://proxy.test:8000", gateway_url="http://gateway.test:8001")


@dataclass
class ImageAdapter:
    """Names an image the fake kubelet knows; ``images`` picks one per task id (default ``image``)."""

    image: str = "img/ok"
    images: dict[str, str] = field(default_factory=dict)
    name: str = "image"

    def launch(self, ctx: RolloutContext) -> Launch:
        env = {"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.token, "MCP_URL": ctx.mcp_url}
        image = self.images.get(ctx.task_id, self.image)
        return Launch(argv=("harness", "--task", ctx.task_id), env=env, files={"task.txt": ctx.prompt}, image=image)


@dataclass
class ScriptAdapter:
    """Runs a Python script as the harness (the interpreter running the tests), with the rollout's URLs in env.

    ``module=True`` launches it as ``python -m harness`` (from the workspace), the form the warm pool forks.
    """

    script: str
    name: str = "script"
    module: bool = False

    def launch(self, ctx: RolloutContext) -> Launch:
        env = {"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.token, "ROLLWIRE_SAMPLE": str(ctx.sample_index)}
        files = {"task/prompt.txt": ctx.prompt, "harness.py": self.script}
        argv = (sys.executable, "-m", "harness") if self.module else (sys.executable, "harness.py")
        return Launch(argv=argv, env=env, files=files)


LAUNCH_MODES = {
    "cold-script": (False, False),
    "cold-module": (False, True),
    "pool-module": (True, True),
    "pool-script": (True, False),  # not `python -m`: the pool lets it start as a plain subprocess
}
"""Test id -> (warm_pool, launch as ``python -m``): the local runtime must behave the same in each."""


def k8s_settings(**overrides: Any) -> KubernetesSettings:
    return KubernetesSettings(namespace=NAMESPACE, api_backoff_s=0.01, **overrides)


def orchestrator_settings(**overrides: Any) -> OrchestratorSettings:
    return OrchestratorSettings(**{"deadline_s": 30.0, **overrides})


def plan(run_id: str, tasks: int, group: int, prefix: str = "t") -> RunPlan:
    specs = [TaskSpec(f"{prefix}{index}", f"prompt {index}") for index in range(tasks)]
    return RunPlan(run_id=run_id, tasks=specs, group_size=group, harness="test")


async def run_with(
    runtime: Runtime,
    book: RolloutBook,
    run: RunPlan,
    settings: OrchestratorSettings,
    adapter: Any,
    scorer: Scorer | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> Progress:
    scheduler = Scheduler(
        book=book, runtime=runtime, adapter=adapter, scorer=scorer or ExitCodeScorer(), settings=settings,
        endpoints=ENDPOINTS, on_progress=on_progress,
    )  # fmt: skip
    return await scheduler.run(run)


def statuses(rows: Sequence[Any]) -> list[str]:
    return sorted(str(row.status) for row in rows)
