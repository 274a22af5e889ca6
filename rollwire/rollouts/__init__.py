"""Rollout identity and state, owned here and nowhere else: the transition table (``states``), tokens and their
lookup (``tokens``), the store writes that create, claim, move, finish and revoke rollouts (``book``), and
per-rollout budgets (``budgets``). The proxy, the MCP gateway, the admin API and the orchestrator all use it."""

from rollwire.rollouts.book import (
    RUNTIME_META,
    TAKES_RECORDS,
    PlannedRollout,
    RolloutBook,
    guard_active,
    new_rollout_id,
)
from rollwire.rollouts.states import TOKEN_WORKS, TRANSITIONS, can_move, check_move, parse_status
from rollwire.rollouts.tokens import Identity, TokenIndex, check_active, forget, hash_token, mint, unusable_hash

__all__ = [
    "RUNTIME_META",
    "TAKES_RECORDS",
    "TOKEN_WORKS",
    "TRANSITIONS",
    "Identity",
    "PlannedRollout",
    "RolloutBook",
    "TokenIndex",
    "can_move",
    "check_active",
    "check_move",
    "forget",
    "guard_active",
    "hash_token",
    "mint",
    "new_rollout_id",
    "parse_status",
    "unusable_hash",
]
