"""Every MCP message the gateway relays, as ``McpMessage`` rows in the order they passed: stamped when seen,
buffered, and written in one transaction at the end of each harness request (and by ``flush``), so a burst of
progress notifications costs one write, not one per message."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy.engine import Engine

from rollwire.errors import StoreError
from rollwire.store import McpMessage, now_ns, session_scope

log = logging.getLogger(__name__)

HARNESS_IN = "harness->gateway"
HARNESS_OUT = "gateway->harness"


class MessageLog:
    """The buffer of relayed messages and its writer."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._pending: list[McpMessage] = []
        self._lock = anyio.Lock()
        self._last_ns = 0

    def _stamp(self) -> int:
        """Strictly increasing within the process, so rows sort in the order they were seen."""
        self._last_ns = max(now_ns(), self._last_ns + 1)
        return self._last_ns

    def add(
        self, rollout_id: str, direction: str, kind: str, method: str, body: Any, server: str = "", request_id: Any = None
    ) -> None:
        self._pending.append(
            McpMessage(
                rollout_id=rollout_id, direction=direction, kind=kind, method=method, server=server,
                request_id=None if request_id is None else str(request_id),
                body_json=json.dumps(body, default=str), at_ns=self._stamp(),
            )
        )  # fmt: skip

    def _write(self, rows: list[McpMessage]) -> None:
        with session_scope(self._engine) as session:
            session.add_all(rows)

    async def flush(self) -> None:
        """Write what is buffered; a store failure is logged (the harness still gets its answer)."""
        async with self._lock:
            rows, self._pending = self._pending, []
            if not rows:
                return
            try:
                await anyio.to_thread.run_sync(self._write, rows)
            except StoreError as exc:
                log.error("%d MCP messages not recorded: %s", len(rows), exc.message)
            except Exception as exc:  # noqa: BLE001 - e.g. a rollout row gone: never fail the harness's call for it
                log.error("%d MCP messages not recorded: %s", len(rows), exc)

    async def run(self, every_s: float = 0.5) -> None:
        """Flush what arrives outside harness requests (log lines, resource updates) every ``every_s``."""
        while True:
            await anyio.sleep(every_s)
            await self.flush()


__all__ = ["HARNESS_IN", "HARNESS_OUT", "MessageLog"]
