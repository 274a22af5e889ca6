"""An ASGI gate in front of the proxy that holds a rollout at its first model call until the test opens it.

Tests that must act while a run is in the middle (interrupt it, look at a half-done run) wait on the gate's
``held`` event, a signal from the work itself, instead of sleeping and hoping the run is still going.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio.to_thread


def rollout_token(scope: dict[str, Any]) -> str | None:
    """The rollout token of a ``/r/{token}/...`` request (how the orchestrator points harnesses at the proxy)."""
    parts = str(scope.get("path", "")).split("/")
    return parts[2] if len(parts) > 2 and parts[1] == "r" else None


class RolloutGate:
    """Passes everything until armed; armed, it lets the first rollout token through and holds every other one.

    ``held`` is set when a second rollout reaches the proxy while armed (with one rollout at a time, the first
    is then final in the store); ``release()`` lets held requests go and disarms the gate.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.held = threading.Event()
        self._open = threading.Event()
        self._open.set()
        self._first: str | None = None

    def arm(self) -> None:
        self._first = None
        self.held.clear()
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        token = rollout_token(scope) if scope["type"] == "http" else None
        if token is not None and not self._open.is_set():
            self._first = self._first or token
            if token != self._first:
                self.held.set()
                await anyio.to_thread.run_sync(self._open.wait, abandon_on_cancel=True)
        await self.app(scope, receive, send)


__all__ = ["RolloutGate", "rollout_token"]
