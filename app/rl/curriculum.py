"""Which task the next group samples: a learnability weight per task, drawn with a seeded generator.

A group whose rewards are all equal carries no GRPO signal, and a task the policy always (or never) solves
yields only such groups. A task's weight is ``p * (1 - p)`` of its recent pass rate ``p`` (the variance of a
pass/fail reward: largest at p = 0.5, zero at 0 and 1), floored so no task starves and a solved task is still
checked now and then. A task never sampled counts as p = 0.5: it is tried first. The rule and its inputs are
all recorded on each draw, so a run's choices can be explained, and repeated from the same history.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rollwire.errors import InvalidRequest

UNSEEN_PASS_RATE = 0.5


@dataclass(frozen=True, slots=True)
class Draw:
    """One group's task choice and why: its index, the task, its weight and pass rate, and the total weight."""

    index: int
    task_id: str
    weight: float
    pass_rate: float | None
    """The task's recent pass rate when drawn (None: never sampled, counted as 0.5)."""
    total_weight: float
    """The sum of every task's weight then: the task's chance was ``weight / total_weight``."""
    seed: int

    @property
    def probability(self) -> float:
        return self.weight / self.total_weight if self.total_weight else 0.0

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Curriculum:
    """Recent rewards per task (the last ``window`` rollouts) and the draw rule over them."""

    task_ids: Sequence[str]
    seed: int = 0
    floor: float = 0.05
    """The least weight a task has (the most, 0.25, is a task at p = 0.5): a solved task is drawn 5x less."""
    window: int = 16
    recent: dict[str, deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.task_ids:
            raise InvalidRequest("the curriculum needs at least one task", param="tasks")
        if not 0 < self.floor <= 0.25:
            raise InvalidRequest("--curriculum-floor must be above 0 and at most 0.25", param="floor")
        if self.window < 1:
            raise InvalidRequest("--curriculum-window must be at least 1", param="window")

    def record(self, task_id: str, rewards: Iterable[float]) -> None:
        """A finished group's rewards (each clipped to [0, 1], a pass rate's range) join the task's window."""
        recent = self.recent.setdefault(task_id, deque(maxlen=self.window))
        recent.extend(min(1.0, max(0.0, float(r))) for r in rewards)

    def pass_rate(self, task_id: str) -> float | None:
        recent = self.recent.get(task_id)
        return sum(recent) / len(recent) if recent else None

    def weight(self, task_id: str) -> float:
        rate = self.pass_rate(task_id)
        p = UNSEEN_PASS_RATE if rate is None else rate
        return max(p * (1.0 - p), self.floor)

    def draw(self, index: int) -> Draw:
        """The ``index``-th draw: a weighted choice by a generator seeded with (seed, index), so it depends on
        the history recorded so far and on nothing else."""
        weights = [self.weight(task_id) for task_id in self.task_ids]
        total = sum(weights)
        rng = random.Random(f"{self.seed}:{index}")
        task_id = rng.choices(list(self.task_ids), weights=weights)[0]
        chosen = self.task_ids.index(task_id)
        return Draw(index, task_id, weights[chosen], self.pass_rate(task_id), total, self.seed)


__all__ = ["UNSEEN_PASS_RATE", "Curriculum", "Draw"]
