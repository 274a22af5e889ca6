"""Train a policy on the proxy's recorded trajectories (GRPO or SFT), pushing new weights after each step.

Reads /admin/v1/trajectories/stream on the proxy's admin listener (--admin-url) from the last checkpoint's
cursor (restart-safe), trains, writes a Hugging Face checkpoint, pushes it to the bundled engine and/or vLLM
and publishes the new policy version.
Runs the same under torchrun (DDP; --strategy fsdp for FSDP2); there, name the run with --run-id
(torchrun reads a bare --run as its own --run-path):
    torchrun --nproc-per-node 2 $(which rollwire) train --run-id RUN --admin-url URL ...
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollwire.settings import Settings, TrainerSettings

if TYPE_CHECKING:
    from rollwire.trainer.trackers import TrackerRun

HELP = "train on recorded trajectories (GRPO / SFT) and push weights"

FLAGS: dict[str, str] = {
    "admin_url": "admin_url",
    "operator_key": "operator_key",
    "run": "run",
    "model": "model",
    "algo": "algo",
    "output_dir": "output_dir",
    "lr": "lr",
    "lora_rank": "lora_rank",
    "lora_alpha": "lora_alpha",
    "lora_targets": "lora_targets",
    "max_grad_norm": "max_grad_norm",
    "micro_batch_tokens": "micro_batch_tokens",
    "group_size": "group_size",
    "groups_per_step": "groups_per_step",
    "sft_batch_size": "sft_batch_size",
    "sft_min_reward": "sft_min_reward",
    "clip_low": "clip_low",
    "clip_high": "clip_high",
    "ratio_cap": "ratio_cap",
    "max_policy_lag": "max_policy_lag",
    "kl_coef": "kl_coef",
    "aggregation": "aggregation",
    "loss_normaliser": "loss_normaliser",
    "std_scale": "std_scale",
    "baseline": "baseline",
    "ratio_level": "ratio_level",
    "entropy_coef": "entropy_coef",
    "failure_reward": "failure_reward",
    "is_correction": "is_correction",
    "is_level": "is_level",
    "is_cap": "is_cap",
    "logprobs_mode": "logprobs_mode",
    "max_steps": "max_steps",
    "until_version": "until_version",
    "epochs": "epochs",
    "purpose": "purpose",
    "stream_wait": "stream_wait_s",
    "engine_url": "engine_url",
    "vllm_url": "vllm_url",
    "vllm_mode": "vllm_mode",
    "parity_tolerance": "parity_tolerance",
    "seed": "seed",
    "device": "device",
    "strategy": "strategy",
    "tracker": "tracker",
    "tracker_dir": "tracker_dir",
    "tracker_project": "tracker_project",
}
"""Flag (dest) -> TrainerSettings field; the field's description is the flag's help."""

SWITCHES: dict[str, str] = {
    "scale_std": "scale_std",
    "keep_zero_variance": "keep_zero_variance",
    "mask_truncated": "mask_truncated",
    "exit_when_idle": "exit_when_idle",
    "dynamic_sampling": "dynamic_sampling",
    "train_side_calls": "train_side_calls",
}

CHOICES = {"algo": ["grpo", "sft"], "aggregation": ["token-mean", "sequence-mean", "constant"],
           "vllm_mode": ["reload", "lora"], "strategy": ["ddp", "fsdp"], "std_scale": ["none", "group", "batch"],
           "baseline": ["mean", "rloo"], "ratio_level": ["token", "sequence"],
           "is_correction": ["auto", "none", "tis", "mis"], "is_level": ["token", "sequence"],
           "logprobs_mode": ["processed_logprobs", "raw_logprobs"],
           "tracker": ["tensorboard", "wandb", "mlflow", "trackio"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    fields = TrainerSettings.model_fields
    for dest, name in FLAGS.items():
        info = fields[name]
        kind = {float: float, int: int}.get(type(info.default), str)
        if name in ("sft_min_reward", "ratio_cap", "failure_reward"):
            kind = float
        if name == "max_policy_lag":
            kind = int
        names = ["--" + dest.replace("_", "-")]
        if dest == "run":  # torchrun's own parser takes a bare --run for an abbreviation of its --run-path
            names.append("--run-id")
        parser.add_argument(
            *names, dest=dest, type=kind, default=None, choices=CHOICES.get(dest),
            help=f"{info.description} (default: {info.default!r})",
        )
    for dest, name in SWITCHES.items():
        parser.add_argument("--" + dest.replace("_", "-"), dest=dest, action="store_true", default=None,
                            help=fields[name].description)
    parser.add_argument("--no-packing", dest="packing", action="store_false", default=None,
                        help="one sequence per row, right-padded (default: packed rows)")
    parser.add_argument("--no-share-prefixes", dest="share_prefixes", action="store_false", default=None,
                        help="forward every sample's prompt in full (default: a prompt samples share, once)")
    parser.add_argument("--no-publish-version", dest="publish_version", action="store_false", default=None,
                        help="do not POST the new policy version to the proxy after a push")


def trainer_settings(args: argparse.Namespace, settings: Settings) -> TrainerSettings:
    """Flags beat ROLLWIRE_TRAINER__* env vars, which beat the defaults."""
    updates = {name: getattr(args, dest) for dest, name in {**FLAGS, **SWITCHES}.items() if getattr(args, dest) is not None}
    for dest in ("packing", "share_prefixes", "publish_version"):
        if getattr(args, dest) is not None:
            updates[dest] = getattr(args, dest)
    cfg = settings.trainer.model_copy(update=updates)
    if not cfg.operator_key and settings.proxy.operator_key:
        cfg = cfg.model_copy(update={"operator_key": settings.proxy.operator_key})
    return cfg


def tracker_run(cfg: TrainerSettings, out_dir: Path) -> TrackerRun:
    """Where and under which names the tracker writes (``--tracker-dir``, else ``<output dir>/<tracker>``)."""
    from rollwire.trainer.trackers import TrackerRun

    folder = Path(cfg.tracker_dir).expanduser() if cfg.tracker_dir else out_dir / cfg.tracker
    config = cfg.model_dump(exclude={"operator_key", "tracker", "tracker_dir", "tracker_project"})
    return TrackerRun(folder, cfg.tracker_project, cfg.run or out_dir.name, config)


def _steps_to(console: Any, tracker: Any) -> Callable[[int, dict[str, Any]], None]:
    def on_step(step: int, metrics: dict[str, Any]) -> None:
        console.write(step, metrics)
        if tracker is not None:
            tracker.log(step, metrics)

    return on_step


def run(args: argparse.Namespace, settings: Settings) -> int:
    import sys

    from rollwire.model_names import resolve_model
    from rollwire.trainer.distributed import init_distributed, shutdown
    from rollwire.trainer.loop import run_training
    from rollwire.trainer.metrics import MetricsWriter
    from rollwire.trainer.trackers import open_tracker

    cfg = trainer_settings(args, settings)
    base = resolve_model(cfg.model, settings.home)
    out_dir = Path(cfg.output_dir) if cfg.output_dir else settings.home / "train" / (cfg.run or "run")
    ctx = init_distributed(cfg.device, cfg.strategy)
    console = MetricsWriter(None, sys.stderr)
    tracker = None
    try:
        if cfg.tracker and ctx.is_main:  # only rank 0 reports (its steps' metrics are the reduced ones)
            tracker = open_tracker(cfg.tracker, tracker_run(cfg, out_dir))
            print(f"tracker: {cfg.tracker} run in {tracker_run(cfg, out_dir).folder}", file=sys.stderr)
        state = run_training(cfg, base, out_dir, ctx, on_step=_steps_to(console, tracker))
    finally:
        if tracker is not None:
            tracker.close()
        shutdown(ctx)
    if ctx.is_main:
        print(f"trained {state.step} steps; policy version {state.policy_version}; cursor {state.cursor}; "
              f"checkpoints in {out_dir}", file=sys.stderr)
    return 0
