"""A model call's request as the store keeps it: whole, or as an edit of the request of the call it continues.

An agent sends its whole conversation again with every call, so a call's request is the last call's with a
little added (the answer, a tool's result). Stored whole, a rollout's requests grow with the square of its
turns: at a harness's size (16k characters of guidance, 20 tools) the tenth call alone sends ~53 kB, most of a
row, and every call writes, logs and checkpoints all of it again. A call that continues an earlier one keeps
only what changed: ``ModelCall.request_base`` names that call, ``request_head`` and ``request_tail`` say how
many characters of its whole request open and close this one's, and ``request_json`` holds the text between.
The edit is found on the text as sent, so the request reads back byte for byte, whatever its dialect or the
order of its fields. Every writer and reader of ``ModelCall.request_json`` goes through here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import AnyStr

from rollwire.errors import StoreError
from rollwire.store.schema import ModelCall

MIN_SAVED = 256
"""Bytes an edit must save to be stored as one; a smaller saving is not worth a read of the base."""

_BLOCK = 4096
"""Characters (or bytes) compared in the first step; each matching step doubles it (see ``_alike_run``)."""


@dataclass(frozen=True, slots=True)
class SentRequest:
    """A whole request as the proxy holds it for the next call's edit: its UTF-8 JSON, and how many characters
    that is. The edit is found on the bytes: a text holding one character past U+FFFF (Claude Code's tools carry
    an emoji) takes 4 bytes a character, and comparing its slices cost ~10x the bytes' (0.35 ms at 230 kB)."""

    data: bytes
    chars: int

    @classmethod
    def of_text(cls, text: str) -> SentRequest:
        return cls(text.encode(), len(text))


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """A row's request columns: ``text`` whole (``base`` None), or the middle of an edit of call ``base``'s;
    ``chars``: the whole request's length in characters (what a later edit of it counts from)."""

    text: str
    chars: int
    base: int | None = None
    head: int = 0
    tail: int = 0


def stored_request(whole: bytes, base: int | None, base_request: SentRequest | None) -> StoredRequest:
    """What a call's row keeps of its ``whole`` request (UTF-8 JSON): an edit of ``base_request`` (the whole
    request of call ``base``) where that saves at least ``MIN_SAVED`` bytes, else all of it. Head and tail are
    found on the bytes, cut at whole characters, and counted in characters from what only one side holds (the
    base's length in characters is known), so no whole request is decoded."""
    if base is None or base_request is None:
        return _whole_stored(whole)
    old = base_request.data
    head = _char_start(whole, common_prefix(whole, old))
    tail = common_suffix(whole, old, min(len(whole), len(old)) - head)
    tail = len(whole) - _char_start(whole, len(whole) - tail, forward=True)  # whole characters only
    if head + tail < MIN_SAVED:
        return _whole_stored(whole)
    head_chars = base_request.chars - len(old[head:].decode())
    middle, tail_chars = whole[head : len(whole) - tail].decode(), len(whole[len(whole) - tail :].decode())
    return StoredRequest(middle, head_chars + len(middle) + tail_chars, base, head_chars, tail_chars)


def _whole_stored(whole: bytes) -> StoredRequest:
    text = whole.decode()
    return StoredRequest(text, len(text))


def _char_start(data: bytes, at: int, forward: bool = False) -> int:
    """The start of the UTF-8 character at ``at`` (a byte that is not 10xxxxxx), or of the next one (``forward``).
    Equal bytes up to a position start a character there on both sides alike: the same lead bytes want the same
    number of continuation bytes."""
    step = 1 if forward else -1
    while 0 < at < len(data) and data[at] & 0xC0 == 0x80:
        at += step
    return at


def whole_requests(calls: Sequence[ModelCall], known: Mapping[int, str] | None = None) -> list[str]:
    """Each call's whole request, in the order of ``calls``.

    An edited request takes its head and tail from its base's whole request, found in ``calls`` or in ``known``
    (call id -> whole request, for calls read earlier). A base was committed before the call that edits it was
    planned, so its id is the smaller. ``StoreError`` when the base is in neither, or is shorter than the head
    and tail taken from it.
    """
    whole: dict[int, str] = dict(known or {})
    for call in sorted((c for c in calls if c.id is not None), key=lambda c: c.id or 0):
        whole[call.id or 0] = _whole(call, whole)
    return [whole[c.id] if c.id is not None else _whole(c, whole) for c in calls]


def _whole(call: ModelCall, whole: Mapping[int, str]) -> str:
    if call.request_base is None:
        return call.request_json
    base = whole.get(call.request_base)
    if base is None:
        raise StoreError(f"call {call.id}'s request edits call {call.request_base}'s, which is not in the store")
    head, tail = call.request_head, call.request_tail
    if head < 0 or tail < 0 or head + tail > len(base):
        raise StoreError(
            f"call {call.id}'s request keeps {head} + {tail} characters of call {call.request_base}'s, "
            f"which holds {len(base)}"
        )
    return base[:head] + call.request_json + base[len(base) - tail :]


def common_prefix(a: AnyStr, b: AnyStr) -> int:
    """How many characters (bytes) ``a`` and ``b`` open with alike."""
    return _alike_run(min(len(a), len(b)), lambda low, high: a.startswith(b[low:high], low))


def common_suffix(a: AnyStr, b: AnyStr, limit: int) -> int:
    """How many characters (bytes) ``a`` and ``b`` close with alike, at most ``limit``."""
    size_a, size_b = len(a), len(b)
    return _alike_run(limit, lambda low, high: a.endswith(b[size_b - high : size_b - low], 0, size_a - low))


def _alike_run(limit: int, alike: Callable[[int, int], bool]) -> int:
    """The longest run of alike characters from one end, at most ``limit``; ``alike(low, high)``: whether the
    characters ``low`` to ``high`` from that end are, given that those before ``low`` are. Compared in blocks
    that double while they match, then halved within the block that does not: C-speed comparisons, each
    character copied a few times at most (a character-by-character loop costs ~15 ms at 300 kB)."""
    low, step = 0, _BLOCK
    while low < limit:
        high = min(limit, low + step)
        if not alike(low, high):
            break
        low, step = high, step * 2
    else:
        return max(limit, 0)
    while high - low > 1:  # alike up to low; they differ within [low, high)
        middle = (low + high) // 2
        if alike(low, middle):
            low = middle
        else:
            high = middle
    return low


__all__ = ["MIN_SAVED", "StoredRequest", "common_prefix", "common_suffix", "stored_request", "whole_requests"]
