"""The demo preset of ``rollwire rl`` on one machine: teacher data -> SFT -> eval -> the RL loop -> eval -> report.

Every rollout is a real harness process (the reference agent by default) on the orchestrator's local
runtime, talking to the real proxy, gateway and env servers of a ``LocalStack``; rewards come from the
suite's checkers; trajectories come back through the proxy's trajectory stream. The teacher is a scripted
expert behind its own proxy on the same store, so its calls are recorded token by token like any other.
The GRPO phase is ``RLLoop`` itself (``rollwire.app.rl``): curriculum draws, dynamic sampling and sampling
up to ``max_lag`` updates ahead of the trainer. Every phase's run id derives from the demo's run id, so the same
command with the same ``--out`` and ``--run-id`` resumes a killed demo where it stopped.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rollwire.app.interrupt import run_interruptible
from rollwire.app.rl.learner import step_detail
from rollwire.app.rl.runner import Rollouts, Serving, local_stack, run_loop
from rollwire.app.stack import LocalStack, StackInfo
from rollwire.errors import InvalidRequest, RollwireError
from rollwire.orchestrator.scheduler import Progress
from rollwire.settings import Settings, TrainerSettings
from rollwire.store.schema import Rollout
from rollwire.trainer.trackers.base import Tracker, scalars

if TYPE_CHECKING:
    from rollwire.app.rl.loop import RLResult
    from rollwire.app.rl.trainers import StepRecord


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """The recipe. Defaults are the measured recipe for the tiny model on the tiny suite (docs/architecture.md)."""

    suite: str = "tiny"
    harness: str = "reference"
    runtime: str = "local"
    engine: str = "bundled"
    """What serves the model without --upstream: the bundled engine or vLLM's CPU build (``vllm``)."""
    iterations: int = 12
    group_size: int = 8
    teacher_group: int = 1
    sft_epochs: int = 6
    sft_batch: int = 8
    sft_lr: float = 1e-3
    """Low on purpose: SFT teaches the call just enough that some train rollouts earn reward, and RL the rest.
    At 3e-3 SFT alone reaches most of the held-out reward and leaves RL little to show."""
    grpo_lr: float = 3e-4
    grpo_epochs: int = 4
    max_lag: int = 0
    """Updates the sampler may run ahead of the trainer (0: lockstep sampling and training)."""
    dynamic_sampling: bool = True
    """Leave out task groups whose rewards are all equal and draw others in their place."""
    curriculum_floor: float = 0.05
    """Least draw weight of a train task (0.25: every task drawn alike)."""
    aggregation: str = "sequence-mean"
    """GRPO loss aggregation: sequence-mean (each rollout counts once) or token-mean."""
    std_scale: str = "group"
    """Divide each group's advantages by its reward std (group), the batch's (batch), or not (none)."""
    clip_high: float = 0.28
    """PPO clip's upper bound is 1 + clip_high (clip-higher: rare right answers can grow faster)."""
    lora_rank: int = 0
    """Train LoRA adapters of this rank (SFT and GRPO) instead of every weight (0)."""
    engine_threads: int = 0
    """The bundled engine's torch threads (0: its default, one). In lockstep the trainer is idle while rollouts
    sample, so a larger model decodes faster on every core."""
    micro_batch_tokens: int = 0
    """Tokens in one forward/backward micro-batch (0: the trainer's setting); a larger vocabulary wants fewer."""
    fresh_optimizer: bool = True
    """Start GRPO with a new AdamW instead of the SFT one (whose moments would shrink GRPO's steps)."""
    eval_group: int = 8
    train_tasks: int = 0
    """Use only the first N train tasks (0: all); a shortened demo."""
    teacher_tasks: int = 8
    """The teacher solves the first N train tasks (0: all); RL then meets tasks SFT never saw."""
    tasks_per_iteration: int = 8
    """Task groups (with a reward spread) per GRPO update, drawn by the learnability curriculum."""
    eval_tasks: int = 0
    """Evaluate on only the first N held-out tasks (0: all)."""
    temperature: float = 1.0
    max_tokens: int = 64
    max_turns: int = 1
    concurrency: int = 8
    deadline_s: float = 120.0
    seed: int = 0
    upstream: str | None = None
    model: str | None = None
    keep_checkpoints: int = 2
    """Checkpoints kept in ``<out>/checkpoints`` (``bench/async_rl.py`` keeps every version to evaluate it)."""
    run_id: str = "demo"
    """The demo's run; its phases are ``<run_id>.teacher``, ``<run_id>.eval-v<version>`` and the RL run itself."""

    def __post_init__(self) -> None:
        for name in (
            "train_tasks",
            "eval_tasks",
            "teacher_tasks",
            "max_lag",
            "lora_rank",
            "micro_batch_tokens",
            "engine_threads",
        ):
            if getattr(self, name) < 0:
                raise InvalidRequest(f"--{name.replace('_', '-')} must be 0 (all) or more", param=name)
        for name in (
            "iterations",
            "group_size",
            "teacher_group",
            "sft_batch",
            "eval_group",
            "concurrency",
            "max_turns",
            "tasks_per_iteration",
        ):
            if getattr(self, name) < 1:
                raise InvalidRequest(f"--{name.replace('_', '-')} must be at least 1", param=name)
        if self.group_size < 2:
            raise InvalidRequest("--group-size must be at least 2: GRPO compares rollouts within a group")
        if self.runtime not in ("local", "kubernetes"):
            raise InvalidRequest("--runtime must be local or kubernetes", param="runtime")
        if self.engine not in ("bundled", "vllm"):
            raise InvalidRequest("--engine must be bundled or vllm", param="engine")
        if self.std_scale not in ("group", "batch", "none"):
            raise InvalidRequest("--std-scale must be group, batch or none", param="std_scale")
        if self.clip_high <= 0:
            raise InvalidRequest("--clip-high must be above 0", param="clip_high")
        if self.aggregation not in ("sequence-mean", "token-mean"):
            raise InvalidRequest("--aggregation must be sequence-mean or token-mean", param="aggregation")
        if self.upstream and not self.model:
            raise InvalidRequest("--upstream needs --model: the local folder of the served model (tokenizer, weights)")

    @property
    def serving(self) -> Serving:
        return Serving(self.engine, self.upstream, self.model)

    @property
    def rollouts(self) -> Rollouts:
        """The RL loop's rollouts (``train_tasks``: the first N of the train split)."""
        from rollwire.orchestrator.suite_run import select_tasks

        ids = [task.id for task in select_tasks(self.suite, "train")]
        return Rollouts(self.suite, self.harness, self.runtime, self.concurrency, self.deadline_s,
                        self.harness_options(), tuple(ids[: self.train_tasks] if self.train_tasks else ids))  # fmt: skip

    def harness_options(self) -> dict[str, object]:
        if self.harness != "reference":
            return {}
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "max_turns": self.max_turns}


PRESETS: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "lora_rank": 16,
        "micro_batch_tokens": 1024,
        "engine_threads": 2,
        "teacher_tasks": 8,
        "sft_epochs": 2,
        "sft_lr": 8.5e-4,
        "grpo_lr": 3e-4,
        "grpo_epochs": 1,
        "iterations": 10,
        "group_size": 8,
        "tasks_per_iteration": 4,
        "concurrency": 16,
    },
}
"""Measured recipes by model name, over ``DemoConfig``'s defaults (the tiny model's); flags given beat them.
SmolLM2's is sized for two cores: LoRA (1.15x the tokens/s of full fine-tuning there), two SFT steps that leave its
held-out reward low, and ten GRPO updates of four groups (docs/models.md has the run's figures)."""


def demo_config(model: str | None = None, **flags: Any) -> DemoConfig:
    """The recipe for ``model`` (its preset, if it has one) with ``flags`` over it."""
    return DemoConfig(**{**PRESETS.get(model or "", {}), "model": model, **flags})


@dataclass(slots=True)
class PhaseResult:
    name: str
    run_id: str
    rewards: list[float]
    policy_version: int
    seconds: float
    failed: int = 0
    tag: str = ""
    """The phase's groups in the run: ``<run_id>:<tag>:<task>`` (empty: the RL loop's own groups)."""

    @property
    def group_prefix(self) -> str:
        return f"{self.run_id}:{self.tag}:" if self.tag else f"{self.run_id}:draw-"

    @property
    def mean(self) -> float:
        return sum(self.rewards) / len(self.rewards) if self.rewards else 0.0


@dataclass(slots=True)
class DemoResult:
    config: DemoConfig
    out_dir: Path
    stack: StackInfo
    teacher: PhaseResult | None = None
    before: PhaseResult | None = None
    after: PhaseResult | None = None
    iterations: list[PhaseResult] = field(default_factory=list)
    rl: RLResult | None = None
    train_metrics: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def gain(self) -> float:
        return (self.after.mean if self.after else 0.0) - (self.before.mean if self.before else 0.0)


class Reporter(Protocol):
    """Called with the phase's name, the live rollout counts (None outside rollout phases) and a detail (a
    training step's step / steps, loss and tokens/s)."""

    def __call__(self, phase: str, progress: Progress | None, detail: str = "") -> None: ...


def trainer_settings(config: DemoConfig, base: TrainerSettings, info: StackInfo) -> TrainerSettings:
    """The learner's settings for this demo (``learner_settings``): the stack's proxy and engine, the recipe's rates."""
    from rollwire.app.rl.runner import learner_settings

    return learner_settings(
        base, info, config.serving, max_lag=config.max_lag, lr=config.sft_lr, seed=config.seed,
        group_size=config.group_size, std_scale=config.std_scale, clip_high=config.clip_high,
        keep_checkpoints=config.keep_checkpoints, lora_rank=config.lora_rank,
        **({"micro_batch_tokens": config.micro_batch_tokens} if config.micro_batch_tokens else {}),
    )  # fmt: skip


class Demo:
    """Runs the phases against a started stack; ``run`` returns what the report needs."""

    def __init__(
        self, config: DemoConfig, settings: Settings, out_dir: Path, report: Reporter, tracker: Tracker | None = None
    ) -> None:
        self.config, self.settings, self.out_dir, self.report = config, settings, out_dir, report
        self.tracker = tracker
        """Also gets every optimizer step's metrics (``sft/...``, ``grpo/...``) and each phase's mean reward."""
        self._fault: Callable[[], str | None] | None = None
        """The stack's ``failed_part`` once it runs."""

    def _on_step(self, phase: str, kind: str, learner: Any) -> Callable[[int, int, dict[str, Any]], None]:
        """The learner's step callback: the live line, and the tracker at the learner's overall step count."""
        return self._on_step_of([phase], kind, learner)

    def _on_step_of(self, phase: list[str], kind: str, learner: Any) -> Callable[[int, int, dict[str, Any]], None]:
        """``_on_step`` for a phase whose name changes as it goes (``phase[0]``: the RL loop's update line)."""

        def on_step(step: int, steps: int, metrics: dict[str, Any]) -> None:
            self.report(phase[0], None, step_detail(step, steps, metrics))
            if self.tracker is not None:
                self.tracker.log(learner.session.state.step, scalars(metrics, f"{kind}/"))

        return on_step

    def _track_phase(self, kind: str, phase: PhaseResult, learner: Any) -> None:
        if self.tracker is not None:
            self.tracker.log(learner.session.state.step, {f"rollouts/{kind}_mean_reward": phase.mean})

    def run(self) -> DemoResult:
        started = time.monotonic()
        config = self.config
        stack = local_stack(
            self.settings, self.out_dir, config.serving, config.suite, config.seed, config.engine_threads
        )
        self.report("starting the stack (engine, env servers, gateway, proxy)", None)
        with stack as info:
            result = DemoResult(self.config, self.out_dir, info)
            self._phases(stack, info, result)
        result.seconds = time.monotonic() - started
        return result

    def _phases(self, stack: LocalStack, info: StackInfo, result: DemoResult) -> None:
        from rollwire.app.rl.learner import Learner, read_run

        config = self.config
        self._fault = stack.failed_part  # every phase's rollouts: one that ends while a part is down is retried
        model_dir = self._model_dir()
        trainer = trainer_settings(config, self.settings.trainer, info)
        learner = Learner.open(model_dir, self.out_dir / "checkpoints", trainer)
        try:
            result.teacher = self._teacher(stack, info, model_dir)
            self._track_phase("teacher", result.teacher, learner)
            if learner.version == 0:  # a resumed demo whose SFT is in its checkpoint skips it
                teacher_runs = read_run(info.admin_url, info.operator_key, config.run_id, len(result.teacher.rewards),
                                        keep=lambda t: t.purpose == "teacher")  # fmt: skip
                sft_phase = f"SFT warm start on {len(teacher_runs)} teacher trajectories"
                self.report(sft_phase, None, "step 0")
                learner.on_step = self._on_step(sft_phase, "sft", learner)
                result.train_metrics += [m | {"phase": "sft"} for m in learner.sft(
                    teacher_runs, epochs=config.sft_epochs, batch_size=config.sft_batch, seed=config.seed)]  # fmt: skip
            if learner.version == 1:  # the first GRPO update has not been made: the start of RL
                learner.set_lr(config.grpo_lr, fresh=config.fresh_optimizer)
            else:  # resumed: the checkpoint's optimizer is GRPO's, at its rate
                learner.set_lr(config.grpo_lr)
            learner.settings = learner.settings.model_copy(update={"aggregation": config.aggregation})
            result.before = self._rollouts(info, "eval before RL", "held_out", config.eval_group, 1, "eval")
            self._track_phase("eval", result.before, learner)
            result.rl = self._rl(info, learner, result)
            result.after = self._rollouts(info, "eval after RL", "held_out", config.eval_group, learner.version, "eval")
            self._track_phase("eval", result.after, learner)
        finally:
            learner.close()

    def _rl(self, info: StackInfo, learner: Any, result: DemoResult) -> RLResult:
        """The GRPO phase: ``rollwire rl``'s loop on the train split, its updates reported as the demo's iterations."""
        from rollwire.app.rl.loop import RLConfig

        config = self.config
        rl = RLConfig(
            iterations=config.iterations, group_size=config.group_size, groups_per_step=config.tasks_per_iteration,
            max_lag=config.max_lag, epochs=config.grpo_epochs, dynamic_sampling=config.dynamic_sampling,
            seed=config.seed, curriculum_floor=config.curriculum_floor,
        )  # fmt: skip
        phase = [f"GRPO ({config.iterations} updates, sampling up to {config.max_lag} ahead)"]

        def on_line(line: str) -> None:
            phase[0] = f"GRPO {line}"
            self.report(phase[0], None)

        learner.on_step = self._on_step_of(phase, "grpo", learner)

        def on_update(step: StepRecord) -> None:
            k = len(result.iterations) + 1
            done = PhaseResult(f"GRPO update {k}", config.run_id, step.rewards, step.version, step.seconds)
            result.iterations.append(done)
            self._track_phase("grpo", done, learner)
            result.train_metrics += [m | {"phase": "grpo", "iteration": k} for m in step.metrics]

        self.report(phase[0], None)
        outcome = run_loop(info, learner, rl, config.rollouts, run_id=config.run_id, settings=self.settings,
                           report=on_line, on_progress=lambda p: self.report(phase[0], p), on_update=on_update,
                           run_meta=self._run_meta(), platform_fault=self._fault)  # fmt: skip
        return outcome

    def _model_dir(self) -> Path:
        from rollwire.model_names import resolve_model

        return resolve_model(self.config.model, self.settings.home)

    def _teacher(self, stack: LocalStack, info: StackInfo, model_dir: Path) -> PhaseResult:
        from rollwire.app.demo.teacher import build_teacher_app
        from rollwire.app.serving import ServerThread
        from rollwire.mcp_servers.tasks.loader import load_suite

        app = build_teacher_app(model_dir, [load_suite(self.config.suite)], info.model)
        with ServerThread(app) as teacher:
            proxy = stack.add_proxy("proxy-teacher", teacher.url)
            return self._rollouts(
                dataclasses.replace(info, proxy_url=proxy), "teacher data (scripted expert)", "train",
                self.config.teacher_group, 0, "teacher", self._task_ids("train", self.config.teacher_tasks),
            )  # fmt: skip

    def _task_ids(self, split: str, limit: int = 0) -> list[str]:
        """The split's tasks (first ``train_tasks``/``eval_tasks``), then the first ``limit`` of them (0: all)."""
        from rollwire.orchestrator.suite_run import select_tasks

        cap = self.config.train_tasks if split == "train" else self.config.eval_tasks
        ids = [task.id for task in select_tasks(self.config.suite, split)]
        ids = ids[:cap] if cap else ids
        return ids[:limit] if limit else ids

    def _run_meta(self) -> dict[str, object]:
        """The run's config as every phase opens it (whichever opens it first creates it): an RL run from v1."""
        return {"kind": "rl", "start_version": 1, "demo": dataclasses.asdict(self.config)}

    def _rollouts(
        self,
        info: StackInfo,
        name: str,
        split: str,
        group: int,
        version: int,
        kind: str,
        task_ids: list[str] | None = None,
    ) -> PhaseResult:
        """One group per task in the demo's run, tagged ``teacher`` or ``eval-v<version>`` (a rerun finishes them)."""
        from rollwire.orchestrator.suite_run import open_suite

        config, started = self.config, time.monotonic()
        tag = kind + (f"-v{version}" if kind == "eval" else "")
        meta = {"purpose": kind, "phase": name, "policy_version": version}

        async def main() -> list[Rollout]:
            async with open_suite(
                info, suite=config.suite, harness=config.harness, runtime=config.runtime,
                concurrency=config.concurrency, deadline_s=config.deadline_s, harness_options=config.harness_options(),
                on_progress=lambda p: self.report(name, p), settings=self.settings, platform_fault=self._fault,
            ) as session:  # fmt: skip
                await session.open_run(config.run_id, config.run_id, self._run_meta(), "train", 1, config.group_size)
                tasks = session.tasks(split, task_ids or self._task_ids(split))
                return await session.run_groups(config.run_id, tag, tasks, group, meta)

        self.report(name, Progress())
        rows: list[Rollout] = run_interruptible(main)
        # A rollout that did not finish (harness crashed, deadline) scores 0: an honest mean counts it.
        rewards = [float(r.reward or 0.0) if r.status == "finished" else 0.0 for r in rows]
        failed = sum(1 for r in rows if r.status != "finished")
        if failed == len(rows):
            errors = sorted({(r.error or "")[:200] for r in rows})
            raise RollwireError(f"{name}: no rollout finished ({len(rows)} failed; e.g. {errors[:2]})")
        return PhaseResult(name, config.run_id, rewards, version, time.monotonic() - started, failed, tag)


__all__ = ["PRESETS", "Demo", "DemoConfig", "DemoResult", "demo_config", "PhaseResult", "Reporter", "trainer_settings"]
