"""What a client dialect (Chat Completions, Responses, Anthropic Messages) provides to the shared path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from rollwire.errors import RollwireError
from rollwire.proxy.conversation import Conversation, Generation, Message, StreamEvent
from rollwire.proxy.dialects.parsed import WHOLE, ParsedMessages, Reading


@dataclass(slots=True)
class Accepted:
    """A request a dialect has read: the conversation, the dialect object that answers it (one bound to the
    request's tools, where the answer depends on them), and the body with its bytes as sent (``sent``: None where
    the body is no longer what was sent, as when it was expanded with stored history)."""

    conv: Conversation
    answering: Dialect
    body: dict[str, Any]
    sent: bytes | None


@dataclass(slots=True)
class History:
    """The rollout a request comes from, as its dialect reads the request: where a dialect that lets a request
    name an earlier answer (Responses' ``previous_response_id``) reads the rollout's calls, and the messages its
    last request had, parsed (``parsed``)."""

    store: Engine
    rollout_id: str
    parsed: ParsedMessages | None = None
    """The proxy's memo of each rollout's messages, parsed (None: every request is parsed whole)."""

    def reading(self, dialect: str) -> Reading:
        """How ``dialect`` reads this request's messages and tools: through the proxy's memo where there is one."""
        return WHOLE if self.parsed is None else self.parsed.reading(self.rollout_id, dialect)


class Dialect(Protocol):
    name: str
    """Stored in ModelCall.dialect; picks the parser when earlier calls are read back."""
    path: str
    """Its generation route under ``/v1`` (and a rollout's ``/r/{token}/v1``); errors on paths that start with it
    take this dialect's shape."""
    count_tokens_path: str | None
    """Its token-counting route, where the dialect has one."""
    entries_key: str
    """The body's member that holds the conversation a harness resends with every call (``proxy.resent_body``)."""

    async def accept(self, raw: Any, sent: bytes | None, history: History) -> Accepted:
        """A request body read as this dialect reads it (``InvalidRequest`` naming the field): the conversation,
        and what the call path needs besides."""
        ...

    def parse_request(self, body: Any) -> Conversation:
        """Validate a request body (InvalidRequest naming the field) into a Conversation."""
        ...

    def response_body(self, generation: Generation) -> dict[str, Any]:
        """The non-streamed response; also what is stored as the call's response_json."""
        ...

    def answer_message(self, response_body: dict[str, Any], index: int) -> Message:
        """Choice ``index``'s assistant message, read back from a stored response body."""
        ...

    def stream(self, events: AsyncIterator[StreamEvent], conv: Conversation) -> AsyncIterator[str]:
        """A live answer's events as this dialect's SSE text, sent as they arrive."""
        ...

    def stream_events(self, generation: Generation, conv: Conversation) -> Iterator[str]:
        """A finished answer as the same SSE text (``streaming.replay``)."""
        ...

    def error_body(self, exc: RollwireError) -> dict[str, Any]:
        """An error in the shape this dialect's clients parse."""
        ...


__all__ = ["Accepted", "Dialect", "History"]
