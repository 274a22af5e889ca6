"""The continuous RL loop: a sampler drawing task groups and a trainer stepping on them, overlapped.

Both run in one event loop. The **sampler** draws a task from the curriculum whenever the staleness gate has
room, plans its group of rollouts in the run and drives them through the suite session (the scheduler's
concurrency limit holds across groups); rollouts sample from whatever policy the engine serves when they call.
The **trainer** (``trainers``) is a learner stepped in this process, or one that runs elsewhere (a Kubernetes
Job) and is followed through the version the proxy publishes: it leaves out groups with no reward spread
(dynamic sampling: the gate draws a replacement at once), and once a step's worth of groups is ready trains on
them, checkpoints cursor and buffer, pushes the weights and publishes the next policy version. Every fact a
resume needs is in the store (draws, rows) or the trainer's checkpoint (cursor, buffer, consumed rollouts), so
a run killed at any point and started again with its id trains no group twice and loses none: rows in flight
at the kill are found lost and retried as infrastructure failures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread

from rollwire.app.rl.curriculum import Curriculum, Draw
from rollwire.app.rl.gate import StalenessGate
from rollwire.app.rl.trainers import TRAIN, StepRecord, Trainer
from rollwire.errors import Conflict, InvalidRequest
from rollwire.orchestrator.scheduler import TaskSpec, live_rows
from rollwire.orchestrator.suite_run import SuiteSession
from rollwire.pass_rates import suite_pass_rates
from rollwire.store.schema import Rollout, RolloutStatus

logger = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class RLConfig:
    iterations: int = 12
    """Policy updates to make (each one a push and a new version)."""
    group_size: int = 8
    groups_per_step: int = 8
    """Task groups with a reward spread in each update."""
    max_lag: int = 0
    """Updates the sampler may run ahead of the trainer (0: lockstep; >= 1 turns TIS on, its tokens of older
    policies clipped around the policy that sampled them: ``trainer.losses.anchored``). On one 2-core machine
    overlap made the loop 3-14% faster (``docs/bench-log.md``, ``bench/async_rl.py``): opt in."""
    epochs: int = 4
    """Clipped passes over each update's groups."""
    dynamic_sampling: bool = True
    """Leave out groups with no reward spread and draw others in their place."""
    curriculum_floor: float = 0.05
    curriculum_window: int = 16
    seed: int = 0
    eval_every: int = 0
    """Evaluate the held-out split every E published versions, and the last one (0: no evaluations)."""
    eval_group: int = 4
    """Rollouts per held-out task in an evaluation (pass@k for k = 1 .. this)."""
    eval_retries: int = 2
    """Evaluations of a version whose tokens came from another version (a push landed mid-way) are discarded and
    run again at the version then served, at most this many times."""

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise InvalidRequest("--iterations must be at least 1", param="iterations")
        if self.group_size < 2:
            raise InvalidRequest("--group-size must be at least 2: GRPO compares rollouts within a group")
        if self.epochs < 1:
            raise InvalidRequest("--epochs must be at least 1", param="epochs")
        if self.eval_every < 0 or self.eval_group < 1:
            raise InvalidRequest("--eval-every must be 0 (off) or more, --eval-group at least 1", param="eval_every")


@dataclass(slots=True)
class EvalRecord:
    """A held-out evaluation whose every token came from ``version``: pass@k and pass^k over its tasks."""

    version: int
    rates: dict[str, float]
    rollouts: int
    at_s: float
    """When it ended, in seconds since the loop started."""


@dataclass(slots=True)
class RLResult:
    run_id: str
    start_version: int
    steps: list[StepRecord] = field(default_factory=list)
    draws: list[Draw] = field(default_factory=list)
    evals: list[EvalRecord] = field(default_factory=list)
    evals_discarded: int = 0
    groups_finished: int = 0
    groups_zero_variance: int = 0
    seconds: float = 0.0
    trainer_busy_s: float = 0.0
    """Wall time the trainer spent stepping and pushing (the rest it waited for groups)."""
    slot_busy_s: float = 0.0
    """Rollout-seconds the rollout slots were running (``SlotMeter``); with ``concurrency``, their idle share."""
    concurrency: int = 0

    @property
    def slots_idle_share(self) -> float:
        capacity = self.concurrency * self.seconds
        return max(0.0, 1.0 - self.slot_busy_s / capacity) if capacity else 0.0

    @property
    def zero_variance_share(self) -> float:
        return self.groups_zero_variance / self.groups_finished if self.groups_finished else 0.0


Report = Callable[[str], None]


def group_rewards(rows: Sequence[Rollout]) -> list[float]:
    """A finished group's rewards as the curriculum counts them: a rollout that did not finish scores 0."""
    return [float(r.reward or 0.0) if r.status == RolloutStatus.FINISHED else 0.0 for r in rows]


class RLLoop:
    """One run of the loop against an open suite session and a trainer; ``run`` returns when the run has made
    ``start_version + iterations`` (the start version is the trainer's when the run was first opened)."""

    def __init__(
        self,
        session: SuiteSession,
        trainer: Trainer,
        config: RLConfig,
        *,
        run_id: str,
        tasks: Sequence[TaskSpec],
        report: Report = lambda _line: None,
        on_update: Callable[[StepRecord], None] | None = None,
        run_meta: dict[str, object] | None = None,
        eval_tasks: Sequence[TaskSpec] = (),
    ) -> None:
        self.session, self.trainer, self.config = session, trainer, config
        self.eval_tasks = list(eval_tasks)
        if config.eval_every and not self.eval_tasks:
            raise InvalidRequest("--eval-every needs held-out tasks: the suite has no held-out split", param="eval_every")
        self.run_id, self.tasks, self.report = run_id, {task.id: task for task in tasks}, report
        self.run_meta = run_meta or {}
        self.on_update = on_update
        """Called after every update with its record (the demo's tracker logs it at the learner's step)."""
        self.curriculum = Curriculum([task.id for task in tasks], config.seed, config.curriculum_floor,
                                     config.curriculum_window)  # fmt: skip
        self._next_draw = 0
        self._started = time.monotonic()
        self._eval_lock = anyio.Lock()
        self._gate = StalenessGate(config.max_lag, config.groups_per_step)
        self._group: anyio.abc.TaskGroup

    async def run(self) -> RLResult:
        started = self._started = time.monotonic()
        gate = self._gate
        await self.trainer.prepare()
        meta = {"kind": "rl", "start_version": self.trainer.version, "rl": dataclasses.asdict(self.config), **self.run_meta}
        rows = await self.session.open_run(self.run_id, self.run_id, meta, "train", self.trainer.version,
                                           self.config.group_size)  # fmt: skip
        run = await anyio.to_thread.run_sync(self.session.book.find_run, self.run_id)
        start = int((run.config or {}).get("start_version", self.trainer.version)) if run else self.trainer.version
        await self.trainer.begin(start, fresh=not rows)
        result = RLResult(self.run_id, start)
        in_flight = self._restore(rows, gate, result)
        target = start + self.config.iterations
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                for group_id, group_rows in in_flight.items():
                    group.start_soon(self._resume_group, group_id, group_rows, result)
                group.start_soon(self._sample, group, gate, result)
                if self.config.eval_every and self.trainer.version == start:
                    group.start_soon(self._evaluate, start, result)
                await self.trainer.run(gate, result, target, functools.partial(self._updated, result))
                if self.config.eval_every:  # the final version, whatever E says
                    await self._evaluate(self.trainer.version, result)
                group.cancel_scope.cancel()  # the target is met: groups still sampling are not needed
        except BaseExceptionGroup as group_error:  # one failure cancels the rest: raise it as itself
            raise first_leaf(group_error) from None
        await self._cancel_unfinished()
        result.seconds = time.monotonic() - started
        return result

    # -- resume ------------------------------------------------------------------------------------------------
    def _restore(self, rows: Sequence[Rollout], gate: StalenessGate, result: RLResult) -> dict[str, list[Rollout]]:
        """Rebuild the sampler's state from the run's rows: draws, the curriculum's history, the outstanding
        groups (drawn, not consumed by a checkpoint), and the groups to drive again (rows not final)."""
        consumed = self.trainer.consumed()
        groups: dict[str, list[Rollout]] = {}
        for row in rows:
            if row.meta.get("purpose") == TRAIN and row.group_id:
                groups.setdefault(row.group_id, []).append(row)
        in_flight: dict[str, list[Rollout]] = {}
        finished: list[tuple[int, str, list[Rollout]]] = []
        for group_id, members in sorted(groups.items(), key=lambda kv: int(kv[1][0].meta["draw"]["index"])):
            draw = Draw(**members[0].meta["draw"])
            result.draws.append(draw)
            self._next_draw = max(self._next_draw, draw.index + 1)
            live = live_rows(members)
            if all(RolloutStatus(row.status).is_final for row in live):
                self.curriculum.record(draw.task_id, group_rewards(live))
                finished.append((max(row.finished_seq or 0 for row in live), group_id, live))
            else:
                in_flight[group_id] = members
            if consumed is None or not any(row.id in consumed for row in members):
                gate.outstanding.add(group_id)
        self.trainer.restored([(group_id, live) for _, group_id, live in sorted(finished)], gate, result)
        if groups:
            self.report(f"resumed: {len(groups)} groups drawn, {len(gate.outstanding)} not yet trained, "
                        f"{len(in_flight)} to finish")  # fmt: skip
        return in_flight

    # -- sampler -----------------------------------------------------------------------------------------------
    async def _sample(self, group: anyio.abc.TaskGroup, gate: StalenessGate, result: RLResult) -> None:
        while True:
            await gate.wait_for_room()
            draw = self.curriculum.draw(self._next_draw)
            self._next_draw += 1
            group_id = f"{self.run_id}:draw-{draw.index:05d}"
            gate.drawn(group_id)
            result.draws.append(draw)
            group.start_soon(self._sample_group, draw, group_id, result)

    async def _sample_group(self, draw: Draw, group_id: str, result: RLResult) -> None:
        meta = {"purpose": TRAIN, "draw": draw.to_meta(), "drawn_at_version": self.trainer.version}
        task = self.tasks[draw.task_id]
        rows = await self.session.run_group(self.run_id, task, self.config.group_size, group_id, meta)
        self._group_done(group_id, draw.task_id, rows, result)

    async def _resume_group(self, group_id: str, rows: list[Rollout], result: RLResult) -> None:
        task_id = rows[0].task_id or ""
        done = await self.session.finish_group(self.run_id, group_id, rows, [self.tasks[task_id]])
        self._group_done(group_id, task_id, done, result)

    def _group_done(self, group_id: str, task_id: str, rows: Sequence[Rollout], result: RLResult) -> None:
        self.curriculum.record(task_id, group_rewards(rows))
        result.groups_finished += 1
        self.trainer.group_done(group_id, rows, self._gate, result)

    # -- updates -----------------------------------------------------------------------------------------------
    def _updated(self, result: RLResult, record: StepRecord) -> None:
        """An update landed: record it, start the evaluation every E versions, tell the caller."""
        record.at_s = time.monotonic() - self._started
        result.steps.append(record)
        done = record.version - result.start_version
        if self.config.eval_every and done % self.config.eval_every == 0 and done < self.config.iterations:
            self._group.start_soon(self._evaluate, record.version, result)
        if self.on_update is not None:
            self.on_update(record)

    # -- evaluation ----------------------------------------------------------------------------------------------
    async def _evaluate(self, version: int, result: RLResult, attempt: int = 0) -> None:
        """The held-out split at ``version``, sharing the rollout slots with sampling (one evaluation at a time).

        Its result counts only if every model call of every rollout sampled ``version``; otherwise the rows are
        marked discarded and the evaluation runs again at the version served then (``eval_retries`` times).
        """
        async with self._eval_lock:
            if any(done.version == version for done in result.evals):
                return  # a retry that landed on a version already evaluated
            tag = f"eval-v{version}" + (f"-retry{attempt}" if attempt else "")
            meta = {"purpose": "eval", "policy_version": version}
            rows = await self.session.run_groups(self.run_id, tag, self.eval_tasks, self.config.eval_group, meta)
            book = self.session.book
            seen = await anyio.to_thread.run_sync(book.call_versions, [row.id for row in rows])
            others = sorted({v for versions in seen.values() for v in versions} - {version})
            if not others:
                by_task: dict[str, list[float]] = {}
                for row in rows:
                    by_task.setdefault(row.task_id or "", []).append(group_rewards([row])[0])
                rates = suite_pass_rates(by_task)
                result.evals.append(EvalRecord(version, rates, len(rows), time.monotonic() - self._started))
                self.report(f"held-out at v{version}: pass@1 {rates.get('pass@1', 0.0):.2f} over {len(rows)} rollouts")
                return
            result.evals_discarded += 1
            reason = f"the evaluation of v{version} sampled versions {others} too: a push landed during it"
            for row in rows:
                await anyio.to_thread.run_sync(book.merge_meta, row.id, {"eval_discarded": reason})
            self.report(f"{reason}; discarded" + ("" if attempt >= self.config.eval_retries else ", run again"))
        if attempt < self.config.eval_retries:
            await self._evaluate(self.trainer.version, result, attempt + 1)

    async def _cancel_unfinished(self) -> None:
        """Rows of groups the run no longer needs (sampling when the target was met) end as cancelled."""
        book = self.session.book
        rows = await anyio.to_thread.run_sync(book.rollouts, self.run_id)
        error = "the run reached its target before this rollout ended"
        for row in live_rows(rows):
            status = RolloutStatus(row.status)
            if not status.is_final and row.meta.get("purpose") in (TRAIN, "eval"):
                cancel = functools.partial(book.set_status, row.id, RolloutStatus.CANCELLED, error=error)
                with contextlib.suppress(Conflict):  # it became final meanwhile
                    await anyio.to_thread.run_sync(cancel)


def first_leaf(error: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception in a group that is not itself a group (a cancellation only when nothing else)."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [error]
    while pending:
        item = pending.pop(0)
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        else:
            leaves.append(item)
    real = [leaf for leaf in leaves if not isinstance(leaf, anyio.get_cancelled_exc_class())]
    return (real or leaves)[0]


__all__ = ["EvalRecord", "first_leaf", "RLConfig", "RLLoop", "RLResult", "group_rewards"]
