"""Each rollout's latest request's messages, parsed: a harness resends its whole conversation with every call, so a
call parses only the messages that are new since its rollout's call before.

The entries a request opens with that are byte for byte what its rollout's last request opened with are taken as
they were parsed then; from the first that differs on, every entry is parsed. The bytes compared are orjson's
serialization of each parsed entry, which keeps key order and the difference between ``1``, ``1.0`` and ``true``
(``==`` on parsed values would not, and a parse keeps both: a tool call's arguments are the harness's object
serialized again). At 128k tokens of context, serializing the messages costs ~60 us, parsing them again ~400 us
(``bench/proxy_context.py``). Entries the body itself took as parsed from the rollout's last body
(``proxy.resent_body``) are the very objects held here, and are not serialized again. Entries are per rollout and
per dialect: no request is read through another rollout's.

Memory is bounded by the serialized bytes held (the parsed messages hold about as much again), the least
recently called rollouts dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import eq, is_
from typing import Any, Protocol, Self, TypeVar

import orjson

from rollwire.compact_json import json_bytes
from rollwire.proxy.conversation import Message
from rollwire.text_memo import find_recent

ParseOne = Callable[[Any, int], Sequence[Message]]
"""A dialect's reading of the entry at index ``i`` of its ``messages`` (its errors name that index)."""
Tools = tuple[dict[str, Any], ...]
ParseTools = Callable[[Any], Tools]
"""A dialect's reading of its ``tools`` into the neutral function shape."""
TOOL_SETS = 8
"""Tool lists remembered, by their JSON: a harness sends the same tools with every call of every rollout."""


class Fold(Protocol):
    """Messages read from entries that join their neighbours (Responses: a call joins the assistant turn before
    it), one entry at a time."""

    def add(self, entry: Any, i: int) -> None: ...

    def copy(self) -> Self: ...


F = TypeVar("F", bound=Fold)


class Reading:
    """How a dialect reads a request's messages and tools: this one parses them whole (a request no memo answers:
    stored ones read back, token counts); ``ParsedMessages.reading`` gives one through the memo."""

    def messages(self, entries: list[Any], parse_one: ParseOne) -> tuple[Message, ...]:
        return tuple(chain.from_iterable(parse_one(entry, i) for i, entry in enumerate(entries)))

    def folded(self, head: Any, entries: list[Any], start: Callable[[], F]) -> F:
        """``start()`` with every entry added; ``head``: what else ``start()`` depends on (compared, not added)."""
        state = start()
        for i, entry in enumerate(entries):
            state.add(entry, i)
        return state

    def tools(self, raw: Any, parse: ParseTools) -> tuple[Tools, bytes | None]:
        """The tools, and their ``Conversation.tools_key`` where known already."""
        return parse(raw), None


WHOLE = Reading()


class _Remembered(Reading):
    def __init__(self, memo: ParsedMessages, rollout_id: str, dialect: str) -> None:
        self._memo, self._rollout_id, self._dialect = memo, rollout_id, dialect

    def messages(self, entries: list[Any], parse_one: ParseOne) -> tuple[Message, ...]:
        return self._memo.parse(self._rollout_id, self._dialect, entries, parse_one)

    def tools(self, raw: Any, parse: ParseTools) -> tuple[Tools, bytes | None]:
        return self._memo.tools(self._dialect, raw, parse)

    def folded(self, head: Any, entries: list[Any], start: Callable[[], F]) -> F:
        return self._memo.fold(self._rollout_id, self._dialect, head, entries, start)


@dataclass(frozen=True, slots=True)
class _ToolSet:
    """A tool list read before: the parsed body's own list, its JSON, and what it was read as."""

    dialect: str
    raw: Any
    text: bytes
    tools: Tools
    key: bytes


@dataclass(frozen=True, slots=True)
class _Parsed:
    dialect: str
    texts: list[bytes]
    messages: list[Sequence[Message]]
    """Each entry's messages (``parse``), or empty for a fold (``fold``: ``state``)."""
    size: int
    state: Any = None
    """A fold's state after every entry (``fold``)."""
    entries: list[Any] = field(default_factory=list)
    """The entries as parsed from the body (``parse``)."""


class ParsedMessages:
    """The memo: ``parse`` is ``parse_one`` over every entry, the opening ones a rollout sent last time taken as
    they were parsed then."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[str, _Parsed] = OrderedDict()
        self._bytes = 0
        self._tool_sets: list[_ToolSet] = []
        self.reused = 0
        """Entries taken from the memo, since start (tests and benches read it)."""

    def parse(self, rollout_id: str, dialect: str, entries: list[Any], parse_one: ParseOne) -> tuple[Message, ...]:
        held = self._taken(rollout_id)
        if held is None or held.dialect != dialect:
            held = _Parsed(dialect, [], [], 0)
        # The entries the body took as parsed last time (``resent_body``) are the very objects: not serialized again.
        resent = _leading(map(is_, entries, held.entries))
        rest = _serialized(entries[resent:]) if self.max_bytes > 0 else None
        if rest is None:
            return WHOLE.messages(entries, parse_one)
        texts = held.texts[:resent] + rest
        kept = resent + _leading(map(eq, rest, held.texts[resent:]))  # C-speed: thousands of entries
        parsed = held.messages[:kept] + [parse_one(entries[i], i) for i in range(kept, len(entries))]
        self.reused += kept
        self._keep(rollout_id, _Parsed(dialect, texts, parsed, sum(map(len, texts)), entries=entries))
        return tuple(chain.from_iterable(parsed))

    def fold(self, rollout_id: str, dialect: str, head: Any, entries: list[Any], start: Callable[[], F]) -> F:
        """``Reading.folded``, resumed from the state after the rollout's last request where this one opens with
        its head and every one of its entries, byte for byte (a fold's state is the whole past: a request that
        changed anything it held is folded from its start)."""
        held = self._taken(rollout_id)
        texts = _serialized([head, *entries]) if self.max_bytes > 0 else None
        if texts is None:
            return WHOLE.folded(head, entries, start)
        resumed = (
            held is not None and held.dialect == dialect and held.state is not None
            and len(held.texts) <= len(texts) and texts[: len(held.texts)] == held.texts
        )  # fmt: skip
        state = held.state.copy() if resumed and held is not None else start()
        done = len(held.texts) - 1 if resumed and held is not None else 0
        for i in range(done, len(entries)):
            state.add(entries[i], i)
        self.reused += done
        self._keep(rollout_id, _Parsed(dialect, texts, [], sum(map(len, texts)), state.copy()))
        return state

    def reading(self, rollout_id: str, dialect: str) -> Reading:
        """How one rollout's request in one dialect is read: through this memo."""
        return _Remembered(self, rollout_id, dialect)

    def tools(self, dialect: str, raw: Any, parse: ParseTools) -> tuple[Tools, bytes | None]:
        """``parse(raw)`` and its canonical key, taken from the last ``TOOL_SETS`` tool lists read where ``raw`` is
        byte for byte one of them (any rollout's: a tool list is the harness's, read the same by every rollout,
        and parsing and keying Claude Code's 24 cost ~50 us a call). Compared, not hashed: hashing 64 kB costs
        what comparing it with eight does. A ``raw`` that is the very list read before (a resent body hands its
        rollout's next request the members it parsed, ``resent_body``) is not even serialized to compare."""
        if self.max_bytes > 0 and raw is not None:  # the very list a resent body took as parsed
            kept = find_recent(self._tool_sets, lambda k: k.raw is raw and k.dialect == dialect)
            if kept is not None:
                return kept.tools, kept.key
        text = _serialized([raw]) if self.max_bytes > 0 and raw is not None else None
        if text is None:
            return parse(raw), None
        kept = find_recent(self._tool_sets, lambda k: k.dialect == dialect and k.text == text[0])
        if kept is not None:
            return kept.tools, kept.key
        tools = parse(raw)
        key = json_bytes(list(tools), sort_keys=True)
        self._tool_sets.insert(0, _ToolSet(dialect, raw, text[0], tools, key))
        del self._tool_sets[TOOL_SETS:]
        return tools, key

    def _taken(self, rollout_id: str) -> _Parsed | None:
        """The rollout's held entry, out of the memo (``_keep`` puts the next one back, most recent last)."""
        held = self._held.pop(rollout_id, None)
        if held is not None:
            self._bytes -= held.size
        return held

    def _keep(self, rollout_id: str, parsed: _Parsed) -> None:
        if parsed.size > self.max_bytes:
            return
        self._held[rollout_id] = parsed
        self._bytes += parsed.size
        while self._bytes > self.max_bytes:
            _, dropped = self._held.popitem(last=False)
            self._bytes -= dropped.size

    @property
    def held_bytes(self) -> int:
        return self._bytes


def _leading(alike: Iterable[bool]) -> int:
    """How many of ``alike`` are true before the first false."""
    same = list(alike)
    return same.index(False) if False in same else len(same)


def _serialized(entries: list[Any]) -> list[bytes] | None:
    """Each entry's JSON; None where one has none orjson writes (an integer past 64 bits, read by the standard
    library's parser): such a request is parsed whole."""
    try:
        return list(map(orjson.dumps, entries))
    except TypeError:  # orjson.JSONEncodeError is one
        return None


__all__ = ["TOOL_SETS", "WHOLE", "Fold", "ParseOne", "ParseTools", "ParsedMessages", "Reading", "Tools"]
