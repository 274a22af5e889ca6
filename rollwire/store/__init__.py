"""The trace store: sqlmodel tables, engine and sessions, compact token encodings."""

from rollwire.store.codec import decode_floats, decode_ids, encode_floats, encode_ids
from rollwire.store.db import open_engine, session_scope
from rollwire.store.schema import (
    McpMessage,
    ModelCall,
    Refusal,
    ReplayDivergence,
    Rollout,
    RolloutStatus,
    Run,
    ToolEvent,
    now_ns,
)  # fmt: skip

__all__ = [
    "McpMessage",
    "ModelCall",
    "Refusal",
    "ReplayDivergence",
    "Rollout",
    "RolloutStatus",
    "Run",
    "ToolEvent",
    "decode_floats",
    "decode_ids",
    "encode_floats",
    "encode_ids",
    "now_ns",
    "open_engine",
    "session_scope",
]
