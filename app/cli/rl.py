"""Continuous RL on a task suite: rollouts and training overlapped, in one command.

It starts a stack for the run (the bundled engine serving --model, the env servers, the gateway, the proxy and a
store in the run's folder), or joins a running one (--stack: the file `rollwire up` writes), then samples task groups continuously at --concurrency against the newest policy
and trains on groups as they complete: each update takes --groups-per-step groups with a reward spread,
makes --epochs clipped passes, checkpoints, pushes the weights to the engine and publishes the new policy version.

  --max-lag K    sampling runs at most K updates ahead of training (K = 0: sample, stop, train, push, repeat);
                 with K >= 1 the importance-sampling correction (TIS) is on by default
  curriculum     tasks are drawn by learnability, p(1-p) of each task's recent pass rate (floored), seeded;
                 a group whose rewards all agree is left out and another is drawn (--no-dynamic-sampling: kept)

Ctrl-C or `kill` stops it cleanly; the same command with the same --out and --run-id (killed in any way, even
kill -9) resumes from the last checkpoint and the stream's cursor: no group is trained twice or lost.
The policy must already earn some reward on the suite (a task no rollout ever solves teaches nothing):
start from a warm model with --model FOLDER (a checkpoint of `rollwire train` or `rollwire demo`). Example:

  rollwire rl --suite tiny --model ~/.rollwire/demo/<time>/checkpoints/step-000040 -K 20 --max-lag 1   # one ahead
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import secrets
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from rollwire.app.cli.live_line import LiveLine
from rollwire.app.cli.stack_args import add_option_argument, harness_options
from rollwire.app.interrupt import stop_on_sigterm
from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

if TYPE_CHECKING:
    from rollwire.app.rl.loop import RLResult
    from rollwire.app.stack import StackInfo
    from rollwire.orchestrator.runtimes.kubernetes.trainer_job import TrainerRecipe

HELP = "continuous RL: rollouts and GRPO overlapped with bounded staleness, a learnability curriculum, resumable"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    what = parser.add_argument_group("what to train")
    what.add_argument("--suite", required=True, help="task suite: a shipped name (`rollwire mcp suites`) or a JSON file")
    what.add_argument("--harness", default="reference", help="harness adapter by name (default: reference)")
    what.add_argument("--tasks", metavar="ID,ID", help="draw only these train tasks (default: the whole train split)")
    what.add_argument("--model", metavar="NAME|FOLDER",
                      help="the policy to start from: tiny (default), smollm2-135m or a local HF folder")  # fmt: skip
    add_option_argument(what)
    loop = parser.add_argument_group("the loop")
    loop.add_argument("--iterations", "-K", type=int, default=12, help="policy updates to make (default 12)")
    loop.add_argument("--group-size", "-G", type=int, default=8, help="rollouts per task group (default 8)")
    loop.add_argument("--groups-per-step", type=int, default=8, help="groups with a reward spread per update (default 8)")
    loop.add_argument("--max-lag", type=int, default=0,
                      help="updates sampling may run ahead of training; 0, the default, is lockstep (on one machine "
                      "overlap was faster per update but, with its default TIS, learned less: see bench/async_rl.py)")  # fmt: skip
    loop.add_argument("--epochs", type=int, default=4, help="clipped passes over each update's groups (default 4)")
    loop.add_argument("--lr", type=float, default=3e-4, help="learning rate (default 3e-4)")
    loop.add_argument("--lora-rank", type=int, default=0,
                      help="train LoRA adapters of this rank (the lora extra), 0: every weight (default 0)")  # fmt: skip
    loop.add_argument("--no-dynamic-sampling", dest="dynamic_sampling", action="store_false",
                      help="train on every group, even one whose rewards all agree")  # fmt: skip
    loop.add_argument("--curriculum-floor", type=float, default=0.05,
                      help="least draw weight of a task (the most is 0.25, at pass rate 0.5); 0.25: uniform draws "
                      "(default 0.05)")  # fmt: skip
    loop.add_argument("--eval-every", type=int, default=0, metavar="E",
                      help="evaluate the held-out split every E versions and at the end, beside training; a result "
                      "counts only if all its tokens came from that one version (default 0: no evaluations)")  # fmt: skip
    loop.add_argument("--eval-group", type=int, default=4, help="rollouts per held-out task in an evaluation (default 4)")
    loop.add_argument("--seed", type=int, default=0, help="seed of the trainer, the draws and sampling (default 0)")
    how = parser.add_argument_group("where it runs")
    how.add_argument("--runtime", choices=["local", "kubernetes"], default="local", help="where rollouts run (default local)")
    how.add_argument("--trainer", choices=["here", "job", "external"], default=None,
                     help="where training runs: in this command (here, the default with --runtime local), as a "
                     "Kubernetes Job running `rollwire train` under torchrun beside the rollout pods (job, the default "
                     "with --runtime kubernetes), or a `rollwire train` you start yourself, whose command line this "
                     "prints (external); job and external need --stack, and the command follows their updates "
                     "through the version the proxy publishes")  # fmt: skip
    how.add_argument("--trainer-gpus", type=int, default=1, metavar="N",
                     help="--trainer job: processes (one GPU each) of the trainer pod (default 1)")  # fmt: skip
    how.add_argument("--trainer-strategy", choices=["ddp", "fsdp"], default="ddp",
                     help="--trainer job: how its processes split the model: ddp (replicas) or fsdp (FSDP2 shards)")  # fmt: skip
    how.add_argument("--engine", choices=["bundled", "vllm"], default="bundled",
                     help="what serves the policy: the bundled engine, or vLLM's CPU build (default bundled)")  # fmt: skip
    how.add_argument("--upstream", metavar="URL", help="a running vLLM to sample from instead (needs --model FOLDER)")
    how.add_argument("--concurrency", type=int, default=8, help="rollouts running at once (default 8)")
    how.add_argument("--deadline", type=float, default=120.0, metavar="S", help="seconds one rollout may take (default 120)")
    how.add_argument("--stack", metavar="FILE",
                     help="join a running stack (the stack file of `rollwire up`) instead of starting one: the run goes "
                     "in its store, and --model must name the weights its engine serves")  # fmt: skip
    how.add_argument("--run-id", help="the run's id (default: a new one); an existing run's id resumes it")
    how.add_argument("--out", metavar="DIR",
                     help="the run's folder: store, checkpoints, logs, results.json (default <home>/rl/<run-id>)")  # fmt: skip


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from transformers.utils import logging as hf_logging

    from rollwire.app.rl.learner import Learner, step_detail
    from rollwire.app.rl.loop import RLConfig
    from rollwire.app.rl.remote import followed_trainer
    from rollwire.app.rl.runner import Rollouts, Serving, learner_settings, local_stack, run_loop
    from rollwire.app.stack import StackInfo
    from rollwire.model_names import resolve_model

    if args.upstream and not args.model:
        raise InvalidRequest("--upstream needs --model: the local folder of the served model (tokenizer, weights)")
    if args.stack and args.upstream:
        raise InvalidRequest("--stack joins a stack that already has its engine: drop --upstream")
    where = args.trainer or ("job" if args.runtime == "kubernetes" else "here")
    if where != "here" and not args.stack:
        raise InvalidRequest(f"--trainer {where} trains elsewhere, against a running stack: name it with --stack FILE")
    if where != "here" and not args.dynamic_sampling:
        raise InvalidRequest(f"--trainer {where} needs dynamic sampling: the command counts the groups a trainer "
                             "elsewhere trains by the groups with a reward spread; drop --no-dynamic-sampling")  # fmt: skip
    if where == "job" and args.runtime != "kubernetes":
        raise InvalidRequest("--trainer job runs the trainer as a Kubernetes Job: it needs --runtime kubernetes")
    if args.trainer_gpus < 1:
        raise InvalidRequest("--trainer-gpus must be at least 1")
    config = RLConfig(
        iterations=args.iterations, group_size=args.group_size, groups_per_step=args.groups_per_step,
        max_lag=args.max_lag, epochs=args.epochs, dynamic_sampling=args.dynamic_sampling, seed=args.seed,
        curriculum_floor=args.curriculum_floor, eval_every=args.eval_every, eval_group=args.eval_group,
    )  # fmt: skip
    options = harness_options(args.option)
    tasks = tuple(t.strip() for t in (args.tasks or "").split(",") if t.strip())
    rollouts = Rollouts(args.suite, args.harness, args.runtime, args.concurrency, args.deadline, options, tasks)
    serving = Serving(args.engine, args.upstream, args.model)
    run_id = args.run_id or f"rl-{secrets.token_hex(4)}"
    out = Path(args.out).expanduser() if args.out else settings.home / "rl" / run_id
    out.mkdir(parents=True, exist_ok=True)
    model_dir = resolve_model(args.model, settings.home) if where == "here" else None
    hf_logging.disable_progress_bar()
    console = Console(soft_wrap=True)
    console.print(f"[bold]rollwire rl[/] run {run_id}: {args.suite} suite, {args.harness} harness, "
                  f"K={args.iterations}, G={args.group_size}, max lag {args.max_lag}; folder {out}", markup=True)  # fmt: skip
    console.print(f"resume after a stop with: --run-id {run_id} --out {out}", markup=False, highlight=False)
    line = LiveLine(console)
    phase = ["starting the stack" if not args.stack else "joining the stack"]

    def say(text: str) -> None:  # an update, an evaluation: the line moves on to the next phase
        phase[0] = text
        line(text, None)

    stop_on_sigterm()
    stack: AbstractContextManager[StackInfo]
    fault = None  # a joined stack's parts are not this command's to watch
    if args.stack:
        stack = nullcontext(StackInfo.load(Path(args.stack).expanduser()))
    else:
        stack = local = local_stack(settings, out, serving, args.suite, args.seed)
        fault = local.failed_part
    try:
        with stack as info:
            if model_dir is None:  # the trainer runs elsewhere: follow it
                recipe = trainer_recipe(args, run_id, out if where == "external" else None, settings)
                opened = functools.partial(followed_trainer, info, settings, recipe, config, job=where == "job",
                                           report=say, announce=lambda text: console.print(text, markup=False,
                                                                                           highlight=False))  # fmt: skip
                say("sampling; training runs " + ("as a Kubernetes Job" if where == "job" else "elsewhere"))
                with line.live:
                    result = run_loop(info, opened, config, rollouts, run_id=run_id, settings=settings, report=say,
                                      on_progress=lambda p: line(phase[0], p), platform_fault=fault)  # fmt: skip
            else:
                trainer = learner_settings(settings.trainer, info, serving, max_lag=args.max_lag, lr=args.lr,
                                           seed=args.seed, group_size=args.group_size,
                                           **({"lora_rank": args.lora_rank} if args.lora_rank else {}))  # fmt: skip
                learner = Learner.open(model_dir, out / "checkpoints", trainer)
                learner.on_step = lambda step, steps, metrics: line(phase[0], None, step_detail(step, steps, metrics))
                say("sampling and training")
                try:
                    with line.live:
                        result = run_loop(info, learner, config, rollouts, run_id=run_id, settings=settings,
                                          report=say, on_progress=lambda p: line(phase[0], p), platform_fault=fault)  # fmt: skip
                finally:
                    learner.close()
    except KeyboardInterrupt:
        console.print(f"stopped: resume with --run-id {run_id} --out {out}", markup=False, highlight=False)
        raise
    (out / "results.json").write_text(json.dumps(results(result, config), indent=2))
    version = result.steps[-1].version if result.steps else result.start_version
    console.print(f"{len(result.steps)} updates this session, policy v{version}; groups drawn "
                  f"{len(result.draws)}, finished {result.groups_finished}, no reward spread {result.groups_zero_variance} "
                  f"({result.zero_variance_share:.0%}); results: {out / 'results.json'}", markup=False, highlight=False)  # fmt: skip
    for e in result.evals:
        console.print(f"held-out at v{e.version}: " + ", ".join(f"{k} {v:.3f}" for k, v in e.rates.items()),
                      markup=False, highlight=False)  # fmt: skip
    console.print(f"report: rollwire report {run_id} --dir {out}", markup=False, highlight=False)
    return 0


def trainer_recipe(args: argparse.Namespace, run_id: str, out: Path | None, settings: Settings) -> TrainerRecipe:
    """What the trainer that runs elsewhere is told: this run, its model, and the loop's recipe (``out``: its
    checkpoints go there; None: on the trainer Job's volume)."""
    from rollwire.orchestrator.runtimes.kubernetes.trainer_job import TrainerRecipe

    return TrainerRecipe(
        run_id=run_id, model=args.model or "tiny", until_version=0, group_size=args.group_size,
        groups_per_step=args.groups_per_step, epochs=args.epochs, max_lag=args.max_lag, lr=args.lr, seed=args.seed,
        dynamic_sampling=args.dynamic_sampling, failure_reward=settings.trainer.failure_reward,
        strategy=args.trainer_strategy, gpus=args.trainer_gpus, output_dir=str(out / "checkpoints") if out else "",
    )  # fmt: skip


def results(result: RLResult, config: object) -> dict[str, object]:
    """What ``results.json`` holds: the recipe, each update of this session, and every draw of the run."""
    return {
        "run_id": result.run_id,
        "config": dataclasses.asdict(config),  # type: ignore[call-overload]
        "start_version": result.start_version,
        "seconds": round(result.seconds, 1),
        "trainer_busy_s": round(result.trainer_busy_s, 1),
        "groups_finished": result.groups_finished,
        "groups_zero_variance": result.groups_zero_variance,
        "updates": [{"version": s.version, "groups": s.groups, "mean_reward": round(s.mean_reward, 4),
                     "max_lag": s.max_lag, "seconds": round(s.seconds, 2)} for s in result.steps],  # fmt: skip
        "draws": [d.to_meta() for d in result.draws],
        "evaluations": [{"version": e.version, "rollouts": e.rollouts, "at_s": round(e.at_s, 1),
                         **{k: round(v, 4) for k, v in e.rates.items()}} for e in result.evals],  # fmt: skip
        "evaluations_discarded": result.evals_discarded,
    }


__all__ = ["HELP", "add_arguments", "run", "results"]
