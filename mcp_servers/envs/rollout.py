"""Which rollout a tool call belongs to, and that rollout's seeded state folder for one server.

The gateway forwards the rollout id and task in headers; over stdio (no headers) the process serves one
configured rollout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from rollwire.errors import RollwireError
from rollwire.mcp_servers.state import ROLLOUT_HEADER, TASK_HEADER, Seeder, StateStore


@dataclass
class EnvRuntime:
    """What every env server needs: the state store, the stdio rollout, and the per-rollout size limits."""

    store: StateStore
    default_rollout: str = "local"
    default_task: str | None = None
    max_payload_bytes: int = 1_000_000
    workspace_quota_bytes: int = 20_000_000
    sqldb_max_bytes: int = 50_000_000
    sqldb_max_result_bytes: int = 1_000_000

    def folder(self, ctx: Context[Any, Any], server: str, seed: Seeder) -> Path:
        """The calling rollout's folder for ``server``, seeded on first use; a ToolError on a bad identity."""
        headers = ctx.headers or {}
        rollout = headers.get(ROLLOUT_HEADER) or self.default_rollout
        task = headers.get(TASK_HEADER) or self.default_task
        try:
            return self.store.ensure(rollout, task, server, seed)
        except RollwireError as exc:
            raise ToolError(exc.message) from None

    def check_size(self, name: str, value: str) -> None:
        """Refuse payloads above the limit with an error the model can read."""
        size = len(value.encode())
        if size > self.max_payload_bytes:
            raise ToolError(f"{name} is {size} bytes; the limit is {self.max_payload_bytes}")


__all__ = ["EnvRuntime"]
