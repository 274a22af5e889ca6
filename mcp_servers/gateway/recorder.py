"""Write one ToolEvent row per tool call (arguments, result, error, latency, start/end ns) off the event loop."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine

from rollwire.errors import Forbidden, StoreError
from rollwire.rollouts import guard_active
from rollwire.store import ToolEvent, session_scope

log = logging.getLogger(__name__)


@dataclass
class ToolCallRecord:
    rollout_id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    result: Any
    is_error: bool
    error: str | None
    started_ns: int
    ended_ns: int
    result_bytes: int = 0
    truncated: bool = False
    replayed_from: int | None = None
    """The recorded ToolEvent whose result answered the call (a replay), None for a live one."""


class ToolRecorder:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.listeners: list[Callable[[ToolCallRecord], None]] = []
        """Called with each record once it is stored (metrics)."""

    def _write(self, record: ToolCallRecord) -> None:
        with session_scope(self._engine) as session:
            guard_active(session.connection(), record.rollout_id)
            session.add(
                ToolEvent(
                    rollout_id=record.rollout_id,
                    server=record.server,
                    tool=record.tool,
                    arguments_json=json.dumps(record.arguments, default=str),
                    result_json=json.dumps(record.result, default=str),
                    is_error=record.is_error,
                    error=record.error,
                    result_bytes=record.result_bytes,
                    truncated=record.truncated,
                    latency_ms=(record.ended_ns - record.started_ns) / 1e6,
                    started_ns=record.started_ns,
                    ended_ns=record.ended_ns,
                    replayed_from=record.replayed_from,
                )
            )

    async def record(self, record: ToolCallRecord) -> str | None:
        """Store the call; a store failure is logged, and the model still gets its result. Returns why nothing
        was recorded when the rollout no longer takes records (it ended during the call), else None."""
        try:
            await anyio.to_thread.run_sync(self._write, record)
        except Forbidden as exc:
            return exc.message
        except StoreError as exc:
            log.error("tool event not recorded for %s/%s: %s", record.server, record.tool, exc.message)
            return None
        log.debug("tool call recorded", extra={"rollout_id": record.rollout_id, "server": record.server, "tool": record.tool})
        for listener in self.listeners:
            listener(record)
        return None


__all__ = ["ToolCallRecord", "ToolRecorder"]
