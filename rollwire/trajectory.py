"""Segment and Trajectory: what the trainer learns from, as exact token ids.

A segment is one token sequence the engine really saw: prompt tokens (loss mask 0) and sampled tokens
(loss mask 1) with their behaviour logprobs. A rollout whose history was rewritten has several, and a side
call of the harness (a title, a compaction summary) is a segment of its own, marked by its ``line``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Segment:
    token_ids: list[int]
    loss_mask: list[int]
    """1 exactly on tokens the engine sampled, 0 on everything it was only shown."""
    logprobs: list[float]
    """Behaviour logprob of each token under the sampling policy; 0.0 where loss_mask is 0."""
    policy_versions: list[int]
    """Policy version that sampled each token; -1 where loss_mask is 0."""
    break_reason: str | None = None
    """Why this segment could not continue the previous one (None for the first)."""
    call_ids: list[int] = field(default_factory=list)
    """ModelCall ids whose tokens this segment holds, in order."""
    line: str = "main"
    """The agent's main line, or ``side:<rule>`` for a side call (title, compaction, ...: ``side_calls``)."""
    truncated: bool = False
    """The segment's last call stopped at its token limit (finish reason ``length``): an overlong sample."""
    temperature: list[float] = field(default_factory=list)
    """Sampling temperature of each token (1.0 where loss_mask is 0); empty: all 1.0."""
    top_p: list[float] = field(default_factory=list)
    """Nucleus of each token's sampling (1.0: none); empty: all 1.0. The behaviour logprobs are of this
    processed distribution (temperature-scaled, nucleus-renormalised), and so are the trainer's."""

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if not (len(self.loss_mask) == len(self.logprobs) == len(self.policy_versions) == n):
            raise ValueError("segment arrays must have equal lengths")
        if len(self.temperature) not in (0, n) or len(self.top_p) not in (0, n):
            raise ValueError("segment sampling arrays must be empty or as long as the tokens")

    @property
    def num_sampled(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        return {
            "token_ids": self.token_ids,
            "loss_mask": self.loss_mask,
            "logprobs": self.logprobs,
            "policy_versions": self.policy_versions,
            "break_reason": self.break_reason,
            "call_ids": self.call_ids,
            "line": self.line,
            "truncated": self.truncated,
            **({"temperature": self.temperature} if self.temperature else {}),
            **({"top_p": self.top_p} if self.top_p else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Segment:
        return cls(
            token_ids=list(data["token_ids"]),
            loss_mask=list(data["loss_mask"]),
            logprobs=[float(x) for x in data["logprobs"]],
            policy_versions=list(data["policy_versions"]),
            break_reason=data.get("break_reason"),
            call_ids=list(data.get("call_ids") or []),
            truncated=bool(data.get("truncated", False)),
            temperature=[float(x) for x in data.get("temperature") or []],
            top_p=[float(x) for x in data.get("top_p") or []],
            line=str(data.get("line", "main")),
        )


INFRASTRUCTURE = "infrastructure"
"""Error prefix (``"infrastructure: ..."``) of a rollout the platform failed (node lost, engine down): retried as
a new row, and not streamed; the last attempt (``"infrastructure (no retry left): ..."``) is streamed."""
SETUP = "setup"
"""Error prefix of a rollout that could not run as configured (bad image, bad command): not the policy's doing."""
CHECKER = "checker"
"""Error prefix of a rollout whose checker raised: its reward is unknown."""
POLICY = "policy"
"""A rollout the policy itself failed: the harness exited non-zero or hit its deadline or budget."""


def failure_cause(status: str, error: str | None) -> str | None:
    """Why a rollout failed (status failed / timed_out): policy, infrastructure, setup or checker; else None.

    Only a ``policy`` failure says something about the policy (it trains, with the failure reward);
    the others are excluded from training.
    """
    if status not in ("failed", "timed_out"):
        return None
    text = (error or "").strip()
    for cause in (INFRASTRUCTURE, SETUP):
        if text.startswith((cause + ":", cause + " (")):
            return cause
    if text.startswith("checker failed"):
        return CHECKER
    return POLICY


@dataclass(frozen=True, slots=True)
class Trajectory:
    rollout_id: str
    run_id: str
    task_id: str | None
    group_id: str | None
    """Rollouts of one group share a task and are compared with each other (GRPO)."""
    reward: float | None
    status: str
    segments: list[Segment]
    cursor: int = 0
    """Position in the run's stream of finished rollouts; a consumer resumes after it."""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def failure_cause(self) -> str | None:
        """policy / infrastructure / setup / checker for a rollout that did not finish (see ``failure_cause``)."""
        return failure_cause(self.status, self.metadata.get("error"))

    @property
    def purpose(self) -> str | None:
        """What the rollout was for in its run (``train``, ``teacher``, ``eval``), from its row's ``meta.purpose``."""
        purpose = (self.metadata.get("meta") or {}).get("purpose")
        return str(purpose) if purpose is not None else None

    @property
    def truncated(self) -> bool:
        """Some segment ended at the token limit (an overlong sample)."""
        return any(s.truncated for s in self.segments)

    @property
    def policy_versions(self) -> set[int]:
        return {v for s in self.segments for v in s.policy_versions if v >= 0}

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "reward": self.reward,
            "status": self.status,
            "segments": [s.to_dict() for s in self.segments],
            "cursor": self.cursor,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        return cls(
            rollout_id=data["rollout_id"],
            run_id=data["run_id"],
            task_id=data.get("task_id"),
            group_id=data.get("group_id"),
            reward=data.get("reward"),
            status=data["status"],
            segments=[Segment.from_dict(s) for s in data["segments"]],
            cursor=int(data.get("cursor", 0)),
            metadata=dict(data.get("metadata") or {}),
        )


__all__ = ["CHECKER", "INFRASTRUCTURE", "POLICY", "SETUP", "Segment", "Trajectory", "failure_cause"]
