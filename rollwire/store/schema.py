"""The trace store's tables: runs, rollouts, model calls and tool events.

Token ids and logprobs are stored as bytes (see ``codec``); request/response bodies as JSON text.
Times are integer nanoseconds since the epoch, so model calls and tool events written by different
processes interleave by ``started_ns``.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Enum, Index, Integer, LargeBinary
from sqlmodel import Field, SQLModel

BIG = BigInteger()
"""Every ``*_ns`` time and the stream cursor: nanoseconds since the epoch overflow Postgres' 32-bit ``integer``."""
ROW_ID = BigInteger().with_variant(Integer(), "sqlite")
"""Row ids: 64-bit on Postgres; SQLite's autoincrementing key must be spelled INTEGER (64-bit there anyway)."""


def now_ns() -> int:
    return time.time_ns()


class RolloutStatus(StrEnum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SCORING = "scoring"
    FINISHED = "finished"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (RolloutStatus.FINISHED, RolloutStatus.FAILED, RolloutStatus.TIMED_OUT, RolloutStatus.CANCELLED)


STATUS_TYPE = Enum(RolloutStatus, native_enum=False, length=16)
"""Stored as the member name in a plain VARCHAR on every database (no Postgres ENUM type to migrate)."""


class Run(SQLModel, table=True):
    id: str = Field(primary_key=True)
    name: str = ""
    kind: str = Field(default="adhoc", description="adhoc, rollouts, teacher, eval, ...")
    config: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_ns: int = Field(default_factory=now_ns, sa_type=BIG)


class Rollout(SQLModel, table=True):
    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True)
    token_hash: str = Field(index=True, unique=True, description="sha256 of the rollout's secret token")
    task_id: str | None = None
    group_id: str | None = Field(default=None, index=True)
    sample_index: int = 0
    attempt: int = 0
    status: RolloutStatus = Field(default=RolloutStatus.PENDING, index=True, sa_type=STATUS_TYPE)
    reward: float | None = None
    reward_breakdown: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    final_answer: str | None = None
    exit_code: int | None = None
    log_tail: str | None = None
    error: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    budgets: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column(JSON, nullable=False), description="per-rollout limits (see budgets)"
    )
    created_ns: int = Field(default_factory=now_ns, sa_type=BIG)
    started_ns: int | None = Field(default=None, sa_type=BIG)
    finished_ns: int | None = Field(default=None, sa_type=BIG)
    finished_seq: int | None = Field(
        default=None,
        index=True,
        unique=True,
        sa_type=BIG,
        description="stream cursor, assigned when the rollout becomes final",
    )


CALLS_BY_ROLLOUT = "ix_modelcall_rollout_status"
"""A rollout's calls by status, id included: the proxy asks which of a rollout's calls are complete before every
splice, and the index alone answers it. A row's ``status`` lies past its prompt and request columns, which run to
overflow pages once a harness's prompt is long: read from the table, every earlier call cost a walk of its
overflow chain, per call."""


ENGINE_FAILED = "engine_failed"
"""A model call's status when the engine failed it (``ModelCall.status``): evidence that the rollout's ending is
the platform's, whatever its harness then did (``Scheduler``)."""


class ModelCall(SQLModel, table=True):
    __table_args__ = (Index(CALLS_BY_ROLLOUT, "rollout_id", "status", postgresql_include=["id"]),)

    id: int | None = Field(default=None, primary_key=True, sa_type=ROW_ID)
    rollout_id: str = Field(foreign_key="rollout.id")
    dialect: str = "chat"
    requested_model: str = ""
    served_model: str = ""
    client: str = Field(
        default="",
        sa_column_kwargs={"server_default": ""},
        description="the caller's User-Agent, printable and bounded (rollwire.clients): which harness and version",
    )
    request_json: str = Field(
        default="",
        description="the request as sent, or the text between the head and tail an edit keeps of its base's "
        "(rollwire.store.requests)",
    )
    request_base: int | None = Field(
        default=None,
        sa_type=BIG,
        description="the earlier call whose whole request this one's edits. None: request_json is the whole request",
    )
    request_head: int = Field(
        default=0,
        sa_column_kwargs={"server_default": "0"},
        description="characters of the base's whole request that open this one's",
    )
    request_tail: int = Field(
        default=0,
        sa_column_kwargs={"server_default": "0"},
        description="characters of the base's whole request that close this one's",
    )
    response_json: str = ""
    prompt_ids: bytes = Field(default=b"", sa_column=Column(LargeBinary, nullable=False))
    prompt_base: int | None = Field(
        default=None,
        sa_type=BIG,
        description="the earlier call whose prompt + sampled ids open this one's; prompt_ids then holds the rest "
        "(rollwire.store.prompts). None: prompt_ids is the whole prompt",
    )
    completion_ids: bytes = Field(default=b"", sa_column=Column(LargeBinary, nullable=False))
    completion_logprobs: bytes = Field(default=b"", sa_column=Column(LargeBinary, nullable=False))
    choice_index: int = 0
    finish_reason: str | None = None
    sampling: dict[str, Any] = Field(
        default_factory=dict,
        sa_column=Column(JSON, nullable=False, server_default="{}"),
        description="sampling parameters sent to the engine (temperature, top_p, top_k, seed, max_tokens)",
    )
    policy_version: int = 0
    segment_index: int = 0
    segment_break: str | None = Field(default=None, description="why this call started a new segment")
    reused_prefix_len: int = Field(default=0, description="prompt tokens taken verbatim from an earlier call")
    line: str = Field(
        default="main", description="the agent's main line, or side:<rule> for a side call (rollwire.side_calls)"
    )
    max_tokens_requested: int | None = Field(default=None, description="the output cap the request asked for")
    max_tokens_granted: int | None = Field(
        default=None, description="the output cap sent upstream: the request's, clamped to what the context left"
    )
    status: str = Field(
        default="complete",
        description="complete, partial (the client left), engine_failed (the engine failed the call: a 5xx, a "
        "timeout, a dropped connection; the platform's failure, not the rollout's) or error (the proxy failed it)",
    )
    error: str | None = None
    latency_ms: float = 0.0
    started_ns: int = Field(default_factory=now_ns, sa_type=BIG)
    ended_ns: int = Field(default_factory=now_ns, sa_type=BIG)


class ToolEvent(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True, sa_type=ROW_ID)
    rollout_id: str = Field(foreign_key="rollout.id", index=True)
    server: str = ""
    tool: str = ""
    arguments_json: str = ""
    result_json: str = ""
    is_error: bool = False
    error: str | None = None
    result_bytes: int = Field(default=0, sa_type=BIG, description="size of the upstream's result before any cap")
    truncated: bool = Field(default=False, description="the stored and returned result was cut to the gateway's cap")
    latency_ms: float = 0.0
    started_ns: int = Field(default_factory=now_ns, index=True, sa_type=BIG)
    ended_ns: int = Field(default_factory=now_ns, sa_type=BIG)
    replayed_from: int | None = Field(
        default=None, sa_type=BIG, description="the recorded ToolEvent whose result this call was answered with (a replay)"
    )


class McpMessage(SQLModel, table=True):
    """One MCP message the gateway relayed for a rollout, in order: the harness's requests and notifications, the
    gateway's answers, and what upstream servers sent back (progress, logs, sampling/elicitation/roots requests and
    the harness's answers to them). A tool call's messages sit between its ToolEvent's ``started_ns`` and
    ``ended_ns``."""

    id: int | None = Field(default=None, primary_key=True, sa_type=ROW_ID)
    rollout_id: str = Field(foreign_key="rollout.id", index=True)
    direction: str = Field(default="", description="harness->gateway, gateway->harness, upstream->harness, harness->upstream")
    kind: str = Field(default="", description="request, response, error or notification")
    method: str = ""
    server: str = Field(default="", description="the upstream server it came from or went to; empty for the gateway")
    request_id: str | None = Field(default=None, description="the JSON-RPC id of the request (or of the one answered)")
    body_json: str = ""
    at_ns: int = Field(default_factory=now_ns, index=True, sa_type=BIG)


class Refusal(SQLModel, table=True):
    """A call the proxy or gateway refused for a rollout (budget spent, token ended): why, never a ToolEvent."""

    id: int | None = Field(default=None, primary_key=True, sa_type=ROW_ID)
    rollout_id: str = Field(foreign_key="rollout.id", index=True)
    source: str = Field(default="proxy", description="proxy or gateway")
    kind: str = Field(default="", description="model_calls, sampled_tokens, concurrent_requests, deadline, tool_calls")
    target: str = Field(default="", description="the refused tool's name, or the dialect of a refused model call")
    reason: str = ""
    created_ns: int = Field(default_factory=now_ns, index=True, sa_type=BIG)


class ReplayDivergence(SQLModel, table=True):
    """Where a replay's tool calls stopped matching its recording (``rollwire replay``): at most one per rollout."""

    id: int | None = Field(default=None, primary_key=True, sa_type=ROW_ID)
    rollout_id: str = Field(foreign_key="rollout.id", index=True)
    recorded_rollout_id: str = Field(default="", description="the rollout whose recording the replay followed")
    tool_call: int = Field(default=0, description="which tool call of the rollout diverged (1 for its first)")
    turn: int = Field(default=0, description="how many of the rollout's model calls had started before it")
    server: str = ""
    expected_json: str = Field(default="", description='the recorded call there, {"tool", "arguments"}; "" for none left')
    actual_json: str = Field(default="", description='the call made, {"tool", "arguments"}')
    action: str = Field(default="live", description="live: tools went live from there; stop: every later call refused")
    at_ns: int = Field(default_factory=now_ns, sa_type=BIG)


class SchemaVersion(SQLModel, table=True):
    """One row: the schema version this store was created (or migrated) to."""

    __tablename__ = "rollwire_schema"
    id: int = Field(default=1, primary_key=True)
    version: int = Field(default=0)


__all__ = [
    "ENGINE_FAILED", "McpMessage", "ModelCall", "Refusal", "ReplayDivergence", "Rollout", "RolloutStatus", "Run",
    "SchemaVersion", "ToolEvent", "now_ns",
]  # fmt: skip
