"""Adapt a suite's checkers to the orchestrator's Scorer protocol: score an ended rollout from its env state.

It lives with the orchestrator (which depends on the task suites), not with the suites: the suites know nothing
of the orchestrator, so the two packages do not import each other.

The checkers read state the policy under training left behind, so they run in a child process with a time and
a memory limit (``checker_process``); past either, ``score`` raises ``CheckerLimit``."""

from __future__ import annotations

from pathlib import Path

from rollwire.mcp_servers.tasks.checkers import score
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.orchestrator.checker_process import run_limited
from rollwire.orchestrator.scoring import Score, ScoringInput

PRELOAD = ("rollwire.mcp_servers.tasks.checkers", "rollwire.orchestrator.checker_process")
"""What the checker processes' forkserver imports once, so each scoring starts with them loaded."""


class SuiteScorer:
    """Scores rollouts of one suite; their env state is ``<state_root>/<rollout_id>`` (the env servers' folder)."""

    def __init__(self, suite: str, state_root: Path, timeout_s: float = 30.0, max_memory_mb: int = 512) -> None:
        self.suite = load_suite(suite)
        self.state_root = Path(state_root)
        self.timeout_s = timeout_s
        self.max_memory_mb = max_memory_mb

    async def score(self, item: ScoringInput) -> Score:
        task = self.suite.task(item.task_id)
        folder = self.state_root / item.rollout_id
        result = await run_limited(
            score, task, folder, item.final_answer,
            timeout_s=self.timeout_s, memory_bytes=self.max_memory_mb << 20, preload=PRELOAD,
        )  # fmt: skip
        return Score(reward=result.reward, breakdown=result.breakdown)


__all__ = ["PRELOAD", "SuiteScorer"]
