"""Work a call leaves for after its answer has left: the splice state learning the call, the counters that no
answer waits on. Run once the answer has gone (the route's background task), and before any later call plans
(``Settling.settle``), so a later call always finds every committed one."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class Settling:
    def __init__(self) -> None:
        self._pending: deque[Callable[[], None]] = deque()

    def defer(self, work: Callable[[], None]) -> None:
        self._pending.append(work)

    def settle(self) -> None:
        """Run the work deferred so far, in order, each once, on the event loop (a client's latency does not carry
        it: ~5% of a call's CPU at concurrency 1)."""
        while self._pending:
            self._pending.popleft()()

    async def after_answer(self) -> None:
        """``settle`` as an answer's background task (Starlette runs an async one on the event loop, not a worker
        thread)."""
        self.settle()


__all__ = ["Settling"]
