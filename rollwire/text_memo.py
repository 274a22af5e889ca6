"""Results of a pure function remembered for texts that come again: a harness resends its system prompt and its
whole history with every call of every rollout. Bounded twice, by entries and by the size of a text kept, so
the memory a cache may hold is known (at most ``entries * max_chars`` characters). ``find_recent`` serves the
memos of a few large values (a harness's tool lists), compared rather than hashed, most recently used first."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import TypeVar

R = TypeVar("R")
T = TypeVar("T")


def remember_short_texts(max_chars: int, entries: int) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """``func(*args)`` remembered (least recently used dropped first past ``entries``) when its last argument is
    a text of at most ``max_chars`` characters; for a longer text it is worked out each time."""

    def wrap(func: Callable[..., R]) -> Callable[..., R]:
        remembered = lru_cache(maxsize=entries)(func)

        @wraps(func)
        def call(*args: str) -> R:
            return remembered(*args) if len(args[-1]) <= max_chars else func(*args)

        return call

    return wrap


def find_recent(items: list[T], match: Callable[[T], bool]) -> T | None:
    """The first of ``items`` (most recently used first) that ``match`` accepts, moved to the front; None if none
    does. For the few-entry memos that compare what comes again (a harness's tool list) rather than hash it."""
    for i, item in enumerate(items):
        if match(item):
            if i:
                items.insert(0, items.pop(i))
            return item
    return None


__all__ = ["find_recent", "remember_short_texts"]
