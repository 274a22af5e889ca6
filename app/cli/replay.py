"""Replay a recorded run: every rollout again (same task, harness, sample index), its MCP tool calls answered from
the recording while they match it (tool name and arguments, in order, per server). At the first call that does
not match, tools go live (or, with --on-divergence stop, every later call is refused), and the report says
where: tool call, model turn, the call expected and the call made. Calls still run on the live servers, so the
checker scores the state they leave. Built-in tools of a harness (Codex's shell, Claude Code's Bash) run live.

Which policy answers: the running stack's (default), another upstream (--upstream URL: an OpenAI-compatible
completions server, e.g. vLLM serving another checkpoint), or a checkpoint of a training run (--policy VERSION
--checkpoints DIR, served by the bundled engine). Those two start a stack of their own on the same store.

  rollwire replay run-20261207-101500 --option temperature=0          # the recorded policy again
  rollwire replay run-20261207-101500 --policy 3 --checkpoints ~/.cache/rollwire/train/rl-1  # checkpoint v3
  rollwire replay run-20261207-101500 --upstream http://127.0.0.1:8200 --on-divergence stop
  rollwire replay --report replay-4f2a9c1b7d3e --json                 # a replay's report again
  rollwire replay run-20261207-101500 --rescore office-v2.json         # new checkers, nothing run again
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rollwire.app.cli.stack_args import (
    add_option_argument,
    add_sandbox_argument,
    add_stack_arguments,
    apply_sandbox_argument,
    default_state_dir,
    harness_options,
    stack_from_args,
)
from rollwire.errors import InvalidRequest, NotFound
from rollwire.settings import Settings

HELP = "run a recorded run's tasks again with tool results from the recording; report where each diverged"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run", metavar="RUN", nargs="?", help="the recorded run (`rollwire traces ls` shows runs)")
    policy = parser.add_argument_group("which policy answers (default: the running stack's)")
    which = policy.add_mutually_exclusive_group()
    which.add_argument("--upstream", metavar="URL", help="an OpenAI-compatible completions server to sample from")
    which.add_argument("--policy", type=int, metavar="VERSION", help="a checkpoint's policy version (--checkpoints)")
    policy.add_argument("--checkpoints", type=Path, metavar="DIR", help="a training run's output folder (step-*)")
    replay = parser.add_argument_group("how to replay")
    replay.add_argument(
        "--on-divergence", choices=["live", "stop"], default="live",
        help="at the first tool call that leaves the recording: go on with live tools (default) or refuse every "
        "later tool call",
    )  # fmt: skip
    replay.add_argument("--harness", default=None, help="harness adapter (default: the recorded run's)")
    add_option_argument(replay)
    replay.add_argument("--runtime", choices=["local", "kubernetes"], default=None, help="where rollouts run")
    replay.add_argument("--concurrency", type=int, default=None, help="most rollouts at once (default: settings)")
    replay.add_argument("--deadline", type=float, default=None, metavar="S", help="seconds one rollout may take")
    replay.add_argument("--run-id", default=None, help="id of the replay run; an existing replay's id resumes it")
    add_sandbox_argument(replay)
    other = parser.add_argument_group("without running the harness")
    other.add_argument("--report", metavar="REPLAY", help="print the report of replay run REPLAY and exit")
    other.add_argument(
        "--rescore", metavar="CHECKER",
        help="score RUN's rollouts again with the checkers of suite CHECKER (a name or a JSON file), task by task: "
        "their recorded tool calls rebuild each one's state, no model or harness runs",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_stack_arguments(parser)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.orchestrator.replay_run import replay_report

    if args.report:
        from rollwire.store import open_engine

        db, _state = _store_and_state(args, settings)
        return _print(replay_report(open_engine(db, read_only=True), args.report), args.json)
    if not args.run:
        raise InvalidRequest("name the recorded RUN (`rollwire traces ls` lists runs), or --report REPLAY")
    if args.rescore:
        return _rescore(args, settings)
    if (args.policy is None) != (args.checkpoints is None):
        raise InvalidRequest("--policy VERSION and --checkpoints DIR go together")
    options = harness_options(args.option)
    settings = apply_sandbox_argument(args, settings)
    with _stack(args, settings) as stack:
        from rich.console import Console

        from rollwire.app.cli.live_line import LiveLine
        from rollwire.app.cli.stack_args import with_served_model
        from rollwire.app.interrupt import run_interruptible
        from rollwire.orchestrator.replay_run import recorded_run, replay_run
        from rollwire.store import open_engine

        engine = open_engine(stack.db_url)
        recorded = recorded_run(engine, args.run)
        harness = args.harness or recorded.harness
        options = with_served_model(harness, options, stack.model)
        orch = settings.orchestrator
        phase = f"replaying {len(recorded.rollouts)} rollouts of {args.run} ({recorded.suite}, {harness})"
        line = LiveLine(Console(stderr=True))
        with line.live:
            result = run_interruptible(
                lambda: replay_run(
                    stack, recorded=args.run, on_divergence=args.on_divergence, harness=harness,
                    runtime=args.runtime or orch.runtime,
                    concurrency=orch.concurrency if args.concurrency is None else args.concurrency,
                    deadline_s=args.deadline, run_id=args.run_id, policy_version=args.policy, harness_options=options,
                    on_progress=lambda progress: line(phase, progress), settings=settings,
                )
            )  # fmt: skip
        code = _print(replay_report(engine, result.run_id), args.json)
    print(f"replay run: {result.run_id}   report again with: rollwire replay --report {result.run_id}", file=sys.stderr)
    return code


@contextmanager
def _stack(args: argparse.Namespace, settings: Settings) -> Iterator[Any]:
    """The stack the replay runs against: the running one, or one of its own (same store and env state) whose
    proxy samples from ``--upstream`` or from the bundled engine serving checkpoint ``--policy``."""
    if args.upstream is None and args.policy is None:
        yield stack_from_args(args, settings)
        return
    from rollwire.app.stack import LocalStack

    db, state = _store_and_state(args, settings)
    logs = settings.home / "replay-logs"
    if args.upstream is not None:
        with LocalStack(settings, upstream=args.upstream, db_url=db, state_dir=state, log_dir=logs) as info:
            yield info
        return
    from rollwire.trainer.checkpoint import checkpoint_of_version

    folder = checkpoint_of_version(args.checkpoints, args.policy)
    with LocalStack(settings, model=str(folder), db_url=db, state_dir=state, log_dir=logs) as info:
        _serve_version(info, folder, args.policy)
        yield info


def _store_and_state(args: argparse.Namespace, settings: Settings) -> tuple[str, Path]:
    """The store and env-state folder a stack of the replay's own shares: ``--db``/``--state-dir``, else the
    running stack's, else the home's."""
    if args.db or args.state_dir:
        return args.db or settings.store_url(), Path(args.state_dir or default_state_dir(settings))
    try:
        running = stack_from_args(args, settings)
        return running.db_url, Path(running.state_root)
    except NotFound:
        return settings.store_url(), Path(default_state_dir(settings))


def _serve_version(info: Any, folder: Path, version: int) -> None:
    """Label what the bundled engine samples with the checkpoint's policy version (engine and proxy)."""
    import httpx

    from rollwire.trainer.weights import EngineReloadSink, ProxyVersionPublisher

    with httpx.Client(timeout=120.0) as client:
        EngineReloadSink(info.engine_url, client).push(folder, version)
        ProxyVersionPublisher(info.admin_url, info.operator_key, client).publish(version)


def _rescore(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.app.interrupt import run_interruptible
    from rollwire.orchestrator.rescore import rescore_lines, rescore_run

    stack = stack_from_args(args, settings)
    result = run_interruptible(lambda: rescore_run(stack, recorded=args.run, checker=args.rescore, run_id=args.run_id))
    if args.json:
        print(json.dumps([o.to_dict() for o in result.outcomes], indent=2))
    else:
        print("\n".join(rescore_lines(result.outcomes)))
    print(f"rescore run: {result.run_id}", file=sys.stderr)
    return 0


def _print(outcomes: list[Any], as_json: bool) -> int:
    from rollwire.orchestrator.replay_run import report_lines

    if as_json:
        print(json.dumps([o.to_dict() for o in outcomes], indent=2))
    else:
        print("\n".join(report_lines(outcomes)))
    return 0


__all__ = ["HELP", "add_arguments", "run"]
