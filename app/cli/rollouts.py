"""Run a task suite through a harness: GROUP_SIZE rollouts of every picked task, each its own process (or Pod),
scored by the suite's checker, recorded in the stack's store.

The stack comes from the file `rollwire up` writes (default), `--stack FILE`, or explicit `--proxy-url`,
`--gateway-url`, `--db` and `--state-dir`. A live bar shows done / running / failed and the mean reward so
far. An interrupted run resumes with `--run-id RUN` (same suite and harness): finished rollouts stay,
only the rest run. Example:

  rollwire rollouts --suite tiny --harness reference --group-size 8 --split train --concurrency 4
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable

from rollwire.app.cli.stack_args import (
    add_option_argument,
    add_sandbox_argument,
    add_stack_arguments,
    apply_sandbox_argument,
    harness_options,
    stack_from_args,
)
from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

HELP = "run a task suite through a harness (G rollouts per task) with a live progress bar"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    what = parser.add_argument_group("what to run")
    what.add_argument("--suite", required=True, help="task suite: a shipped name (`rollwire mcp suites`) or a JSON file")
    what.add_argument("--harness", default="reference", help="harness adapter by name (default: reference)")
    what.add_argument("--group-size", "-G", type=int, default=1, help="rollouts per task (GRPO's G; default 1)")
    what.add_argument("--split", choices=["train", "heldout", "held_out"], default=None, help="only this split")
    what.add_argument("--tasks", default=None, metavar="ID,ID", help="only these task ids (comma-separated)")
    add_option_argument(what)
    how = parser.add_argument_group("how to run")
    how.add_argument("--runtime", choices=["local", "kubernetes"], default=None, help="where rollouts run (default local)")
    how.add_argument("--concurrency", type=int, default=None, help="most rollouts at once (default: settings, 8)")
    how.add_argument("--deadline", type=float, default=None, metavar="S", help="seconds one rollout may take")
    how.add_argument("--run-id", default=None, help="id of the run; an existing run's id resumes it")
    how.add_argument("--name", default="", help="human-readable run name")
    how.add_argument("--policy-version", type=int, default=None, help="policy version the run samples from")
    add_sandbox_argument(how)
    how.add_argument(
        "--metrics-port", type=int, default=None, metavar="PORT",
        help="serve the run's Prometheus metrics at http://HOST:PORT/metrics while it runs (default: off)",
    )  # fmt: skip
    how.add_argument("--metrics-host", default="127.0.0.1", help="interface for --metrics-port (default 127.0.0.1)")
    add_stack_arguments(parser)


def _resume_hint(args: argparse.Namespace, run_id: str) -> str:
    words = ["rollwire", "rollouts", "--suite", args.suite, "--harness", args.harness, "--group-size", str(args.group_size)]
    for flag, value in (("--stack", args.stack), ("--runtime", args.runtime)):
        if value:
            words += [flag, str(value)]
    return shlex.join([*words, "--run-id", run_id])


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rollwire.app.cli.stack_args import with_served_model
    from rollwire.app.interrupt import run_interruptible
    from rollwire.orchestrator.scheduler import Progress as RunProgress
    from rollwire.orchestrator.suite_run import build_adapter, run_suite, select_tasks

    if args.group_size < 1:
        raise InvalidRequest("--group-size must be at least 1")
    if args.metrics_port is not None and not 0 <= args.metrics_port < 65536:
        raise InvalidRequest("--metrics-port must be in 0..65535 (0: any free port)")
    options = harness_options(args.option)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    select_tasks(args.suite, args.split, tasks)  # bad names fail here, before the stack is looked for
    build_adapter(args.harness, options)
    stack = stack_from_args(args, settings)
    options = with_served_model(args.harness, options, stack.model)
    settings = apply_sandbox_argument(args, settings)
    orch = settings.orchestrator
    run_id = args.run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("running {task.fields[running]}  failed {task.fields[failed]}  mean reward {task.fields[reward]}"),
        TimeElapsedColumn(), console=console,
    )  # fmt: skip
    task = bar.add_task(run_id, total=None, running=0, failed=0, reward="-")

    def show(progress: RunProgress) -> None:
        reward = "-" if progress.mean_reward is None else f"{progress.mean_reward:.3f}"
        failed = progress.failed + progress.timed_out
        bar.update(task, total=progress.planned, completed=progress.done, running=progress.running, failed=failed, reward=reward)

    on_progress: Callable[[RunProgress], None] = show
    served = None
    if args.metrics_port is not None:
        from rollwire.metrics import MetricsServer
        from rollwire.orchestrator.metrics import OrchestratorMetrics

        metrics = OrchestratorMetrics()
        on_progress = metrics.observe(show)
        served = MetricsServer(metrics.registry, args.metrics_host, args.metrics_port)
        console.print(f"metrics: {served.url}", markup=False)
    started = time.monotonic()
    try:
        with bar:
            result = run_interruptible(
                lambda: run_suite(
                    stack, suite=args.suite, harness=args.harness, group_size=args.group_size, split=args.split,
                    task_ids=tasks, runtime=args.runtime or orch.runtime, concurrency=orch.concurrency if args.concurrency is None else args.concurrency,
                    deadline_s=args.deadline, run_id=run_id, run_name=args.name, policy_version=args.policy_version,
                    harness_options=options, on_progress=on_progress, settings=settings,
                )
            )  # fmt: skip
    except KeyboardInterrupt:
        print(f"interrupted; resume with: {_resume_hint(args, run_id)}", file=sys.stderr)
        raise
    finally:
        if served is not None:
            served.stop()
    p = result.progress
    reward = "-" if p.mean_reward is None else f"{p.mean_reward:.3f}"
    print(
        f"run {result.run_id}: {p.finished} finished, {p.failed} failed, {p.timed_out} timed out"
        f" ({p.retried} retried) of {p.planned}; mean reward {reward}; {time.monotonic() - started:.1f}s"
    )
    print(f"run id: {result.run_id}   resume with: {_resume_hint(args, result.run_id)}")
    if p.planned and p.finished == 0:
        errors = [row.error for row in result.rollouts if row.error]
        print(f"rollwire rollouts: no rollout finished; first error: {errors[0] if errors else 'none'}", file=sys.stderr)
        return 1
    return 0


__all__ = ["HELP", "add_arguments", "run"]
