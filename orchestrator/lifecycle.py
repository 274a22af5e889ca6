"""The orchestrator's view of rollout states. Identity and state are owned by ``rollwire.rollouts`` (the
transition table, tokens, the compare-and-set writes and the stream cursor); this module re-exports what the
scheduler uses and adds run summaries."""

from __future__ import annotations

from collections.abc import Sequence

from rollwire.rollouts import RUNTIME_META, TRANSITIONS, PlannedRollout, RolloutBook, can_move
from rollwire.store.schema import Rollout, RolloutStatus


def final_counts(rows: Sequence[Rollout]) -> dict[str, int]:
    """How many rows sit in each state (progress display, run summaries)."""
    counts: dict[str, int] = {status.value: 0 for status in RolloutStatus}
    for row in rows:
        counts[RolloutStatus(row.status).value] += 1
    return counts


__all__ = ["RUNTIME_META", "TRANSITIONS", "PlannedRollout", "RolloutBook", "can_move", "final_counts"]
