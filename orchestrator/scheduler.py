"""Runs a run's rollouts: concurrency limit, deadlines, retries for infrastructure failures only, resume from the store.

The store is the source of truth: a run's rows are planned once (tasks x group size), and every start
is a compare-and-set claim, so a restarted scheduler picks up exactly the rows no one finished: pending
rows start, rows a runtime still holds are re-attached, and rows whose workload is gone are retried as a
new attempt. A rollout that ran and scored badly is final; only ``EndKind.LOST`` and API outages retry.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from rollwire.errors import RollwireError, UpstreamError, UpstreamTimeout
from rollwire.harness_adapters.base import Adapter, RolloutContext
from rollwire.orchestrator.checker_process import CheckerLimit
from rollwire.orchestrator.runtimes.base import Ended, EndKind, Handle, RolloutJob, Runtime
from rollwire.orchestrator.scoring import Scorer, ScoringInput
from rollwire.rollouts import PlannedRollout, RolloutBook
from rollwire.rollouts.book import live_rows
from rollwire.settings import OrchestratorSettings
from rollwire.store.schema import Rollout, RolloutStatus
from rollwire.trajectory import INFRASTRUCTURE, POLICY, SETUP

logger = logging.getLogger(__name__)
S = RolloutStatus
T = TypeVar("T")
INFRA_ERRORS = (UpstreamError, UpstreamTimeout, OSError)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    id: str
    prompt: str
    meta: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunPlan:
    run_id: str
    tasks: Sequence[TaskSpec]
    group_size: int
    harness: str
    name: str = ""
    policy_version: int | None = None
    config: Mapping[str, object] = field(default_factory=dict)
    """Extra facts kept on the Run row (suite, split, the caller's own meta) beside harness and group size."""
    rollouts: Sequence[PlannedRollout] | None = None
    """The rows to plan, where the caller names them (a replay: one per recorded rollout); None plans
    ``group_size`` of every task."""


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where rollouts reach the proxy and the gateway (as seen from the rollout's process or pod)."""

    proxy_url: str
    gateway_url: str

    def context(self, row: Rollout, task: TaskSpec, token: str, deadline_s: float) -> RolloutContext:
        proxy, gateway = self.proxy_url.rstrip("/"), self.gateway_url.rstrip("/")
        return RolloutContext(
            run_id=row.run_id,
            rollout_id=row.id,
            task_id=task.id,
            prompt=task.prompt,
            token=token,
            base_url=f"{proxy}/r/{token}/v1",
            anthropic_base_url=f"{proxy}/r/{token}",
            mcp_url=f"{gateway}/r/{token}/mcp",
            deadline_s=deadline_s,
            sample_index=row.sample_index,
            task_meta=task.meta,
        )


@dataclass(slots=True)
class Progress:
    """Live counts for the progress bar; ``rewards`` holds every finished rollout's reward."""

    planned: int = 0
    running: int = 0
    finished: int = 0
    failed: int = 0
    timed_out: int = 0
    retried: int = 0
    rewards: list[float] = field(default_factory=list)
    occupied: int = 0
    """Rollout slots held now: starting, running, scored (``running`` counts only a harness running)."""

    @property
    def done(self) -> int:
        return self.finished + self.failed + self.timed_out

    @property
    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None


class Scheduler:
    def __init__(
        self,
        *,
        book: RolloutBook,
        runtime: Runtime,
        adapter: Adapter,
        scorer: Scorer,
        settings: OrchestratorSettings,
        endpoints: Endpoints,
        on_progress: Callable[[Progress], None] | None = None,
        platform_fault: Callable[[], str | None] | None = None,
    ) -> None:
        self._book, self._runtime, self._adapter, self._scorer = book, runtime, adapter, scorer
        self._platform_fault = platform_fault
        """Says why the platform is down (a part of the stack exited), or None: a rollout that ends while it is
        down is the platform's failure, whatever its harness did (an exit, a timeout, an answer that scores)."""
        self._settings, self._endpoints = settings, endpoints
        self._on_progress = on_progress or (lambda _progress: None)
        self._db_lock = anyio.CapacityLimiter(1)  # one store writer per process
        self.progress = Progress()
        self._slots = anyio.Semaphore(max(1, settings.concurrency))

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._db_lock)

    async def run(self, plan: RunPlan) -> Progress:
        """Plan the run's rows (first time only), then drive every non-final row to a final state."""
        rows = await self.open_run(plan)
        if not rows:
            planned = list(plan.rollouts) if plan.rollouts is not None else [
                PlannedRollout(task.id, f"{plan.run_id}:{task.id}", index, task.meta)
                for task in plan.tasks
                for index in range(plan.group_size)
            ]  # fmt: skip
            rows = await self.plan_rows(plan.run_id, planned)
        live = live_rows(rows)
        self._count_existing(live)
        await self.drive(live, plan.tasks)
        return self.progress

    async def open_run(self, plan: RunPlan) -> list[Rollout]:
        """The run's row (created the first time) and every row it has so far."""
        config = {
            **plan.config,
            "harness": plan.harness,
            "group_size": plan.group_size,
            "policy_version": plan.policy_version,
        }
        await self._db(self._book.ensure_run, plan.run_id, plan.name or plan.run_id, config)
        return await self._db(self._book.rollouts, plan.run_id)

    async def plan_rows(self, run_id: str, planned: Sequence[PlannedRollout]) -> list[Rollout]:
        """Pending rows for ``planned`` (the harness's side-call rules added to their meta); returns the run's rows."""
        rules = getattr(self._adapter, "side_call_rules", None)  # the harness's own side calls, if it says
        if rules is not None:
            extra = {"side_call_rules": [rule.to_dict() for rule in rules]}
            planned = [dataclasses.replace(item, meta={**item.meta, **extra}) for item in planned]
        await self._db(self._book.plan, run_id, planned)
        return await self._db(self._book.rollouts, run_id)

    async def drive(self, rows: Sequence[Rollout], tasks: Sequence[TaskSpec]) -> None:
        """Drive every non-final row of ``rows`` to a final state, at most ``concurrency`` at once across calls."""
        by_id = {task.id: task for task in tasks}
        async with anyio.create_task_group() as group:
            for row in rows:
                if not RolloutStatus(row.status).is_final:
                    group.start_soon(self._drive, row, by_id, self._slots)

    def _count_existing(self, live: Sequence[Rollout]) -> None:
        self.progress.planned = len(live)
        for row in live:
            status = RolloutStatus(row.status)
            if status == S.FINISHED:
                self.progress.finished += 1
                self.progress.rewards.append(float(row.reward or 0.0))
            elif status == S.FAILED:
                self.progress.failed += 1
            elif status == S.TIMED_OUT:
                self.progress.timed_out += 1
        self._on_progress(self.progress)

    async def _drive(self, row: Rollout, tasks: Mapping[str, TaskSpec], slots: anyio.Semaphore) -> None:
        async with slots:
            self.progress.occupied += 1
            self._on_progress(self.progress)  # a slot held from here: its rollout's start counts as busy
            try:
                current: Rollout | None = row
                while current is not None:
                    current = await self._attempt(current, tasks[current.task_id or ""])
            finally:
                self.progress.occupied -= 1
                self._on_progress(self.progress)

    async def _attempt(self, row: Rollout, task: TaskSpec) -> Rollout | None:
        """Drive one row to a final state; returns the retry row when infrastructure failed it."""
        status = RolloutStatus(row.status)
        token: str | None = None
        handle: Handle | None = None
        launched_ns: int | None = None
        if status in (S.STARTING, S.RUNNING):
            handle = await self._runtime.attach(row.id, str(row.meta.get("runtime_ref", "")))
            if handle is None and status == S.RUNNING:
                return await self._lost(row, S.RUNNING, "workload lost while the orchestrator was down")
        if status == S.SCORING:
            resumed = Ended(EndKind.EXITED, exit_code=row.exit_code, final_answer=row.final_answer)
            await self._score(row, None, resumed, row.log_tail or "")
            return None
        if handle is None:
            token = await self._db(self._book.claim, row.id, status)
            if token is None:
                return None  # another scheduler claimed it
            try:
                handle = await self._launch(row, task, token)
                launched_ns = time.time_ns()
            except INFRA_ERRORS as exc:
                return await self._lost(row, S.STARTING, f"could not start: {exc}")
            except RollwireError as exc:
                await self._finish(row, S.STARTING, S.FAILED, error=f"{SETUP}: could not start: {exc.message}")
                return None
        if status != S.RUNNING and not await self._db(self._book.move, row.id, S.STARTING, S.RUNNING):
            return None
        self.progress.running += 1
        self._on_progress(self.progress)
        try:
            ended, tail = await self._wait(row, handle, launched_ns)  # cancelled: the workload stays for a resume to re-attach
        finally:
            self.progress.running -= 1
        await self._runtime.stop(handle)
        return await self._settle(row, token, ended, tail)

    async def _launch(self, row: Rollout, task: TaskSpec, token: str) -> Handle:
        deadline = self._settings.deadline_s
        launch = self._adapter.launch(self._endpoints.context(row, task, token, deadline))
        endpoints = (self._endpoints.proxy_url, self._endpoints.gateway_url)
        job = RolloutJob(row.run_id, row.id, launch, launch.deadline_s or deadline, endpoints)
        handle = await self._runtime.start(job)
        await self._db(self._book.merge_meta, row.id, {"runtime": self._runtime.name, "runtime_ref": handle.ref})
        return handle

    async def _wait(self, row: Rollout, handle: Handle, launched_ns: int | None) -> tuple[Ended, str]:
        """The deadline counts from the workload's start (a re-attached one: from its claim, as stored), so the
        runtime's own set-up (workspace files, a warm pool starting) is not charged to the harness."""
        if launched_ns is None:
            launched_ns = (await self._db(self._book.get, row.id)).started_ns
        elapsed = (time.time_ns() - (launched_ns or time.time_ns())) / 1e9
        ended = await self._runtime.wait(handle, self._settings.deadline_s - elapsed)
        tail = await self._runtime.logs_tail(handle, self._settings.log_tail_lines)
        return ended, tail

    async def _settle(self, row: Rollout, token: str | None, ended: Ended, tail: str) -> Rollout | None:
        """Class how the rollout ended on the platform's own evidence: the runtime's report, and what the proxy
        recorded of the engine failing its calls (an engine that failed a rollout makes it the platform's,
        whatever the harness did next: its exit, a timeout, or an answer that scores)."""
        facts: dict[str, Any] = {"exit_code": ended.exit_code, "log_tail": tail, "final_answer": ended.final_answer}
        if ended.kind == EndKind.LOST:
            return await self._lost(row, S.RUNNING, ended.reason or "infrastructure failure", **facts)
        fault = self._platform_fault() if self._platform_fault is not None else None
        if fault is not None:
            return await self._lost(row, S.RUNNING, f"the platform failed during the rollout: {fault}", **facts)
        engine_failures = await self._db(self._book.engine_failures, row.id)
        if engine_failures:
            return await self._lost(row, S.RUNNING, f"the engine failed its model call: {engine_failures[0]}", **facts)
        if ended.kind == EndKind.TIMED_OUT:
            await self._finish(row, S.RUNNING, S.TIMED_OUT, error=ended.reason or "deadline exceeded", **facts)
        elif ended.kind == EndKind.FAILED:
            await self._finish(row, S.RUNNING, S.FAILED, error=f"{SETUP}: {ended.reason or 'could not run'}", **facts)
        elif ended.answer_refused is not None:  # the rollout left something the platform will not read
            error = f"{POLICY}: final answer refused: {ended.answer_refused}"
            await self._finish(row, S.RUNNING, S.FAILED, error=error, **facts)
        elif ended.exit_code != 0:
            error = f"harness exited with status {ended.exit_code}" + (f" ({ended.reason})" if ended.reason else "")
            await self._finish(row, S.RUNNING, S.FAILED, error=error, **facts)
        elif await self._db(self._book.move, row.id, S.RUNNING, S.SCORING, **facts):
            await self._score(row, token, ended, tail)
        return None

    async def _score(self, row: Rollout, token: str | None, ended: Ended, tail: str) -> None:
        item = ScoringInput(row.run_id, row.id, row.task_id or "", token or "", ended.final_answer, ended.exit_code, tail)
        try:
            score = await self._scorer.score(item)
        except CheckerLimit as exc:  # the rollout's final state drove its checker past a limit: the policy's doing
            logger.warning("checker limit: %s", exc, extra={"rollout_id": row.id})
            await self._finish(row, S.SCORING, S.FAILED, error=f"{POLICY}: {exc} on this rollout's final state")
            return None
        except Exception as exc:  # a checker's bug must not stop the run: record it on the rollout
            logger.exception("checker failed", extra={"rollout_id": row.id})
            await self._finish(row, S.SCORING, S.FAILED, error=f"checker failed: {exc.__class__.__name__}: {exc}")
            return None
        breakdown = dict(score.breakdown)
        await self._finish(row, S.SCORING, S.FINISHED, reward=float(score.reward), reward_breakdown=breakdown)
        return None

    async def _lost(self, row: Rollout, source: RolloutStatus, reason: str, **facts: Any) -> Rollout | None:
        """Infrastructure failure: the row fails with the reason and, if attempts remain, a new attempt is queued.

        A row that will be retried is not streamed to the trainer (its retry takes its place in the group); the
        last attempt's row is ("no retry left"), so its group still fills, and the trainer leaves it out.
        """
        last = row.attempt + 1 >= self._settings.max_attempts
        error = f"{INFRASTRUCTURE}{' (no retry left)' if last else ''}: {reason}"
        if last:
            if await self._finish(row, source, S.FAILED, error=error, count=False, **facts):
                self.progress.failed += 1
                self._on_progress(self.progress)
            return None
        # the failure and its retry are one write: a stop between them would leave the rollout lost for good
        retry_id = await self._db(self._book.fail_and_retry, row, source, error=error, **facts)
        if retry_id is None:
            return None
        self.progress.retried += 1
        logger.warning("rollout lost (%s); retrying as %s", reason, retry_id, extra={"rollout_id": row.id})
        return await self._db(self._book.get, retry_id)

    async def _finish(
        self, row: Rollout, source: RolloutStatus, target: RolloutStatus, *, count: bool = True, **fields: Any
    ) -> bool:
        moved = await self._db(self._book.move, row.id, source, target, **fields)
        if moved:
            # a finished rollout is the common case, shown by the progress line: its own line only at DEBUG
            level = logging.DEBUG if target == S.FINISHED else logging.INFO
            ids = {"run_id": row.run_id, "rollout_id": row.id, "task_id": row.task_id}
            logger.log(level, "rollout %s", target.value, extra=ids)
        if moved and count:
            if target == S.FINISHED:
                self.progress.finished += 1
                self.progress.rewards.append(float(fields.get("reward", 0.0)))
            elif target == S.TIMED_OUT:
                self.progress.timed_out += 1
            else:
                self.progress.failed += 1
            self._on_progress(self.progress)
        return moved


__all__ = ["Endpoints", "Progress", "RunPlan", "Scheduler", "TaskSpec", "live_rows"]
