"""Per-rollout tool limits: how many calls, which tools (allow-list), and how long one call may take."""

from __future__ import annotations

import fnmatch
from collections import Counter

from rollwire.settings import GatewaySettings


class LimitExceeded(Exception):
    """A call the limits refuse; its message goes back to the model as a tool error."""


class RolloutLimits:
    """Counts calls per rollout and checks each new one against the settings."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.max_calls = settings.max_tool_calls
        self.timeout_s = settings.call_timeout_s
        self.allowed = list(settings.allowed_tools)
        self._calls: Counter[str] = Counter()

    def allows_tool(self, name: str) -> bool:
        return not self.allowed or any(fnmatch.fnmatchcase(name, pattern) for pattern in self.allowed)

    def admit(self, rollout_id: str, tool: str) -> None:
        """Count one call, or raise LimitExceeded (the refused call is not counted)."""
        if not self.allows_tool(tool):
            raise LimitExceeded(f"tool {tool!r} is not allowed for this rollout")
        if self._calls[rollout_id] >= self.max_calls:
            raise LimitExceeded(f"tool-call limit reached: this rollout may make {self.max_calls} calls")
        self._calls[rollout_id] += 1

    def used(self, rollout_id: str) -> int:
        return self._calls[rollout_id]


__all__ = ["LimitExceeded", "RolloutLimits"]
