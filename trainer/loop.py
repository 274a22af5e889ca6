"""The training loop: stream -> group buffer -> step -> checkpoint -> push weights -> publish version.

Composition only: every piece it calls is its own module. Rank 0 reads the stream and broadcasts
what it read, so all ranks build the same global batch; rank 0 alone writes checkpoints and pushes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from rollwire.errors import InvalidRequest
from rollwire.settings import TrainerSettings
from rollwire.trainer.adapters import (
    ADAPTER_DIR,
    LoraSpec,
    add_lora,
    hf_model,
    is_lora,
    load_lora,
    merged_state_dict,
    save_adapter,
    trainable,
)
from rollwire.trainer.batching import GroupBuffer
from rollwire.trainer.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_optimizer_state,
    load_state,
    save_checkpoint,
)
from rollwire.trainer.distributed import (
    DistContext,
    broadcast,
    full_state_dict,
    load_optimizer,
    optimizer_state,
    unwrap,
    wrap_model,
)
from rollwire.trainer.grpo import (
    GRPOConfig,
    grpo_step,
    leave_out_without_signal,
    prepare_grpo,
    with_proximal_logprobs,
)
from rollwire.trainer.metrics import MetricsWriter
from rollwire.trainer.parity import check_sink, pushed_model
from rollwire.trainer.sft import SFTConfig, sft_step
from rollwire.trainer.stream import StreamConfig, TrajectoryStream
from rollwire.trainer.weights import ProxyVersionPublisher, WeightSink, make_sinks
from rollwire.trajectory import Trajectory

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Session:
    """What one training run holds: model, optimizer, state and the stream's buffer."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    state: TrainerState
    buffer: GroupBuffer
    base_model: Path
    pad_id: int
    ref_model: torch.nn.Module | None = None


def load_causal_lm(path: Path, device: torch.device) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    if not (path / "config.json").is_file():
        raise InvalidRequest(f"{path} is not a Hugging Face model folder (no config.json)", param="model")
    # as a Module: transformers wraps its own ``to`` with functools.wraps(Module.to), which type checkers read unbound
    model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model.to(device)


def open_session(cfg: TrainerSettings, base_model: Path, out_dir: Path, ctx: DistContext) -> Session:
    """Resume from the latest checkpoint in ``out_dir`` if there is one, else start from ``base_model``."""
    torch.manual_seed(cfg.seed)
    resume = latest_checkpoint(out_dir)
    state = load_state(resume) if resume else TrainerState()
    if cfg.lora_rank and ctx.strategy == "fsdp":
        raise InvalidRequest("--lora-rank runs on one process or under DDP, not FSDP", param="lora_rank")
    if not cfg.lora_rank and resume is not None and (resume / ADAPTER_DIR).is_dir():  # its moments are the adapters'
        raise InvalidRequest(f"{resume} was trained with LoRA adapters: resume it with --lora-rank", param="lora_rank")
    # LoRA keeps the base and continues the checkpoint's saved adapters; full fine-tuning continues its weights
    model = load_causal_lm(base_model if cfg.lora_rank else resume or base_model, ctx.device)
    pad_id = int(getattr(model.config, "pad_token_id", None) or 0)
    if cfg.lora_rank:
        model = load_lora(model, resume) if resume else add_lora(model, lora_spec(cfg))
    model = wrap_model(model, ctx)
    optimizer = torch.optim.AdamW(trainable(model), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if resume is not None:
        saved = load_optimizer_state(resume)
        if saved is not None:
            load_optimizer(model, optimizer, saved, ctx)
        logger.info("resumed from %s at step %d, cursor %d", resume.name, state.step, state.cursor)
    ref = None
    if cfg.kl_coef > 0:
        ref = load_causal_lm(base_model, ctx.device).eval().requires_grad_(False)
    group_size = cfg.group_size if cfg.algo == "grpo" else 1
    buffer = GroupBuffer.restore(group_size, state.pending)
    return Session(model, optimizer, state, buffer, base_model, pad_id, ref)


def lora_spec(cfg: TrainerSettings) -> LoraSpec:
    return LoraSpec(cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets)


def grpo_config(cfg: TrainerSettings) -> GRPOConfig:
    correction = cfg.is_correction
    if correction == "auto":  # measured: vLLM's logprobs drift from the trainer's; the bundled engine's do not
        correction = "tis" if cfg.vllm_url else "none"
    return GRPOConfig(
        std_scale=cfg.std_scale,
        baseline=cfg.baseline,
        loss_normaliser=cfg.loss_normaliser,
        ratio_level=cfg.ratio_level,
        mask_truncated=cfg.mask_truncated,
        entropy_coef=cfg.entropy_coef,
        failure_reward=cfg.failure_reward,
        is_correction=correction,
        is_level=cfg.is_level,
        tempered_logprobs=cfg.logprobs_mode == "processed_logprobs",
        is_cap=cfg.is_cap,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        ratio_cap=cfg.ratio_cap,
        kl_coef=cfg.kl_coef,
        aggregation=cfg.aggregation,
        scale_std=cfg.scale_std,
        drop_zero_variance=not cfg.keep_zero_variance,
        max_policy_lag=cfg.max_policy_lag,
        side_calls=cfg.train_side_calls,
        micro_batch_tokens=cfg.micro_batch_tokens,
        packed=cfg.packing,
        share_prefixes=cfg.share_prefixes,
        max_grad_norm=cfg.max_grad_norm or None,
    )


def sft_config(cfg: TrainerSettings) -> SFTConfig:
    return SFTConfig(
        min_reward=cfg.sft_min_reward,
        aggregation=cfg.aggregation,
        micro_batch_tokens=cfg.micro_batch_tokens,
        packed=cfg.packing,
        share_prefixes=cfg.share_prefixes,
        max_grad_norm=cfg.max_grad_norm or None,
    )


PassReporter = Callable[[int, int, dict[str, Any]], None]
"""(step of this update, its steps, the step's metrics): called after each optimizer step of an update."""


def grpo_update(
    session: Session, groups: Sequence[Sequence[Trajectory]], config: GRPOConfig, ctx: DistContext, *,
    epochs: int = 1, groups_per_step: int = 0, on_step: PassReporter | None = None,
) -> list[dict[str, Any]]:
    """One policy update on ``groups``: steps of ``groups_per_step`` groups (0: all in one), ``epochs`` passes.

    With more than one pass and an importance-sampling correction on, every pass clips against the policy
    before the update (its logprobs, computed once), not against the one the previous pass left. Counts each
    optimizer step in the session's state; the caller checkpoints and pushes once, after the update.
    """
    chunk = groups_per_step or len(groups) or 1
    version = session.state.policy_version
    batches = [prepare_grpo(groups[at : at + chunk], config, version) for at in range(0, len(groups), chunk)]
    if epochs > 1 and config.is_correction != "none":
        batches = [with_proximal_logprobs(session.model, batch, pad_id=session.pad_id) for batch in batches]
    history: list[dict[str, Any]] = []
    steps = epochs * len(batches)
    for _ in range(epochs):
        for batch in batches:
            metrics = grpo_step(session.model, session.optimizer, batch, config, ctx=ctx, pad_id=session.pad_id,
                                ref_model=session.ref_model)  # fmt: skip
            session.state.step += 1
            history.append(metrics)
            if on_step is not None:
                on_step(len(history), steps, metrics)
    return history


def train_ready(cfg: TrainerSettings, session: Session, ctx: DistContext) -> tuple[dict[str, Any], list[str]] | None:
    """One update if the buffer holds enough for one, else None: its last step's metrics (with every step's
    loss when there were several passes) and the rollouts it consumed. The session's step count is advanced."""
    if cfg.algo == "grpo":
        if len(session.buffer.ready()) < cfg.groups_per_step:
            return None
        groups = session.buffer.pop_groups(cfg.groups_per_step)
        history = grpo_update(session, groups, grpo_config(cfg), ctx, epochs=cfg.epochs)
        metrics = history[-1] | ({"pass_losses": [m.get("loss") for m in history]} if len(history) > 1 else {})
        if len(history) > 1:  # an update with any pass that changed the weights makes a version
            metrics["skipped"] = all(m.get("skipped") for m in history)
        return metrics, [t.rollout_id for g in groups for t in g]
    if session.buffer.size() < cfg.sft_batch_size:
        return None
    batch_t = session.buffer.pop_all(cfg.sft_batch_size)
    metrics = sft_step(session.model, session.optimizer, batch_t, sft_config(cfg), ctx=ctx, pad_id=session.pad_id)
    session.state.step += 1
    return metrics, [t.rollout_id for t in batch_t]


def checkpoint_and_push(
    cfg: TrainerSettings, session: Session, out_dir: Path, ctx: DistContext, sinks: list[WeightSink],
    publisher: ProxyVersionPublisher | None,
) -> Path | None:
    policy = unwrap(session.model)
    lora = is_lora(policy)
    weights = merged_state_dict(policy) if lora else full_state_dict(session.model, ctx)  # collective under FSDP2
    opt_state = optimizer_state(session.model, session.optimizer, ctx)
    folder = None
    if ctx.is_main:
        session.state.pending = session.buffer.snapshot()
        folder = save_checkpoint(
            out_dir, session.state, weights, hf_model(policy), opt_state, session.base_model,
            keep=cfg.keep_checkpoints, extra=(lambda staging: save_adapter(policy, staging)) if lora else None,
        )
        model = None if ctx.active else policy  # sharded or replicated: probe the pushed folder
        push(folder, session.state.policy_version, sinks, publisher, cfg.parity_tolerance, model)
    ctx.barrier()
    return folder


def push(
    folder: Path, version: int, sinks: list[WeightSink], publisher: ProxyVersionPublisher | None,
    parity_tolerance: float = -1.0, model: torch.nn.Module | None = None,
) -> None:
    """Push to every sink; with ``parity_tolerance`` >= 0, probe each engine after its push (trainer/parity.py)."""
    for sink in sinks:
        sink.push(folder, version)
        if parity_tolerance >= 0:
            check_sink(sink, pushed_model(folder, model), parity_tolerance)
    if publisher is not None:
        publisher.publish(version)


def _done(cfg: TrainerSettings, state: TrainerState) -> bool:
    return bool(cfg.max_steps and state.step >= cfg.max_steps) or bool(
        cfg.until_version and state.policy_version >= cfg.until_version
    )


def run_training(
    cfg: TrainerSettings,
    base_model: Path,
    out_dir: Path,
    ctx: DistContext,
    *,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> TrainerState:
    """Train until ``max_steps`` steps or version ``until_version`` (or, with ``exit_when_idle``, until the stream
    has nothing new)."""
    if cfg.algo not in ("grpo", "sft"):
        raise InvalidRequest(f"unknown algorithm {cfg.algo!r} (grpo, sft)", param="algo")
    if not cfg.run:
        raise InvalidRequest("no run given (--run)", param="run")
    session = open_session(cfg, base_model, out_dir, ctx)
    metrics = MetricsWriter(out_dir / "metrics.jsonl" if ctx.is_main else None, console=None)
    client = httpx.Client(timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=10.0))
    stream = TrajectoryStream(StreamConfig(cfg.admin_url, cfg.operator_key, cfg.run, cfg.stream_wait_s))
    stream.cursor = session.state.cursor
    sinks = make_sinks(cfg.engine_url, cfg.vllm_url, cfg.vllm_mode, client)
    publish = cfg.publish_version and sinks
    publisher = ProxyVersionPublisher(cfg.admin_url, cfg.operator_key, client) if publish else None
    left_out: list[str] = []  # groups dynamic sampling took out since the last checkpoint
    try:
        if session.state.step > 0 and ctx.is_main and sinks:  # the push may not have happened before a kill
            folder = latest_checkpoint(out_dir)
            push(folder, session.state.policy_version, sinks, publisher, cfg.parity_tolerance)  # type: ignore[arg-type]
        while not _done(cfg, session.state):
            items = broadcast([t.to_dict() for t in stream.poll()] if ctx.is_main else None, ctx)
            if not items and cfg.exit_when_idle:
                break
            for item in items or []:
                trajectory = Trajectory.from_dict(item)
                session.state.cursor = trajectory.cursor
                if cfg.purpose and trajectory.purpose != cfg.purpose:
                    continue  # another part of the run (its evaluations, teacher data): not this trainer's
                session.buffer.add(trajectory)
                if cfg.dynamic_sampling and cfg.algo == "grpo":  # consumed with the next checkpoint, never trained
                    left = leave_out_without_signal(session.buffer, grpo_config(cfg))
                    left_out.extend(t.rollout_id for group in left.values() for t in group)
                done = train_ready(cfg, session, ctx)
                if done is None:
                    continue
                step_metrics, rollout_ids = done
                session.state.trained_rollouts.extend([*left_out, *rollout_ids])
                left_out = []
                if not step_metrics.get("skipped"):  # a step that updated nothing costs no checkpoint, push or version
                    session.state.policy_version += 1
                    checkpoint_and_push(cfg, session, out_dir, ctx, sinks, publisher)
                record = step_metrics | {"policy_version": session.state.policy_version, "rollout_ids": rollout_ids}
                metrics.write(session.state.step, record)
                if on_step is not None and ctx.is_main:
                    on_step(session.state.step, record)
                if _done(cfg, session.state):
                    break
    finally:
        stream.close()
        client.close()
    return session.state


__all__ = ["Session", "load_causal_lm", "open_session", "run_training"]
