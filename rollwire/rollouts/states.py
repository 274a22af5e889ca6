"""The rollout states and the one table of transitions allowed between them (every writer checks it)."""

from __future__ import annotations

from rollwire.errors import Conflict, InvalidRequest
from rollwire.store.schema import RolloutStatus

S = RolloutStatus
TRANSITIONS: dict[RolloutStatus, frozenset[RolloutStatus]] = {
    S.PENDING: frozenset({S.STARTING, S.FAILED, S.CANCELLED}),
    S.STARTING: frozenset({S.RUNNING, S.FAILED, S.TIMED_OUT, S.CANCELLED}),
    S.RUNNING: frozenset({S.SCORING, S.FINISHED, S.FAILED, S.TIMED_OUT, S.CANCELLED}),
    S.SCORING: frozenset({S.FINISHED, S.FAILED, S.CANCELLED}),
    S.FINISHED: frozenset(),
    S.FAILED: frozenset(),
    S.TIMED_OUT: frozenset(),
    S.CANCELLED: frozenset(),
}
"""state -> states it may move to; final states move nowhere. running -> finished is a rollout scored outside
rollwire (the admin API's finish with a reward); the orchestrator goes through scoring."""

TOKEN_WORKS = frozenset({S.STARTING, S.RUNNING})
"""States in which a rollout's token is accepted by the proxy and the gateway (pending rows hold no usable token;
from scoring on, the harness is done and the trajectory must not change)."""


def can_move(source: RolloutStatus, target: RolloutStatus) -> bool:
    return target in TRANSITIONS[source]


def check_move(rollout_id: str, source: RolloutStatus, target: RolloutStatus) -> None:
    """Conflict (409) unless ``source -> target`` is in the table."""
    if not can_move(source, target):
        allowed = ", ".join(sorted(TRANSITIONS[source])) or "none: it is final"
        raise Conflict(f"rollout {rollout_id} is {source}; it cannot become {target} (allowed: {allowed})")


def parse_status(value: object) -> RolloutStatus:
    try:
        return RolloutStatus(str(value))
    except ValueError:
        known = ", ".join(s.value for s in RolloutStatus)
        raise InvalidRequest(f"unknown status {value!r}; known: {known}", param="status") from None


__all__ = ["TOKEN_WORKS", "TRANSITIONS", "can_move", "check_move", "parse_status"]
