"""The learner of ``rollwire rl`` and its demo preset: one model and optimizer, updated with the trainer's own
SFT and GRPO steps.

It is ``rollwire train`` taken apart for a loop that decides when to step: the same session, steps,
checkpoints (cursor and pending buffer included), weight sinks and policy-version publisher
(``rollwire.trainer``). Trajectories still come from the proxy's trajectory stream.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from rollwire.settings import TrainerSettings
from rollwire.trainer.adapters import trainable
from rollwire.trainer.batching import GroupBuffer
from rollwire.trainer.checkpoint import latest_checkpoint
from rollwire.trainer.distributed import DistContext, init_distributed
from rollwire.trainer.grpo import GRPOConfig
from rollwire.trainer.loop import (
    Session,
    checkpoint_and_push,
    grpo_config,
    grpo_update,
    open_session,
    push,
    sft_config,
)
from rollwire.trainer.sft import sft_step
from rollwire.trainer.stream import StreamConfig, TrajectoryStream
from rollwire.trainer.weights import ProxyVersionPublisher, WeightSink, make_sinks
from rollwire.trajectory import Trajectory

StepReporter = Callable[[int, int, dict[str, Any]], None]


def read_run(
    admin_url: str, operator_key: str, run_id: str, expected: int, wait_s: float = 2.0,
    keep: Callable[[Trajectory], bool] = lambda _t: True,
) -> list[Trajectory]:
    """The final rollouts of a run that ``keep`` takes, from the proxy's trajectory stream (stops when ``expected``
    of them came, or after three empty polls)."""
    stream = TrajectoryStream(StreamConfig(admin_url, operator_key, run_id, wait_s))
    out: list[Trajectory] = []
    try:
        empty = 0
        while len(out) < expected and empty < 3:
            got = stream.poll()
            out.extend(t for t in got if keep(t))
            empty = 0 if got else empty + 1
    finally:
        stream.close()
    return out


def step_detail(step: int, steps: int, metrics: dict[str, Any]) -> str:
    """The live line's words for one optimizer step."""
    return f"step {step}/{steps}, loss {metrics.get('loss', 0.0):.4f}, {metrics.get('tokens_per_s', 0.0):,.0f} tokens/s"


@dataclass(slots=True)
class Learner:
    """Holds the policy between phases; every ``push`` makes a checkpoint the engine serves next."""

    session: Session
    settings: TrainerSettings
    out_dir: Path
    sinks: list[WeightSink]
    publisher: ProxyVersionPublisher | None
    client: httpx.Client
    ctx: DistContext
    on_step: StepReporter | None = None
    """Called after every optimizer step with (step, steps, metrics): the live line shows it."""

    @classmethod
    def open(cls, base_model: Path, out_dir: Path, settings: TrainerSettings) -> Learner:
        """A session on ``base_model`` pushing to the engine the settings name (``engine_url`` or ``vllm_url``)."""
        ctx = init_distributed(settings.device)
        session = open_session(settings, base_model, out_dir, ctx)
        client = httpx.Client(timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=10.0))
        sinks = make_sinks(settings.engine_url, settings.vllm_url, settings.vllm_mode, client)
        publisher = ProxyVersionPublisher(settings.admin_url, settings.operator_key, client) if sinks else None
        return cls(session, settings, out_dir, sinks, publisher, client, ctx)

    @property
    def version(self) -> int:
        return self.session.state.policy_version

    @property
    def grpo_config(self) -> GRPOConfig:
        return grpo_config(self.settings)

    def set_lr(self, lr: float, *, fresh: bool = False) -> None:
        """The learning rate from now on; ``fresh`` also starts a new AdamW (no moments carried over from SFT)."""
        if fresh:
            self.session.optimizer = torch.optim.AdamW(
                trainable(self.session.model), lr=lr, weight_decay=self.settings.weight_decay
            )
        for group in self.session.optimizer.param_groups:
            group["lr"] = lr

    def sft(
        self, trajectories: Sequence[Trajectory], *, epochs: int, batch_size: int, seed: int
    ) -> list[dict[str, Any]]:
        """``epochs`` passes over the teacher trajectories in shuffled batches, then one push."""
        order, rng = list(trajectories), random.Random(seed)
        history: list[dict[str, Any]] = []
        config = sft_config(self.settings)
        steps = epochs * -(-len(order) // batch_size)
        for _ in range(epochs):
            rng.shuffle(order)
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                history.append(self._step(sft_step, batch, config, len(history) + 1, steps))
        self._push([t.rollout_id for t in order])
        return history

    def grpo(
        self, trajectories: Sequence[Trajectory], *, group_size: int, groups_per_step: int = 0, epochs: int = 1
    ) -> list[dict[str, Any]]:
        """One iteration on a whole batch of trajectories: their full groups, as ``train_groups``."""
        buffer = GroupBuffer(group_size)
        for trajectory in trajectories:
            buffer.add(trajectory)
        return self.train_groups(buffer.pop_groups(len(buffer.ready())), groups_per_step=groups_per_step, epochs=epochs)

    def train_groups(
        self, groups: Sequence[Sequence[Trajectory]], *, groups_per_step: int = 0, epochs: int = 1,
        consumed: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """One iteration: the groups in steps of ``groups_per_step`` groups (0: all), ``epochs`` passes, one push.

        ``consumed``: rollouts taken off the stream and left out (groups with no reward spread), recorded as
        consumed in the same checkpoint so a resumed run neither trains them nor waits for them.
        """
        history = grpo_update(self.session, groups, grpo_config(self.settings), self.ctx, epochs=epochs,
                              groups_per_step=groups_per_step, on_step=self.on_step)  # fmt: skip
        self._push([*consumed, *(t.rollout_id for group in groups for t in group)])
        return history

    def republish(self) -> None:
        """Push the latest checkpoint again: a resumed run's fresh engine serves the base model until it does."""
        folder = latest_checkpoint(self.out_dir)
        if folder is not None and self.version > 0:
            push(folder, self.version, self.sinks, self.publisher)

    def _step(
        self, step: Callable[..., dict[str, Any]], batch: Any, config: Any, index: int, steps: int
    ) -> dict[str, Any]:
        """One optimizer step of the trainer's own ``sft_step``, counted in the state and reported."""
        metrics = step(
            self.session.model, self.session.optimizer, batch, config, ctx=self.ctx, pad_id=self.session.pad_id
        )
        self.session.state.step += 1
        if self.on_step is not None:
            self.on_step(index, steps, metrics)
        return metrics

    def _push(self, rollout_ids: list[str]) -> None:
        self.session.state.policy_version += 1
        self.session.state.trained_rollouts.extend(rollout_ids)
        checkpoint_and_push(self.settings, self.session, self.out_dir, self.ctx, self.sinks, self.publisher)

    def close(self) -> None:
        self.client.close()


__all__ = ["Learner", "StepReporter", "read_run", "step_detail"]
