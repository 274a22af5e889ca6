"""What a client dialect (Chat Completions, Responses, Anthropic Messages) provides to the shared path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from rollwire.errors import RollwireError
from rollwire.proxy.conversation import Conversation, Generation, Message, StreamEvent


class Dialect(Protocol):
    name: str
    """Stored in ModelCall.dialect; picks the parser when earlier calls are read back."""

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


__all__ = ["Dialect"]
