"""Server requests for a harness on the 2026-07-28 protocol, which gives a server no back-channel: an upstream's
sampling, elicitation or roots request during a tool call is handed to the harness as an ``InputRequiredResult``,
and the harness's retry (``inputResponses`` + ``requestState``) carries the answers back to the waiting upstream.
The upstream call itself runs in the gateway's task group across the rounds."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from rollwire.errors import InvalidRequest


def needs_rounds(ctx: ServerRequestContext[Any, Any] | None) -> bool:
    """True for a harness that cannot be sent requests (2026-07-28): its server requests go through rounds."""
    return ctx is not None and ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS


class Rounds:
    """One tool call across its input-required rounds: the upstream's questions out, the harness's answers in."""

    def __init__(self, rollout_id: str, ctx: ServerRequestContext[Any, Any], timeout_s: float) -> None:
        self.id = secrets.token_urlsafe(18)
        self.rollout_id = rollout_id
        self.ctx = ctx
        """The harness request of the current round (progress and log lines go to it)."""
        self.timeout_s = timeout_s
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, Any]](64)
        self._waiting: dict[str, tuple[anyio.Event, list[Any]]] = {}
        self.closed = False
        self.finished_at: float | None = None
        self.scope = anyio.CancelScope()
        """Cancelled when the harness cancels the call during a round."""
        """The harness has been given the result: a later retry with this state is refused."""

    async def ask(self, request: types.InputRequest) -> Any:
        """Called from the upstream's callback: wait for the harness's answer (an error after ``timeout_s``)."""
        key = f"q{len(self._waiting)}-{secrets.token_hex(4)}"
        answered = anyio.Event()
        box: list[Any] = []
        self._waiting[key] = (answered, box)
        await self._send.send(("ask", (key, request)))
        with anyio.move_on_after(self.timeout_s):
            await answered.wait()
        if not box:
            self._waiting.pop(key, None)
            return types.ErrorData(code=types.REQUEST_TIMEOUT, message=f"the harness did not answer {request.method}")
        return box[0]

    def answer(self, responses: dict[str, Any] | None) -> None:
        for key, value in (responses or {}).items():
            waiting = self._waiting.pop(key, None)
            if waiting is not None:
                waiting[1].append(value)
                waiting[0].set()

    async def finish(self, result: types.CallToolResult) -> None:
        await self._send.send(("done", result))

    async def next_round(self) -> types.CallToolResult | types.InputRequiredResult:
        """The call's result, or the questions the upstream has asked since the last round; a harness that cancels
        while it waits cancels the call."""
        try:
            kind, item = await self._receive.receive()
        except anyio.get_cancelled_exc_class():
            self.scope.cancel()
            raise
        if kind == "done":
            self.closed = True
            return item
        questions = {item[0]: item[1]}
        while True:
            try:
                kind, more = self._receive.receive_nowait()
            except anyio.WouldBlock:
                break
            if kind == "done":  # cannot happen while a question waits; kept for a well-formed stream
                await self._send.send((kind, more))
                break
            questions[more[0]] = more[1]
        return types.InputRequiredResult(input_requests=questions, request_state=self.id)


class RoundBook:
    """The rollouts' calls that are between rounds, by request state."""

    def __init__(self) -> None:
        self._open: dict[str, Rounds] = {}

    def _sweep(self) -> None:
        """Forget calls whose result was taken, or waited longer than their timeout for a harness that left."""
        now = time.monotonic()
        for key, rounds in list(self._open.items()):
            if rounds.closed or (rounds.finished_at is not None and now - rounds.finished_at > rounds.timeout_s):
                self._open.pop(key, None)

    def cancel_all(self) -> None:
        """The gateway stops: end every call between rounds."""
        for rounds in list(self._open.values()):
            rounds.scope.cancel()
        self._open.clear()

    async def start(
        self, task_group: TaskGroup, rounds: Rounds, call: Callable[[], Awaitable[types.CallToolResult]]
    ) -> types.CallToolResult | types.InputRequiredResult:
        self._open[rounds.id] = rounds

        self._sweep()

        async def run() -> None:
            with rounds.scope:  # a harness that cancels ends the call here
                await rounds.finish(await call())
            rounds.finished_at = time.monotonic()
            if rounds.scope.cancel_called:
                self._open.pop(rounds.id, None)

        task_group.start_soon(run)
        return await rounds.next_round()

    async def resume(
        self, rollout_id: str, state: str, ctx: ServerRequestContext[Any, Any], responses: dict[str, Any] | None
    ) -> types.CallToolResult | types.InputRequiredResult:
        rounds = self._open.get(state)
        if rounds is None or rounds.rollout_id != rollout_id or rounds.closed:
            raise InvalidRequest("requestState names no tool call of this rollout that waits for input (it ended)")
        rounds.ctx = ctx
        rounds.answer(responses)
        return await rounds.next_round()


__all__ = ["RoundBook", "Rounds", "needs_rounds"]
