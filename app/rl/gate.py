"""Bounded staleness: how many task groups may be drawn ahead of training.

A group is *outstanding* from its draw until the trainer settles it (trains on it, or leaves it out for having
no reward spread). At most ``(max_lag + 1) * groups_per_step`` groups are outstanding: with ``max_lag`` = 0 the
sampler draws one step's groups and waits for that step (the lockstep loop); with ``max_lag`` = K it may sample
K steps ahead of the trainer, so a group drawn at policy version v is trained by the step that makes version
v + K + 1 (AReaL's rule: a slow group overtaken by later ones can lag more, and its lag is recorded).
A left-out group frees its place at once, so dynamic sampling draws its replacement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import anyio

from rollwire.errors import InvalidRequest


@dataclass(slots=True)
class StalenessGate:
    max_lag: int
    groups_per_step: int
    outstanding: set[str] = field(default_factory=set)
    _changed: anyio.Event | None = None
    """Set (and replaced) whenever groups settle; made in the event loop on first use."""

    def __post_init__(self) -> None:
        if self.max_lag < 0:
            raise InvalidRequest("--max-lag must be 0 (lockstep) or more", param="max_lag")
        if self.groups_per_step < 1:
            raise InvalidRequest("--groups-per-step must be at least 1", param="groups_per_step")

    @property
    def capacity(self) -> int:
        return (self.max_lag + 1) * self.groups_per_step

    def room(self) -> int:
        """Groups the sampler may draw now."""
        return max(0, self.capacity - len(self.outstanding))

    def drawn(self, group_id: str) -> None:
        if self.room() < 1:
            raise RuntimeError("a group was drawn with no room at the gate")
        self.outstanding.add(group_id)

    def settled(self, group_ids: Iterable[str]) -> None:
        """The trainer is done with these groups (trained or left out): their places open."""
        self.outstanding.difference_update(group_ids)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_for_room(self) -> None:
        while self.room() < 1:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()


__all__ = ["StalenessGate"]
