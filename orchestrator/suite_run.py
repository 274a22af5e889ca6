"""One run of a task suite through a harness against a running stack: the entry point the CLI and the demo call.

It only wires parts that exist elsewhere: the suite's tasks (``mcp_servers.tasks``) become ``TaskSpec``s whose
meta names the suite, because the gateway and the env servers find a rollout's task as ``meta.suite`` +
``task_id`` on its row (the same way the proxy's admin "create rollout" writes it); the adapter comes from
the registry, rewards from the suite's checkers (``SuiteScorer``), and the ``Scheduler`` drives the rows in
the stack's store. Passing the ``run_id`` of an earlier, interrupted run resumes it: rows already final stay.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread

from rollwire import sandbox
from rollwire.errors import InvalidRequest, NotFound
from rollwire.harness_adapters.base import Adapter, runs_model_code
from rollwire.orchestrator.runtimes.base import Runtime
from rollwire.orchestrator.scheduler import Endpoints, Progress, RunPlan, Scheduler, TaskSpec, live_rows
from rollwire.rollouts import PlannedRollout, RolloutBook
from rollwire.sandbox import state_folders
from rollwire.settings import OrchestratorSettings, Settings
from rollwire.store.db import open_engine
from rollwire.store.schema import Rollout

logger = logging.getLogger(__name__)

RUNTIMES = ("local", "kubernetes")
SPLITS = {"train": "train", "held_out": "held_out", "heldout": "held_out", "held-out": "held_out"}
"""Accepted spellings of a split -> the name the suite files use."""


class StackAddresses(Protocol):
    """What a run needs of a running stack (``rollwire.app.stack.StackInfo`` has these and more)."""

    proxy_url: str
    gateway_url: str
    db_url: str
    state_root: str


@dataclass(frozen=True, slots=True)
class SuiteRunResult:
    run_id: str
    progress: Progress
    rollouts: list[Rollout]
    """The latest attempt of every planned rollout, all in a final state once the run returned."""


def suite_ref(suite: str) -> str:
    """How rows name the suite: a shipped name as is, a JSON file as an absolute path (other processes read it)."""
    return str(Path(suite).resolve()) if Path(suite).suffix else suite


def select_tasks(suite: str, split: str | None = None, task_ids: Sequence[str] | None = None) -> list[TaskSpec]:
    """The suite's tasks in one split and/or with the given ids, as TaskSpecs; unknown names say what exists."""
    from rollwire.mcp_servers.tasks.loader import load_suite

    loaded = load_suite(suite)
    tasks = list(loaded.tasks)
    if split is not None:
        if split not in SPLITS:
            raise InvalidRequest(f"unknown split {split!r}; use train or heldout", param="split")
        tasks = loaded.split(SPLITS[split])
    if task_ids:
        known = {task.id: task for task in tasks}
        missing = [task_id for task_id in task_ids if task_id not in known]
        if missing:
            where = f"split {split!r} of suite {loaded.name!r}" if split else f"suite {loaded.name!r}"
            raise NotFound(f"{where} has no task {', '.join(map(repr, missing))}; it has: {', '.join(known)}")
        tasks = [known[task_id] for task_id in dict.fromkeys(task_ids)]
    if not tasks:
        raise InvalidRequest(f"suite {loaded.name!r} has no tasks in split {split!r}", param="split")
    ref = suite_ref(suite)
    return [TaskSpec(task.id, task.instruction, {"suite": ref}) for task in tasks]


def build_adapter(harness: str | Adapter, options: Mapping[str, object] | None = None) -> Adapter:
    """The registry's adapter by name (an adapter object is used as it is); options it does not take are an
    InvalidRequest naming them."""
    from rollwire.harness_adapters.registry import get_adapter

    if not isinstance(harness, str):
        if options:
            raise InvalidRequest("harness options go to a harness named from the registry", param="harness_options")
        return harness
    try:
        return get_adapter(harness, **dict(options or {}))
    except (TypeError, ValueError) as exc:  # an option of the wrong name, or a bad value
        raise InvalidRequest(f"harness {harness!r} does not take these options: {exc}", param="harness_options") from None


def build_runtime(
    kind: str, settings: OrchestratorSettings, host_env: Mapping[str, str], hidden: Sequence[Path] = ()
) -> Runtime:
    """The runtime named ``kind``; its clients open when the caller enters it (``async with``). ``hidden``: the
    stack's state folders (store, env state), which a sandboxed local rollout must not see."""
    if kind == "local":
        from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime

        return LocalRuntime(settings, host_env=dict(host_env), hidden=hidden)
    if kind == "kubernetes":
        from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
        from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime(settings.kubernetes, api_client_from_settings(settings.kubernetes))
    raise InvalidRequest(f"unknown runtime {kind!r}; use {' or '.join(RUNTIMES)}", param="runtime")


def sqlite_path(db_url: str) -> str | None:
    """The database file of a SQLite store URL (None for a server database or an in-memory one)."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    return url.database if url.drivername.startswith("sqlite") and url.database not in (None, "", ":memory:") else None


def _resume_tasks(book: RolloutBook, run_id: str, suite: str, harness: str, picked: list[TaskSpec]) -> list[TaskSpec]:
    """For an existing run: check it is the same suite and harness, and cover every task its rows hold."""
    run = book.find_run(run_id)
    if run is None:
        return picked
    config: dict[str, Any] = dict(run.config or {})
    for key, want in (("suite", suite_ref(suite)), ("harness", harness)):
        if config.get(key) not in (None, want):
            raise InvalidRequest(f"run {run_id!r} was started with {key} {config.get(key)!r}, not {want!r}", param=key)
    rows = book.rollouts(run_id)
    if not rows:
        return picked
    every = {task.id: task for task in select_tasks(suite)}
    missing = sorted({row.task_id or "" for row in rows} - set(every))
    if missing:
        raise InvalidRequest(f"run {run_id!r} has tasks the suite {suite!r} lacks: {', '.join(missing)}")
    return [every[task_id] for task_id in dict.fromkeys(row.task_id or "" for row in rows)]


@dataclass(slots=True)
class SuiteSession:
    """A suite, a harness and a runtime opened once, driven by one scheduler (one concurrency limit for every
    row it drives): ``run_suite`` plans a whole run in it, ``rollwire rl`` plans one group at a time."""

    suite: str
    harness: str
    """The registry name (or the adapter's own name) the run's rows and config call the harness."""
    book: RolloutBook
    scheduler: Scheduler
    run_config: dict[str, object]
    """What every run of this session records beside the caller's meta (suite, runtime, the suite's budgets)."""

    def tasks(self, split: str | None = None, task_ids: Sequence[str] | None = None) -> list[TaskSpec]:
        return select_tasks(self.suite, split, task_ids)

    async def open_run(
        self, run_id: str, name: str = "", meta: Mapping[str, object] | None = None, split: str | None = None,
        policy_version: int | None = None, group_size: int = 1,
    ) -> list[Rollout]:
        """The run's row (created the first time, with this session's config) and every row it has so far."""
        config = {**(meta or {}), **self.run_config, "split": split}
        plan = RunPlan(run_id, [], group_size, self.harness, name, policy_version, config)
        return await self.scheduler.open_run(plan)

    async def run_group(
        self, run_id: str, task: TaskSpec, size: int, group_id: str, meta: Mapping[str, object] | None = None
    ) -> list[Rollout]:
        """Plan ``size`` rollouts of ``task`` as one group and drive them to a final state; returns the group's
        live rows (an infrastructure retry in place of the attempt it replaced)."""
        planned = [PlannedRollout(task.id, group_id, index, {**task.meta, **(meta or {})}) for index in range(size)]
        rows = await self.scheduler.plan_rows(run_id, planned)
        return await self.finish_group(run_id, group_id, rows, [task])

    async def run_groups(
        self, run_id: str, tag: str, tasks: Sequence[TaskSpec], size: int, meta: Mapping[str, object] | None = None
    ) -> list[Rollout]:
        """One group of ``size`` per task, ids ``<run_id>:<tag>:<task>``, all driven at once (the concurrency limit
        holds); a group already in the run is finished, not planned again, so a rerun resumes the phase. Returns
        the live rows of every group."""
        rows = await anyio.to_thread.run_sync(self.book.rollouts, run_id)
        existing = {row.group_id for row in rows}
        out: dict[str, list[Rollout]] = {}

        async def one(task: TaskSpec) -> None:
            group_id = f"{run_id}:{tag}:{task.id}"
            if group_id in existing:
                out[task.id] = await self.finish_group(run_id, group_id, rows, [task])
            else:
                out[task.id] = await self.run_group(run_id, task, size, group_id, meta)

        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(one, task)
        return [row for task in tasks for row in out[task.id]]

    async def finish_group(
        self, run_id: str, group_id: str, rows: Sequence[Rollout], tasks: Sequence[TaskSpec]
    ) -> list[Rollout]:
        """Drive the group's non-final rows (a resumed run's too) and return its live rows once all are final."""
        await self.scheduler.drive(live_rows([row for row in rows if row.group_id == group_id]), tasks)
        rows = await anyio.to_thread.run_sync(self.book.rollouts, run_id)
        return live_rows([row for row in rows if row.group_id == group_id])


@asynccontextmanager
async def open_suite(
    stack: StackAddresses,
    *,
    suite: str,
    harness: str | Adapter,
    runtime: str = "local",
    concurrency: int = 4,
    deadline_s: float | None = None,
    harness_options: Mapping[str, object] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    settings: Settings | None = None,
    host_env: Mapping[str, str] | None = None,
    platform_fault: Callable[[], str | None] | None = None,
) -> AsyncIterator[SuiteSession]:
    """Open the suite's scorer, the store and the runtime for as long as the ``async with`` lasts.

    ``host_env`` is the environment local harnesses inherit PATH and locale from (default: this process's).
    Rollouts reach the proxy and gateway at ``settings.orchestrator.proxy_url``/``gateway_url`` when set
    (a pod sees other addresses than this machine), else at the stack's. ``platform_fault`` says when a part of the
    stack is down (``LocalStack.failed_part``): a rollout ending then is retried as the platform's failure.
    """
    if concurrency < 1:
        raise InvalidRequest("concurrency must be at least 1", param="concurrency")
    if deadline_s is not None and deadline_s <= 0:
        raise InvalidRequest("deadline must be a positive number of seconds", param="deadline_s")
    settings = settings or Settings()
    orch = settings.orchestrator.model_copy(
        update={"runtime": runtime, "concurrency": concurrency}
        | ({"deadline_s": deadline_s} if deadline_s is not None else {})
    )
    adapter = build_adapter(harness, harness_options)
    name = harness if isinstance(harness, str) else adapter.name  # what the run's rows and config call it
    orch = sandbox_needed(orch, adapter)
    from rollwire.orchestrator.suite_scorer import SuiteScorer

    scorer = SuiteScorer(suite, Path(stack.state_root), orch.checker_timeout_s, orch.checker_max_memory_mb)
    book = RolloutBook(await anyio.to_thread.run_sync(open_engine, stack.db_url))
    config: dict[str, object] = {"suite": suite_ref(suite), "runtime": runtime}
    if scorer.suite.budgets:  # every rollout of the run gets the suite's budgets (stored on its row)
        config["budgets"] = dict(scorer.suite.budgets)
    endpoints = Endpoints(orch.proxy_url or stack.proxy_url, orch.gateway_url or stack.gateway_url)
    env = dict(os.environ if host_env is None else host_env)
    hidden = state_folders([stack.state_root, sqlite_path(stack.db_url), settings.home])
    async with build_runtime(runtime, orch, env, hidden) as opened:
        scheduler = Scheduler(
            book=book, runtime=opened, adapter=adapter, scorer=scorer, settings=orch, endpoints=endpoints,
            on_progress=on_progress, platform_fault=platform_fault,
        )  # fmt: skip
        yield SuiteSession(suite, name, book, scheduler, config)


async def run_suite(
    stack: StackAddresses,
    *,
    suite: str,
    harness: str | Adapter,
    group_size: int = 1,
    split: str | None = None,
    task_ids: Sequence[str] | None = None,
    runtime: str = "local",
    concurrency: int = 4,
    deadline_s: float | None = None,
    run_id: str | None = None,
    run_name: str = "",
    run_meta: Mapping[str, object] | None = None,
    policy_version: int | None = None,
    harness_options: Mapping[str, object] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    settings: Settings | None = None,
    host_env: Mapping[str, str] | None = None,
    platform_fault: Callable[[], str | None] | None = None,
) -> SuiteRunResult:
    """Run ``group_size`` rollouts of each picked task with ``harness`` (a registry name, or an adapter object of
    the caller's own) until every one is final; the other arguments are ``open_suite``'s."""
    if group_size < 1:
        raise InvalidRequest("group size must be at least 1", param="group_size")
    picked = select_tasks(suite, split, task_ids)
    run_id = run_id or f"run-{secrets.token_hex(6)}"
    async with open_suite(
        stack, suite=suite, harness=harness, runtime=runtime, concurrency=concurrency, deadline_s=deadline_s,
        harness_options=harness_options, on_progress=on_progress, settings=settings, host_env=host_env,
        platform_fault=platform_fault,
    ) as session:  # fmt: skip
        tasks = await anyio.to_thread.run_sync(_resume_tasks, session.book, run_id, suite, session.harness, picked)
        config = {**(run_meta or {}), **session.run_config, "split": split}
        plan = RunPlan(run_id, tasks, group_size, session.harness, run_name, policy_version, config)
        progress = await session.scheduler.run(plan)
        rows = await anyio.to_thread.run_sync(session.book.rollouts, run_id)
    return SuiteRunResult(run_id, progress, live_rows(rows))


def sandbox_needed(orch: OrchestratorSettings, adapter: Adapter) -> OrchestratorSettings:
    """The settings to run ``adapter`` with: a local harness that runs nothing the model chooses on this machine
    (its only actions are MCP calls through the gateway) runs without a sandbox where none can be made, and says
    so in one line; every other harness keeps the sandbox, and the runtime refuses to start without one."""
    if orch.runtime != "local" or not orch.sandbox or runs_model_code(adapter):
        return orch
    reason = sandbox.probe(orch.bwrap_path)
    if reason is None:
        return orch
    _say_unsandboxed(reason, adapter.name)
    return orch.model_copy(update={"sandbox": False})


@functools.cache
def _say_unsandboxed(reason: str, harness: str) -> None:
    """Once per process (the demo runs a suite per phase): why this harness's rollouts run without a sandbox."""
    logger.warning(
        "no sandbox here (%s): the %s harness runs nothing the model chooses on this machine, so its rollouts run "
        "without one; harnesses with built-in tools (codex, claude-code, mini-swe-agent) need it "
        "(apt-get install bubblewrap)", reason, harness,
    )  # fmt: skip


__all__ = ["RUNTIMES", "SPLITS", "StackAddresses", "SuiteRunResult", "SuiteSession", "open_suite", "build_adapter", "build_runtime", "run_suite",
           "sandbox_needed", "select_tasks", "suite_ref"]  # fmt: skip
