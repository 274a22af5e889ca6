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


class ToolParser(Protocol):
    prefill_required: str
    """Text that opens a tool call: appended to the prompt for tool_choice=required."""

    def prefill_named(self, name: str) -> str:
        """Text that opens a call of ``name``: appended to the prompt for a named tool_choice."""
        ...

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """(remaining content, calls); a call that does not parse stays in the content as text."""
        ...


__all__ = ["ReasoningParser", "ToolParser", "new_call_id"]
