"""The Runtime protocol every place a rollout can run implements: start, wait, stop, logs_tail (+ attach on resume).

The scheduler owns the lifecycle; a runtime only turns a ``RolloutJob`` into a running workload and
reports how it ended. ``EndKind`` separates what the scheduler retries (``LOST``: infrastructure) from
what it records as is (the harness exited, hit its deadline, or could not be launched as configured).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from rollwire.harness_adapters.base import Launch


class EndKind(StrEnum):
    EXITED = "exited"  # the harness ran and exited; exit_code says how
    TIMED_OUT = "timed_out"  # stopped at its deadline
    FAILED = "failed"  # could not run as configured (bad image, bad command): retrying will not help
    LOST = "lost"  # infrastructure (evicted, node lost, API unreachable): the scheduler retries it


@dataclass(frozen=True, slots=True)
class RolloutJob:
    run_id: str
    rollout_id: str
    launch: Launch
    deadline_s: float
    endpoints: tuple[str, ...] = ()
    """The proxy and gateway URLs the rollout may reach (a sandboxing runtime allows these and nothing else)."""


@dataclass(frozen=True, slots=True)
class Handle:
    """A started workload; ``ref`` (pod name, process group id) is what a restarted orchestrator re-attaches by."""

    rollout_id: str
    ref: str


@dataclass(frozen=True, slots=True)
class Ended:
    kind: EndKind
    exit_code: int | None = None
    reason: str | None = None
    final_answer: str | None = None
    answer_refused: str | None = None
    """Why the runtime would not read the rollout's final answer (a symlink, a FIFO, an oversize file, ...): the
    rollout made it so, and it fails as the policy's failure."""


@runtime_checkable
class Runtime(Protocol):
    """One workload per rollout. Use as ``async with runtime:`` (opens clients and watches)."""

    name: str

    async def start(self, job: RolloutJob) -> Handle:
        """Launch the job; idempotent per rollout id (a second start adopts the first workload)."""
        ...

    async def wait(self, handle: Handle, timeout_s: float) -> Ended:
        """Until the workload ends, or ``timeout_s`` passes (then stop it and report TIMED_OUT)."""
        ...

    async def logs_tail(self, handle: Handle, lines: int) -> str:
        """The last ``lines`` lines of combined stdout/stderr ('' when none can be read)."""
        ...

    async def stop(self, handle: Handle) -> None:
        """Kill the workload if still running and release what it held (pod, workspace); idempotent."""
        ...

    async def attach(self, rollout_id: str, ref: str) -> Handle | None:
        """Re-attach to a workload a previous orchestrator started; None if it is gone (or cannot be watched)."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


__all__ = ["EndKind", "Ended", "Handle", "RolloutJob", "Runtime"]
