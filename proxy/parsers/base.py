"""The two parser interfaces: reasoning (split thinking from the answer) and tool calls (text -> calls)."""

from __future__ import annotations

import secrets
from typing import Protocol

from rollwire.proxy.conversation import ToolCall


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


class ReasoningParser(Protocol):
    def split(self, text: str) -> tuple[str | None, str]:
        """(reasoning or None, the rest of the text)."""
        ...

    def partial(self, text: str) -> tuple[str | None, str]:
        """The same split of an answer still being sampled, keeping back what more text could change: each
        part only ever grows as ``text`` grows (reasoning None: none so far; content "": none yet)."""
        ...


class ToolParser(Protocol):
    prefill_required: str
    """Text that opens a tool call: appended to the prompt for tool_choice=required."""

    def prefill_named(self, name: str) -> str:
        """Text that opens a call of ``name``: appended to the prompt for a named tool_choice."""
        ...

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """(remaining content, calls); a call that does not parse stays in the content as text."""
        ...

    def holdback(self, text: str) -> int:
        """Where a tool call may start in content still being sampled: text from there on is kept back from
        the stream until the answer ends (then ``parse`` decides)."""
        ...


def partial_marker(text: str, marker: str) -> int:
    """Where ``text`` ends with a proper prefix of ``marker`` (len(text) if it does not): a marker half-sampled."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return len(text) - k
    return len(text)


__all__ = ["ReasoningParser", "ToolParser", "new_call_id", "partial_marker"]
