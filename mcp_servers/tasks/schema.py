"""The task and suite data model: what a rollout is asked, which servers it needs, its initial state and checker."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollwire.errors import InvalidRequest
from rollwire.rollouts.budgets import parse_budgets


class Criterion(BaseModel):
    """One checklist item of a checker; ``kind`` names a check in ``checkers.CHECKS``."""

    kind: str = Field(
        description="file_exists, file_equals, file_contains, sql_equals, event_exists, mail_sent, answer_contains"
    )
    weight: float = Field(1.0, gt=0)
    name: str = Field("", description="Label in the breakdown; default kind + index.")
    args: dict[str, Any] = Field(default_factory=dict)


class ToolCall(BaseModel):
    """One step of a scripted solution: ``server`` . ``tool`` (``arguments``)."""

    server: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Task(BaseModel):
    id: str
    instruction: str
    servers: list[str] = Field(min_length=1)
    tools: list[str] | None = Field(
        None, description="Tool names the harness is shown (as the gateway exposes them); default: all of its servers'."
    )
    initial_state: dict[str, dict[str, Any]] = Field(default_factory=dict, description="server name -> its seed")
    checker: list[Criterion] = Field(min_length=1)
    split: Literal["train", "held_out"] = "train"
    reference_solution: list[ToolCall] = Field(default_factory=list)
    reference_answer: str | None = None


class Suite(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str = ""
    mcp_servers: dict[str, Any] = Field(
        default_factory=dict,
        alias="mcpServers",
        description='Third-party MCP servers its tasks may name, in the common format: {NAME: {"command", "args", '
        '"env"} | {"url", "headers"}}; {rollout_id} and {rollout_dir} are filled per rollout.',
    )
    budgets: dict[str, Any] = Field(
        default_factory=dict, description="Per-rollout budgets of a run of this suite (see rollwire.rollouts.budgets)."
    )

    @field_validator("budgets")
    @classmethod
    def _known_budgets(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            return parse_budgets(value)
        except InvalidRequest as exc:
            raise ValueError(exc.message) from None
    tasks: list[Task]

    def task(self, task_id: str) -> Task:
        """The task with this id (KeyError if none)."""
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def split(self, split: str) -> list[Task]:
        return [t for t in self.tasks if t.split == split]


__all__ = ["Criterion", "Suite", "Task", "ToolCall"]
