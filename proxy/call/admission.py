"""Admission: the one gate every dialect's call passes before it is planned. The rollout's budgets let the call
in (or refuse it with a recorded reason) and hold an in-flight slot until its answer ends; the output cap is set
here (``limits.capped``: the operator's default for requests that set none, then no more than the rollout's
token budget leaves); the call's deadline bounds everything up to the answer's first byte, and a call that runs
past it is refused as the budget's, not failed as the engine's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextvars import Token
from typing import Any

from rollwire.errors import Forbidden, UpstreamTimeout
from rollwire.proxy.auth import Caller
from rollwire.proxy.conversation import Conversation
from rollwire.proxy.limits import capped
from rollwire.proxy.upstream_http import DEADLINE
from rollwire.rollouts.budgets import Budgets, Ticket


class Admission:
    """A call the budgets let in: its in-flight slot, released once (``release``, or when a stream ends)."""

    def __init__(self, budgets: Budgets, caller: Caller, dialect: str, ticket: Ticket) -> None:
        self.budgets = budgets
        self.caller = caller
        self.dialect = dialect
        self.ticket = ticket
        self._deadline: Token[float | None]  # set on entering

    @classmethod
    async def admit(
        cls, budgets: Budgets, caller: Caller, conv: Conversation, dialect: str, default_cap: int | None
    ) -> tuple[Admission, Conversation]:
        """Let the call in (``Forbidden`` where a budget is spent) and the request with its output cap."""
        ticket = await budgets.model_call(caller, dialect)
        if conv.sampling.max_tokens is None:
            conv = capped(conv, default_cap)  # harnesses that never send a cap (Codex)
        try:
            conv = capped(conv, budgets.tokens_left(caller, ticket.use))
        except BaseException:
            ticket.release()
            raise
        return cls(budgets, caller, dialect, ticket), conv

    async def __aenter__(self) -> None:
        """Inside ``async with admission``, the upstream's waits end at the call's deadline; running past it is the
        rollout's budget spent (recorded as its refusal), not an engine failure."""
        self._deadline = DEADLINE.set(self.budgets.deadline(self.caller, None))

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        DEADLINE.reset(self._deadline)
        if isinstance(exc, UpstreamTimeout):
            limit = self.caller.budgets.get("call_deadline_s")
            if limit is not None:
                spent = Forbidden(
                    f"rollout {self.caller.rollout_id} ran past its call deadline of {limit} s "
                    f"(budget call_deadline_s; {exc.message}); the generation was stopped"
                )
                raise await self.budgets.refuse(self.caller, "deadline", self.dialect, spent) from None

    async def held(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """A stream's events; the in-flight slot is given back when the stream ends (or is dropped)."""
        try:
            async for event in events:
                yield event
        finally:
            self.release()

    def release(self) -> None:
        self.ticket.release()


__all__ = ["Admission"]
