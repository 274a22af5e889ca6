"""The two parser interfaces: reasoning (split thinking from the answer) and tool calls (text -> calls)."""

from __future__ import annotations

import os
import random
from typing import Protocol

from rollwire.proxy.conversation import ToolCall

_IDS = random.Random()  # seeded from the OS; its own, so that nobody's random.seed() makes ids repeat
os.register_at_fork(after_in_child=_IDS.seed)  # workers forked from one parent draw different ids


def new_id(prefix: str) -> str:
    """``prefix`` + 24 random hex digits: an id a client sees (a tool call's, an answer's), unique but no secret.

    Drawn from a generator seeded from the OS per process, not from ``secrets``: a system call per id was ~1%
    of a call's CPU.
    """
    return f"{prefix}{_IDS.getrandbits(96):024x}"


def new_call_id() -> str:
    return new_id("call_")


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
