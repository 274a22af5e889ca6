"""The orchestrator's Prometheus metrics: rollouts ended by status, infrastructure retries, rollouts running and
queued, and the rewards of finished rollouts, all read off the scheduler's ``Progress`` as it reports it.

The first report of a run (the rows a resumed run finds already final) only sets the gauges: counters count the
rollouts this process drove to an end. ``rollwire rollouts --metrics-port`` serves them (``rollwire.metrics``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rollwire.orchestrator.scheduler import Progress

REWARD_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
ENDED = ("finished", "failed", "timed_out")


@dataclass(slots=True)
class _Seen:
    finished: int
    failed: int
    timed_out: int
    retried: int
    rewards: int


class OrchestratorMetrics:
    """Wrap a run's ``on_progress`` with ``observe(...)``; one registry for every run the process drives."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ended = Counter(
            "rollwire_orchestrator_rollouts", "Rollouts that reached a final state, by status", ["status"],
            registry=self.registry,
        )  # fmt: skip
        self.retries = Counter(
            "rollwire_orchestrator_rollout_retries", "Rollouts lost to infrastructure and started again",
            registry=self.registry,
        )  # fmt: skip
        self.running = Gauge("rollwire_orchestrator_rollouts_running", "Rollouts running now", registry=self.registry)
        self.queued = Gauge(
            "rollwire_orchestrator_rollouts_queued", "Rollouts planned and waiting for a slot (queue depth)",
            registry=self.registry,
        )  # fmt: skip
        self.reward = Histogram(
            "rollwire_orchestrator_rollout_reward", "Reward of each finished rollout", buckets=REWARD_BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self._seen: dict[int, _Seen] = {}

    def observe(self, then: Callable[[Progress], None] | None = None) -> Callable[[Progress], None]:
        """An ``on_progress`` callback that updates the metrics, then calls ``then`` (the live bar)."""

        def on_progress(progress: Progress) -> None:
            self.update(progress)
            if then is not None:
                then(progress)

        return on_progress

    def update(self, progress: Progress) -> None:
        now = _Seen(progress.finished, progress.failed, progress.timed_out, progress.retried, len(progress.rewards))
        seen = self._seen.setdefault(id(progress), now)  # a run's first report is its baseline
        for status in ENDED:
            self.ended.labels(status).inc(getattr(now, status) - getattr(seen, status))
        self.retries.inc(now.retried - seen.retried)
        for reward in progress.rewards[seen.rewards : now.rewards]:
            self.reward.observe(reward)
        self._seen[id(progress)] = now
        self.running.set(progress.running)
        self.queued.set(max(progress.planned - progress.done - progress.running, 0))


__all__ = ["OrchestratorMetrics"]
