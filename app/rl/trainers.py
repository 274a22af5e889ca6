"""The trainer half of the RL loop, in the two forms the sampler drives alike.

``InProcessTrainer`` steps a ``Learner`` in this process: it reads the run's trajectory stream, leaves out
groups with no reward spread, trains on ``groups_per_step`` groups, pushes and publishes. ``FollowedTrainer``
follows a trainer that runs elsewhere (``rollwire train`` with the same recipe: a Kubernetes Job, or a GPU
machine): it learns of updates from the version the proxy has published, and settles the gate by count. The
remote trainer consumes exactly ``groups_per_step`` groups with a reward spread per version, in the order
their groups finished, and leaves out the others by the rule the sampler applies here to the same rows
(``rewards_have_signal``), so drawn - left out - trained is the number of groups still outstanding.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.to_thread

from rollwire.app.rl.gate import StalenessGate
from rollwire.app.rl.learner import Learner
from rollwire.errors import RollwireError
from rollwire.store.schema import Rollout
from rollwire.trainer.grpo import group_has_signal, leave_out_without_signal, rewards_have_signal, training_reward_of
from rollwire.trainer.stream import TrajectoryStream
from rollwire.trajectory import Trajectory

TRAIN = "train"
"""``meta.purpose`` of the rollouts the trainer learns from; the run's other rollouts (teacher data, evaluations)
it skips."""
NO_SIGNAL_DRAWS = 10
"""Draws in a row with no reward spread, in steps' worth of groups, after which the run stops: nothing is left
to learn on this suite (the policy solves, or fails, every task it draws)."""
FOLLOW_EVERY_S = 0.5


@dataclass(slots=True)
class StepRecord:
    """One update: the version it made, its groups, the lag of their tokens, and its optimizer metrics (none for
    a trainer that runs elsewhere: its own metrics file holds them)."""

    version: int
    groups: list[str]
    rewards: list[float]
    max_lag: int
    seconds: float
    metrics: list[dict[str, Any]]
    at_s: float = 0.0
    """When the update's weights were pushed, in seconds since the loop started."""

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / len(self.rewards) if self.rewards else 0.0


class Counts(Protocol):
    """What the trainer half adds to the run's result."""

    groups_zero_variance: int
    trainer_busy_s: float


OnUpdate = Callable[[StepRecord], None]


class Trainer(Protocol):
    @property
    def version(self) -> int: ...

    def consumed(self) -> set[str] | None:
        """Rollouts a checkpoint has consumed (None: unknown here; the gate is settled by count instead)."""
        ...

    async def prepare(self) -> None:
        """Before the run opens: the trainer's version is known after it."""
        ...

    async def begin(self, start_version: int, fresh: bool) -> None:
        """The version the run started at (the first command's; ``fresh``: this command opened it): updates are
        counted from it."""
        ...

    def restored(self, finished: Sequence[tuple[str, Sequence[Rollout]]], gate: StalenessGate, counts: Counts) -> None:
        """A resumed run's finished groups (in the order they finished)."""
        ...

    def group_done(self, group_id: str, rows: Sequence[Rollout], gate: StalenessGate, counts: Counts) -> None: ...

    async def run(self, gate: StalenessGate, counts: Counts, target: int, on_update: OnUpdate) -> None:
        """Train (or follow training) until the policy reaches version ``target``."""
        ...


class _NoSignalGuard:
    """Stops a run whose draws keep bringing groups with no reward spread."""

    def __init__(self, groups_per_step: int) -> None:
        self.limit, self.in_a_row = NO_SIGNAL_DRAWS * groups_per_step, 0

    def saw(self, signal: bool) -> None:
        self.in_a_row = 0 if signal else self.in_a_row + 1
        if self.in_a_row >= self.limit:
            raise RollwireError(
                f"{self.in_a_row} groups in a row had no reward spread: the policy solves (or fails) every "
                "task it draws, and there is nothing left to learn from this suite at this group size"
            )


class InProcessTrainer:
    """Steps the learner here, on groups read from the run's trajectory stream."""

    def __init__(
        self, learner: Learner, stream: TrajectoryStream, *, groups_per_step: int, epochs: int, dynamic_sampling: bool,
        report: Callable[[str], None],
    ) -> None:  # fmt: skip
        self.learner, self.stream, self.report = learner, stream, report
        self.groups_per_step, self.epochs, self.dynamic_sampling = groups_per_step, epochs, dynamic_sampling
        self._guard = _NoSignalGuard(groups_per_step)
        self.start_version = learner.version

    @property
    def version(self) -> int:
        return self.learner.version

    def consumed(self) -> set[str] | None:
        return set(self.learner.session.state.trained_rollouts)

    async def prepare(self) -> None:
        await anyio.to_thread.run_sync(self.learner.republish)
        self.stream.cursor = self.learner.session.state.cursor

    async def begin(self, start_version: int, fresh: bool) -> None:
        self.start_version = start_version

    def restored(self, finished: Sequence[tuple[str, Sequence[Rollout]]], gate: StalenessGate, counts: Counts) -> None:
        return None  # the checkpoint says what was consumed; the stream brings the rest again

    def group_done(self, group_id: str, rows: Sequence[Rollout], gate: StalenessGate, counts: Counts) -> None:
        return None  # the stream brings the group's rows to ``run``

    async def run(self, gate: StalenessGate, counts: Counts, target: int, on_update: OnUpdate) -> None:
        buffer = self.learner.session.buffer
        state = self.learner.session.state
        config = self.learner.grpo_config
        left_out: list[str] = []  # consumed since the last checkpoint without training
        while self.learner.version < target:
            got: list[Trajectory] = await anyio.to_thread.run_sync(self.stream.poll, abandon_on_cancel=True)
            for trajectory in got:
                if trajectory.purpose == TRAIN:
                    buffer.add(trajectory)
                state.cursor = trajectory.cursor
            if self.dynamic_sampling:
                settled = leave_out_without_signal(buffer, config)
                for members in settled.values():
                    left_out.extend(t.rollout_id for t in members)
                    counts.groups_zero_variance += 1
                    self._guard.saw(False)
                gate.settled(settled)
            ready = buffer.ready()
            if len(ready) < self.groups_per_step:
                continue
            keys = ready[: self.groups_per_step]
            groups = [buffer.pending.pop(key) for key in keys]
            self._guard.saw(True)
            on_update(await self._step(keys, groups, left_out, counts, target))
            gate.settled(keys)
            left_out = []

    async def _step(
        self, keys: list[str], groups: list[list[Trajectory]], left_out: list[str], counts: Counts, target: int
    ) -> StepRecord:
        version = self.learner.version
        if not self.dynamic_sampling:  # kept in the batch: counted here, as dynamic sampling counts them
            config = self.learner.grpo_config
            counts.groups_zero_variance += sum(not group_has_signal(group, config) for group in groups)
        lag = max((version - v for g in groups for t in g for v in t.policy_versions), default=0)
        rewards = [float(t.reward or 0.0) for g in groups for t in g]
        self.report(f"update {version - self.start_version + 1}/{target - self.start_version} on {len(groups)} groups "
                    f"(mean reward {sum(rewards) / len(rewards):.2f}, policy lag <= {lag})")  # fmt: skip
        started = time.monotonic()
        metrics = await anyio.to_thread.run_sync(
            lambda: self.learner.train_groups(groups, epochs=self.epochs, consumed=left_out)
        )
        seconds = time.monotonic() - started
        counts.trainer_busy_s += seconds
        return StepRecord(self.learner.version, keys, rewards, lag, seconds, metrics)


class FollowedTrainer:
    """Follows a trainer that runs elsewhere through the version the proxy has published.

    Such a trainer starts a new run at version 0 (its base model) and publishes 1, 2, ... as it updates.
    ``published`` reads the proxy's version (None while none is), ``publish`` sets it (a new run starts it at 0,
    so a version left by an earlier run on the same stack is not taken for this one's); ``launch`` starts the
    trainer with its target version (creates its Job, or finds the one a previous command made) and says what it
    did; ``failure`` says, in one line, why the trainer stopped for good, or None while it runs.
    """

    def __init__(
        self, published: Callable[[], Awaitable[int | None]], publish: Callable[[int], Awaitable[None]], *,
        groups_per_step: int, failure_reward: float | None, launch: Callable[[int], Awaitable[str]] | None = None,
        failure: Callable[[], Awaitable[str | None]] | None = None, report: Callable[[str], None] = lambda _line: None,
        announce: Callable[[str], None] | None = None,
    ) -> None:  # fmt: skip
        self._published, self._publish, self._launch, self._failure = published, publish, launch, failure
        self.report, self.announce = report, announce or report
        """``report``: the live phase (each update); ``announce``: a line that stays (what launching did)."""
        self.groups_per_step, self.failure_reward = groups_per_step, failure_reward
        self._version = self.start_version = 0
        self._with_signal: list[tuple[str, int, list[float]]] = []
        """(group, version drawn at, rewards) of the finished groups the trainer will train, in finishing order."""
        self._trained = 0  # of them
        self._guard = _NoSignalGuard(groups_per_step)

    @property
    def version(self) -> int:
        return self._version

    def consumed(self) -> set[str] | None:
        return None

    async def prepare(self) -> None:
        return None  # a new run starts at 0; a resumed one at what its trainer published (``begin``)

    async def begin(self, start_version: int, fresh: bool) -> None:
        self.start_version = start_version
        if fresh:
            await self._publish(start_version)
        self._version = max(start_version, await self._published() or 0)

    def restored(self, finished: Sequence[tuple[str, Sequence[Rollout]]], gate: StalenessGate, counts: Counts) -> None:
        for group_id, rows in finished:
            self._classify(group_id, rows, gate, counts, resumed=True)
        self._settle_trained(gate)

    def group_done(self, group_id: str, rows: Sequence[Rollout], gate: StalenessGate, counts: Counts) -> None:
        self._classify(group_id, rows, gate, counts, resumed=False)

    def _classify(
        self, group_id: str, rows: Sequence[Rollout], gate: StalenessGate, counts: Counts, *, resumed: bool
    ) -> None:
        rewards = [training_reward_of(r.status, r.error, r.reward, self.failure_reward) for r in rows]
        kept = [r for r in rewards if r is not None]
        if rewards_have_signal(kept):
            drawn = min(int(r.meta.get("drawn_at_version", self.start_version)) for r in rows)
            self._with_signal.append((group_id, drawn, kept))
        else:  # the remote trainer leaves it out by the same rule: its place opens now
            gate.settled([group_id])
            counts.groups_zero_variance += 1
        if not resumed:
            self._guard.saw(rewards_have_signal(kept))

    def _settle_trained(self, gate: StalenessGate) -> list[tuple[str, int, list[float]]]:
        """The groups the published version says were trained, leaving the gate."""
        due = min(self.groups_per_step * (self._version - self.start_version), len(self._with_signal))
        trained = self._with_signal[self._trained : due]
        self._trained = max(self._trained, due)
        gate.settled(group_id for group_id, _, _ in trained)
        return trained

    async def run(self, gate: StalenessGate, counts: Counts, target: int, on_update: OnUpdate) -> None:
        if self._launch is not None:
            self.announce(await self._launch(target))
        since = time.monotonic()
        while self._version < target:
            if self._failure is not None:
                said = await self._failure()
                if said is not None:
                    raise RollwireError(f"{said}: the run stopped; the same command resumes it")
            published = await self._published() or 0
            while self._version < min(published, target):  # one record per version, however many landed
                self._version += 1
                trained = self._settle_trained(gate)
                rewards = [r for _, _, group in trained for r in group]
                lag = max((self._version - 1 - drawn for _, drawn, _ in trained), default=0)
                self.report(f"update {self._version - self.start_version}/{target - self.start_version} published by "
                            f"the trainer ({len(trained)} groups, policy lag <= {lag})")  # fmt: skip
                on_update(StepRecord(self._version, [g for g, _, _ in trained], rewards, lag, time.monotonic() - since, []))
                since = time.monotonic()
            if self._version < target:
                await anyio.sleep(FOLLOW_EVERY_S)


__all__ = ["NO_SIGNAL_DRAWS", "TRAIN", "Counts", "FollowedTrainer", "InProcessTrainer", "StepRecord", "Trainer"]
