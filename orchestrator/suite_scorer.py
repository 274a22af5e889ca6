"""Adapt a suite's checkers to the orchestrator's Scorer protocol: score an ended rollout from its env state.

It lives with the orchestrator (which depends on the task suites), not with the suites: the suites know nothing
of the orchestrator, so the two packages do not import each other."""

from __future__ import annotations

from pathlib import Path

import anyio.to_thread
from rollwire.mcp_servers.tasks.checkers import score
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.orchestrator.scoring import Score, ScoringInput


class SuiteScorer:
    """Scores rollouts of one suite; their env state is ``<state_root>/<rollout_id>`` (the env servers' folder)."""

    def __init__(self, suite: str, state_root: Path) -> None:
        self.suite = load_suite(suite)
        self.state_root = Path(state_root)

    async def score(self, item: ScoringInput) -> Score:
        task = self.suite.task(item.task_id)
        result = await anyio.to_thread.run_sync(score, task, self.state_root / item.rollout_id, item.final_answer)
        return Score(reward=result.reward, breakdown=result.breakdown)


__all__ = ["SuiteScorer"]
