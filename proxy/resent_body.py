"""Each rollout's last request body, and where its conversation's entries lie in it: a harness resends its whole
conversation with every call, so a body that opens with the same bytes as its rollout's last one, up to the end
of some of those entries, takes them as they were parsed then and parses only the rest.

Where an entry lies is never guessed from the bytes. A body's layout is known only as far as it is, byte for
byte, what orjson writes for its parse: the members before the entries (``{"model":...,``), then each entry in
turn (Node's ``JSON.stringify``, Rust's serde_json and Python clients' compact JSON all write these bytes). A JSON
parse is decided left to right, so a later body whose first N bytes are the same as this one's has the same
members and entries in them; a body written otherwise is parsed whole every time.

The entries taken are cut out of the body and one string put in their place, named with a nonce of this process;
the body that remains is parsed and checked as any other (``request_body.parse_json``), and the string must come
back as the first entry of the member: a body whose member holds anything else there (a later duplicate key, say)
is parsed whole. The cut keeps what the parse decides: the bytes taken were a whole run of entries, at the same
depth, parsed and checked when they were first read. At 128k tokens of context the parse, its nesting walk and
the entries' serialization were ~40% of the proxy's time a call (``bench/proxy_context.py``).

A body that is byte for byte what orjson writes for its parse, whole (each member once, in its order), also keeps
its other members: a later body that opens with its bytes up to the end of some entries and closes with its
bytes from the end of the member on (the system prompt and the tool definitions a harness sends unchanged with
every call) parses only the entries between, as one array after the string that stands for those taken, and
takes every other member as parsed then. Such an array is one whole JSON value in the place of another, between
the same bytes, so the body reads as its whole parse would; and a body written once per member holds no later
duplicate that could outvote it.
"""

from __future__ import annotations

import secrets
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from rollwire.request_body import Parsed, parse_json, walk
from rollwire.store.requests import common_prefix

_HELD = "rollwire-held-entries-" + secrets.token_hex(16)
"""The string that stands for the entries taken: no client knows it, so none can send it."""
_HELD_JSON = orjson.dumps(_HELD)


@dataclass(frozen=True, slots=True)
class _Layout:
    body: bytes
    key: str
    start: int
    """Offset of the ``[`` that opens the member's entries."""
    ends: list[int]
    """Offset just past each entry known to lie where orjson writes it, in order (a prefix of the entries)."""
    entries: list[Any]
    """The parsed entries those offsets end (the same objects, handed to every body that resends them)."""
    value: dict[str, Any] | None = None
    """The parsed body, where the whole of it is what orjson writes for it (``_canonical``): its other members are
    then handed to a body that closes with the same bytes (``tail``)."""

    @property
    def tail(self) -> bytes:
        """The bytes from the ``]`` that closes the entries to the body's end (``value``'s bodies only)."""
        return self.body[self.ends[-1] :]


class ResentBodies:
    """The memo: ``parse`` is ``request_body.parse_json``, with the entries a body resends taken as parsed."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[str, _Layout] = OrderedDict()
        self._bytes = 0
        self.reused = 0
        """Entries taken from the memo, since start (tests and benches read it)."""
        self.members_reused = 0
        """Bodies whose other members were taken from the memo too (``_between``), since start."""

    def parse(self, rollout_id: str, key: str, body: bytes) -> Parsed:
        """``body`` parsed (see ``parse_json``) for ``rollout_id``, whose conversation is the member ``key``."""
        held = self._held.pop(rollout_id, None)
        if held is not None:
            self._bytes -= len(held.body)
        taken, parsed, canonical = (0, None, False) if held is None or held.key != key else _resent(held, body)
        if parsed is None:
            taken, parsed = 0, parse_json(body)
        self.reused += taken
        self.members_reused += canonical
        if self.max_bytes <= 0 or not parsed.paired:
            return parsed
        if parsed.shallow is None:  # a small body's nesting, walked here rather than by the read's check
            parsed = parsed._replace(shallow=walk(parsed.value)[0])
        if parsed.shallow:  # a body the read refuses leaves nothing its next request could take unchecked
            layout = _layout(body, key, parsed.value, held if taken else None, taken, canonical)
            if layout is not None and len(layout.body) <= self.max_bytes:
                self._keep(rollout_id, layout)
        return parsed

    def _keep(self, rollout_id: str, layout: _Layout) -> None:
        self._held[rollout_id] = layout
        self._bytes += len(layout.body)
        while self._bytes > self.max_bytes:
            _, dropped = self._held.popitem(last=False)
            self._bytes -= len(dropped.body)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def held_entries(self, rollout_id: str) -> int:
        """How many entries of the rollout's last body are known to lie where orjson writes them."""
        held = self._held.get(rollout_id)
        return 0 if held is None else len(held.ends)


def _resent(held: _Layout, body: bytes) -> tuple[int, Parsed | None, bool]:
    """(entries taken, the parse, whether the body closes with ``held``'s members as they were) where ``body``
    resends some of ``held``'s entries, else (0, None, False)."""
    taken = bisect_right(held.ends, common_prefix(body, held.body))
    if taken == 0:
        return 0, None, False
    end = held.ends[taken - 1]
    after = body[end : end + 1]
    if after not in (b",", b"]"):
        return 0, None, False
    if held.value is not None and len(body) - len(held.tail) >= end and body.endswith(held.tail):
        parsed = _between(held, taken, body[end : len(body) - len(held.tail)])
        if parsed is not None:
            return taken, parsed, True
    cut = b"".join([body[: held.start + 1], _HELD_JSON, body[end:]])
    try:
        value = orjson.loads(cut)
    except orjson.JSONDecodeError:
        return 0, None, False  # parsed whole: the error is the whole body's
    shallow, wide = walk(value)
    entries = value.get(held.key) if type(value) is dict else None
    if wide or type(entries) is not list or not entries or entries[0] != _HELD:
        return 0, None, False
    entries[0:1] = held.entries[:taken]
    return taken, Parsed(value, True, shallow), False


def _between(held: _Layout, taken: int, middle: bytes) -> Parsed | None:
    """The body that is ``held``'s up to its ``taken``-th entry, then ``middle``, then ``held``'s tail: only the
    entries in ``middle`` parsed, every other member taken as ``held`` parsed it. None where ``middle`` is not
    the rest of an array after one entry (the body is then cut and parsed the other way, or whole)."""
    try:
        entries = orjson.loads(b"".join([b"[", _HELD_JSON, middle, b"]"]))
    except orjson.JSONDecodeError:
        return None
    assert held.value is not None
    shallow, wide = walk({held.key: entries})  # at the depth the entries lie in the body
    if wide:
        return None
    entries[0:1] = held.entries[:taken]
    value = dict(held.value)  # same order: the member is replaced where it was
    value[held.key] = entries
    return Parsed(value, True, shallow)


def _layout(
    body: bytes, key: str, value: Any, held: _Layout | None, taken: int, tail_kept: bool = False
) -> _Layout | None:
    """Where ``value[key]``'s entries lie in ``body``, as far as they lie where orjson writes them (None where not
    even the first does). ``held``: the layout of the body whose first ``taken`` entries this one resends;
    ``tail_kept``: this body closes with ``held``'s tail, so with the members it holds as orjson writes them."""
    entries = value.get(key) if type(value) is dict else None
    if type(entries) is not list or not entries:
        return None
    if held is not None:
        start, ends = held.start, held.ends[:taken]
    else:
        opening = [b"{"]
        for name, member in value.items():
            if name == key:
                break
            opening += [orjson.dumps(name), b":", orjson.dumps(member), b","]
        opening += [orjson.dumps(key), b":["]
        head = b"".join(opening)
        if not body.startswith(head):
            return None
        start, ends = len(head) - 1, []
    at = ends[-1] if ends else start
    for entry in entries[len(ends) :]:
        if ends and body[at : at + 1] != b",":
            break
        text = orjson.dumps(entry)
        if not body.startswith(text, at + 1):
            break
        at += 1 + len(text)
        ends.append(at)
    if not ends:
        return None
    whole = len(ends) == len(entries) and body[ends[-1] : ends[-1] + 1] == b"]"
    canonical = whole and (tail_kept or _canonical(body[ends[-1] :], key, value))
    return _Layout(body, key, start, ends, entries[: len(ends)], value if canonical else None)


def _canonical(tail: bytes, key: str, value: dict[str, Any]) -> bool:
    """Whether ``tail`` (from the ``]`` that closes ``value[key]``) is what orjson writes for the members after it.
    The opening members were checked the same way (``_layout``), so the body then holds each member once."""
    names = list(value)
    after = names[names.index(key) + 1 :]
    parts = [b"]"] + [b"".join([b",", orjson.dumps(name), b":", orjson.dumps(value[name])]) for name in after]
    return tail == b"".join([*parts, b"}"])


__all__ = ["ResentBodies"]
