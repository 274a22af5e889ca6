"""An answered call as a later request of its rollout finds it (a ``PriorCall``): built from the answer the proxy
has just sent (its own calls), or from a stored row (another process's calls, or a rollout read back)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.splice.plan import PriorCall
from rollwire.side_calls import MAIN
from rollwire.store import ModelCall, decode_ids
from rollwire.store.codec import EncodedIds
from rollwire.store.requests import SentRequest

RequestParser = Callable[[dict[str, Any]], Conversation]
"""A dialect's request parser (``Dialect.parse_request``)."""
AnswerParser = Callable[[dict[str, Any], int], Message]
"""A dialect's reader of one choice of a stored answer (``Dialect.answer_message``)."""
UNREADABLE = (ValueError, KeyError, TypeError, StopIteration, InvalidRequest)
"""What reading a request or answer back may raise: such a call is just not a prior."""


def from_answer(
    answer: AnswerParser,
    body: dict[str, Any],
    index: int,
    request: tuple[tuple[Any, ...], bytes, SentRequest],
    prompt_ids: Sequence[int],
    sampled_ids: list[int],
    segment: int,
    prompt: tuple[bytes, bytes],
    line: str,
) -> PriorCall | None:
    """Choice ``index`` of a call this process answered: its message as the dialect reads it back from ``body``,
    ``request`` the call's (message keys, tools key, whole request as sent), ``prompt`` its prompt's ids as stored
    and as the upstream request wrote them, ``line`` its line."""
    try:
        message = answer(body, index)
    except UNREADABLE:
        return None
    keys, tools_key, text = request
    blob, written = prompt
    return PriorCall(
        call_id=0,
        request_keys=keys,
        tools_key=tools_key,
        answer_key=message.key(),
        prompt_ids=prompt_ids,
        sampled_ids=sampled_ids,
        segment_index=segment,
        continued=False,
        prompt_blob=blob,
        prompt_json=written,
        request_sent=text,
        line=line,
    )


def from_row(row: ModelCall, prompt: bytes, request: str, parse: RequestParser, answer: AnswerParser) -> PriorCall | None:
    """A stored call: ``prompt`` its whole prompt (stored bytes), ``request`` its whole request; None where it
    cannot be read back."""
    try:
        conv = parse(json.loads(request))
        message = answer(json.loads(row.response_json), row.choice_index)
    except UNREADABLE:
        return None
    return PriorCall(
        call_id=int(row.id or 0),
        request_keys=conv.message_keys(),
        tools_key=conv.tools_key(),
        answer_key=message.key(),
        prompt_ids=EncodedIds(prompt),
        sampled_ids=decode_ids(row.completion_ids),
        segment_index=row.segment_index,
        continued=False,
        prompt_blob=prompt,
        request_sent=SentRequest.of_text(request),
        line=row.line or MAIN,
    )


__all__ = ["UNREADABLE", "AnswerParser", "RequestParser", "from_answer", "from_row"]
