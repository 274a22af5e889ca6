"""The Scorer protocol the scheduler calls once a rollout's harness has ended, and the simple scorers.

A task suite's checker reads the rollout's final environment state (keyed by its token in the MCP env
servers) and its final answer, and returns a reward with a breakdown. The suites and their checkers live
in ``rollwire.mcp_servers.tasks``; a scorer adapts them to this protocol so the scheduler stays testable on
its own. A checker that raises is recorded as a failed rollout (never retried: it is not infrastructure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ScoringInput:
    """What a checker may look at: the rollout's identity, its token (env state key), and how it ended."""

    run_id: str
    rollout_id: str
    task_id: str
    token: str
    final_answer: str | None
    exit_code: int | None
    log_tail: str


@dataclass(frozen=True, slots=True)
class Score:
    reward: float
    breakdown: Mapping[str, object] = field(default_factory=dict)


@runtime_checkable
class Scorer(Protocol):
    """Turns one ended rollout into a reward; may call the env servers, so it is async."""

    async def score(self, item: ScoringInput) -> Score: ...


class ExpectedAnswerScorer:
    """Reward 1.0 when the final answer equals the task's expected answer (after stripping), else 0.0."""

    def __init__(self, expected: Mapping[str, str]) -> None:
        self._expected = dict(expected)

    async def score(self, item: ScoringInput) -> Score:
        want = self._expected.get(item.task_id)
        got = (item.final_answer or "").strip()
        correct = want is not None and got == want.strip()
        return Score(reward=1.0 if correct else 0.0, breakdown={"exact_match": float(correct), "exit_code": item.exit_code})


class ExitCodeScorer:
    """Reward 1.0 for exit status 0; the fallback when a suite has no checker (smoke runs, benchmarks)."""

    async def score(self, item: ScoringInput) -> Score:
        ok = item.exit_code == 0
        return Score(reward=1.0 if ok else 0.0, breakdown={"exit_ok": float(ok)})


__all__ = ["ExitCodeScorer", "ExpectedAnswerScorer", "Score", "Scorer", "ScoringInput"]
