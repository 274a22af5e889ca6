"""What ``rollwire rl`` and its demo preset share: the stack in the run's folder, the learner's settings, and the
loop run against them, so the demo is the same loop with a warm start and evaluations around it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from rollwire.app.interrupt import run_interruptible
from rollwire.app.stack import LocalStack, StackInfo
from rollwire.errors import RollwireError
from rollwire.settings import Settings, TrainerSettings

if TYPE_CHECKING:
    from rollwire.app.rl.learner import Learner
    from rollwire.app.rl.loop import RLConfig, RLResult
    from rollwire.app.rl.trainers import StepRecord, Trainer
    from rollwire.orchestrator.scheduler import Progress


@dataclass(frozen=True, slots=True)
class Rollouts:
    """Where and how the loop's rollouts run."""

    suite: str = "tiny"
    harness: str = "reference"
    runtime: str = "local"
    concurrency: int = 8
    deadline_s: float = 120.0
    harness_options: Mapping[str, object] = field(default_factory=dict)
    task_ids: Sequence[str] = ()
    """The train tasks the curriculum draws from (empty: the whole train split)."""


@dataclass(frozen=True, slots=True)
class Serving:
    """What serves the policy: the bundled engine, vLLM's CPU build (``vllm``), or a running vLLM (``upstream``)."""

    engine: str = "bundled"
    upstream: str | None = None
    model: str | None = None

    @property
    def on_vllm(self) -> bool:
        return bool(self.upstream) or self.engine == "vllm"


def local_stack(
    settings: Settings, out_dir: Path, serving: Serving, suite: str, seed: int, engine_threads: int = 0
) -> LocalStack:
    """The stack of one run, its store, env state and logs in ``out_dir`` (a rerun finds them there);
    ``engine_threads``: the bundled engine's torch threads (0: its default, one)."""
    if Path(suite).suffix:  # a suite file: the env servers may seed its tasks
        mcp = settings.mcp.model_copy(update={"suites": [*settings.mcp.suites, suite]})
        settings = settings.model_copy(update={"mcp": mcp})
    return LocalStack(
        settings,
        upstream=serving.upstream,
        model=serving.model,
        db_url=f"sqlite:///{out_dir / 'store.db'}",
        state_dir=out_dir / "mcp_state",
        log_dir=out_dir / "logs",
        engine=serving.engine,
        engine_args=["--threads", str(engine_threads)] if engine_threads and serving.engine == "bundled" else [],
        proxy_args=["--no-adhoc-run"],  # the store holds this run's rollouts and nothing else
        proxy_env={"ROLLWIRE_PROXY__SAMPLE_SEED": str(seed)},  # the same run samples alike again
    )


def learner_settings(
    base: TrainerSettings, info: StackInfo, serving: Serving, *, max_lag: int, **recipe: object
) -> TrainerSettings:
    """The learner's settings: the stack's proxy and engine, and the recipe's fields (lr, seed, group_size, ...).

    The engine's address goes where `rollwire train` has it, so the weight sinks and the automatic
    importance-sampling correction read it the same way: TIS with vLLM (its logprobs drift from the trainer's),
    and TIS whenever sampling runs ahead of training (``max_lag`` >= 1: tokens of older policies); none with the
    bundled engine in lockstep, whose logprobs are the trainer's own.
    """
    update: dict[str, object] = {
        "admin_url": info.admin_url, "operator_key": info.operator_key, "keep_checkpoints": 2,  # the recipe may say more
        "engine_url": "" if serving.on_vllm else info.engine_url or "",
        "vllm_url": (serving.upstream or info.engine_url or "") if serving.on_vllm else "",
        **recipe,
    }  # fmt: skip
    if base.is_correction == "auto" and max_lag >= 1:
        update["is_correction"] = "tis"
    return base.model_copy(update=update)


@dataclass(slots=True)
class SlotMeter:
    """Integrates the scheduler's held slots over time (``Progress.occupied``: a rollout starting, running or being
    scored): the rollout-seconds the slots were busy."""

    clock: Callable[[], float] = time.monotonic
    busy_s: float = 0.0
    _held: int = 0
    _since: float | None = None

    def restart(self) -> None:
        """Count from now, from zero (the held count stays what the last progress said)."""
        self.busy_s, self._since = 0.0, self.clock()

    def __call__(self, progress: Progress) -> None:
        self._advance()
        self._held = progress.occupied

    def _advance(self) -> None:
        now = self.clock()
        self.busy_s += self._held * (now - (self._since if self._since is not None else now))
        self._since = now

    def stop(self) -> float:
        self._advance()
        return self.busy_s


def run_loop(
    info: StackInfo,
    trainer: Learner | Callable[[], AbstractAsyncContextManager[Trainer]],
    config: RLConfig,
    rollouts: Rollouts,
    *,
    run_id: str,
    settings: Settings,
    report: Callable[[str], None],
    on_progress: Callable[[Progress], None] | None = None,
    on_update: Callable[[StepRecord], None] | None = None,
    run_meta: dict[str, object] | None = None,
    platform_fault: Callable[[], str | None] | None = None,
) -> RLResult:
    """``RLLoop`` on the stack until ``config.iterations`` updates; SIGINT/SIGTERM stop it cleanly (resumable).

    ``trainer``: a learner, stepped here on the run's trajectory stream, or what opens (in the loop's event
    loop) a trainer that runs elsewhere (``remote.followed_trainer``).

    With ``platform_fault`` (``LocalStack.failed_part``), a part of the stack that exits stops the run with one line
    (its rollouts still running are left for the rerun, which retries them as the platform's failures), and a
    rollout that ends while a part is down is retried, not scored.
    """
    from rollwire.app.rl.learner import Learner
    from rollwire.app.rl.loop import RLLoop, first_leaf
    from rollwire.app.rl.trainers import InProcessTrainer
    from rollwire.orchestrator.suite_run import open_suite
    from rollwire.trainer.stream import StreamConfig, TrajectoryStream

    stream = TrajectoryStream(StreamConfig(info.admin_url, info.operator_key, run_id, wait_s=1.0))
    opened: Callable[[], AbstractAsyncContextManager[Trainer]]
    if isinstance(trainer, Learner):
        here = InProcessTrainer(trainer, stream, groups_per_step=config.groups_per_step, epochs=config.epochs,
                                dynamic_sampling=config.dynamic_sampling, report=report)  # fmt: skip
        opened = functools.partial(_as_context, here)
    else:
        opened = trainer
    meter = SlotMeter()

    def progress(p: Progress) -> None:
        meter(p)
        if on_progress is not None:
            on_progress(p)

    async def main() -> RLResult:
        try:
            return await session_loop()
        except BaseExceptionGroup as error:  # the watcher's line, the loop's or the trainer's error, as itself
            raise first_leaf(error) from None  # (a runtime with tasks of its own, Kubernetes's, groups it again)

    async def session_loop() -> RLResult:
        async with open_suite(
            info, suite=rollouts.suite, harness=rollouts.harness, runtime=rollouts.runtime,
            concurrency=rollouts.concurrency, deadline_s=rollouts.deadline_s, harness_options=rollouts.harness_options,
            on_progress=progress, settings=settings, platform_fault=platform_fault,
        ) as session, opened() as steps:  # fmt: skip
            tasks = session.tasks("train", list(rollouts.task_ids) or None)
            held_out = session.tasks("held_out") if config.eval_every else []
            loop = RLLoop(session, steps, config, run_id=run_id, tasks=tasks, report=report,
                          on_update=on_update, run_meta=run_meta, eval_tasks=held_out)  # fmt: skip
            meter.restart()  # the loop's own time, not the session's start-up
            async with anyio.create_task_group() as group:
                if platform_fault is not None:
                    group.start_soon(_watch, platform_fault)
                result = await loop.run()
                group.cancel_scope.cancel()
            result.slot_busy_s, result.concurrency = meter.stop(), rollouts.concurrency
            return result

    try:
        return run_interruptible(main)
    finally:
        stream.close()


@asynccontextmanager
async def _as_context(trainer: Trainer) -> AsyncIterator[Trainer]:
    yield trainer


WATCH_EVERY_S = 0.5


async def _watch(platform_fault: Callable[[], str | None]) -> None:
    """Stop the run when a part of the stack exits (a process exit has no event to wait on: it is polled)."""
    while True:
        fault = platform_fault()
        if fault is not None:
            raise RollwireError(f"{fault}: the run stopped; the same command (same --run-id and --out) resumes it")
        await anyio.sleep(WATCH_EVERY_S)


__all__ = ["Rollouts", "Serving", "SlotMeter", "learner_settings", "local_stack", "run_loop"]
