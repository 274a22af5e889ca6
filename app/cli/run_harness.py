"""Run one harness on one task against a running local stack, and say how it went and where its trace is.

The harness is an adapter by name (`reference`, `codex`, `claude-code`, `openai-agents`, `mini-swe-agent`, or
one a package registers); it runs as its own process in a fresh workspace, with its config written there,
its model calls going through the proxy and its tool calls through the MCP gateway. The stack comes from
the file `rollwire up` writes (default), `--stack FILE`, or explicit `--proxy-url`, `--gateway-url`, `--db`
and `--state-dir`. Prints the rollout id, status, reward, exit status and how to look at the trace.
Exit status 0 when the rollout finished (whatever its reward), 1 when it failed or timed out. Examples:

  rollwire run-harness reference --task write-cat
  rollwire run-harness codex --task write-cat --suite tiny --option sandbox=workspace-write
  rollwire run-harness claude-code --task write-cat --option max_turns=4 --option 'tools=""'
"""

from __future__ import annotations

import argparse
import shlex

from rollwire.app.cli.stack_args import (
    add_option_argument,
    add_sandbox_argument,
    add_stack_arguments,
    apply_sandbox_argument,
    harness_options,
    stack_from_args,
    with_served_model,
)
from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

HELP = "run one harness on one task against the running local stack; prints the rollout, reward and trace"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("harness", metavar="NAME", help="harness adapter by name (e.g. reference, codex, claude-code)")
    parser.add_argument("--task", required=True, metavar="ID", help="task id in the suite (e.g. write-cat)")
    parser.add_argument("--suite", default="tiny", help="task suite: a shipped name or a JSON file (default: tiny)")
    add_option_argument(parser)
    parser.add_argument("--deadline", type=float, default=None, metavar="S", help="seconds the harness may take")
    parser.add_argument("--keep-workspace", action="store_true", help="keep the rollout's workspace to look at")
    add_sandbox_argument(parser)
    add_stack_arguments(parser)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.app.interrupt import run_interruptible
    from rollwire.orchestrator.suite_run import build_adapter, run_suite, select_tasks

    if args.deadline is not None and args.deadline <= 0:
        raise InvalidRequest("--deadline must be a positive number of seconds")
    options = harness_options(args.option)
    select_tasks(args.suite, task_ids=[args.task])  # a bad suite or task fails here, before the stack is looked for
    build_adapter(args.harness, options)
    stack = stack_from_args(args, settings)
    options = with_served_model(args.harness, options, stack.model)
    settings = apply_sandbox_argument(args, settings)
    if args.keep_workspace:
        orch = settings.orchestrator.model_copy(update={"keep_workspaces": True})
        settings = settings.model_copy(update={"orchestrator": orch})
    print(f"running {args.harness} on {args.suite}:{args.task} against {stack.proxy_url} ...", flush=True)
    result = run_interruptible(
        lambda: run_suite(
            stack, suite=args.suite, harness=args.harness, task_ids=[args.task], runtime="local", concurrency=1,
            deadline_s=args.deadline, run_name=f"run-harness {args.harness}", harness_options=options,
            settings=settings,
        )
    )  # fmt: skip
    (row,) = result.rollouts
    reward = "-" if row.reward is None else f"{row.reward:.3f}"
    print(f"rollout   {row.id}  (run {result.run_id})")
    print(f"status    {row.status}   reward {reward}   exit status {row.exit_code}")
    if row.error:
        print(f"error     {row.error}")
    if row.final_answer:
        print(f"answer    {row.final_answer.strip()[:400]}")
    if row.status != "finished" and row.log_tail:
        print("log tail  " + "\n          ".join(row.log_tail.splitlines()[-10:]))
    settings = apply_sandbox_argument(args, settings)
    if args.keep_workspace:
        root = settings.orchestrator.workspace_root or "<system temp folder>"
        print(f"workspace {root}/rollwire-{row.id}/workspace")
    print(f"trace     {shlex.join(['rollwire', 'traces', '--db', stack.db_url, 'show', row.id])}")
    if viewer := stack.viewer_url(f"#/rollout/{row.id}"):
        print(f"viewer    {viewer}")
    return 0 if row.status == "finished" else 1


__all__ = ["HELP", "add_arguments", "run"]
