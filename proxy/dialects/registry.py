"""The dialects the proxy speaks, in one table: the route table serves each at its paths, errors take the shape of
the dialect whose path a request is on, and stored calls are read back by the dialect named on each row.

A fourth dialect is one module (a class with ``Dialect``'s attributes and methods) and one line here."""

from __future__ import annotations

from rollwire.proxy.dialects.base import Dialect
from rollwire.proxy.dialects.chat import ChatDialect
from rollwire.proxy.dialects.messages import MessagesDialect
from rollwire.proxy.dialects.responses import ResponsesDialect
from rollwire.proxy.splice.priors import Dialects

DIALECTS: tuple[Dialect, ...] = (ChatDialect(), ResponsesDialect(), MessagesDialect())
CHAT = DIALECTS[0]
"""The OpenAI shape: what a path no dialect claims answers in."""
READERS: Dialects = {d.name: (d.parse_request, d.answer_message) for d in DIALECTS}
"""How each dialect's stored requests and answers are read back (the splice state, by ``ModelCall.dialect``)."""


def dialect_for_path(path: str) -> Dialect:
    """The dialect whose routes ``path`` is on (by its ``/v1`` path, under any prefix), else Chat's OpenAI shape."""
    for dialect in DIALECTS:
        if f"/v1{dialect.path}" in path:
            return dialect
    return CHAT


__all__ = ["CHAT", "DIALECTS", "READERS", "dialect_for_path"]
