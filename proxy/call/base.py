"""What one model call carries through the call path: who asked, what they asked, and in which dialect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollwire.proxy.auth import Caller
from rollwire.proxy.conversation import Conversation
from rollwire.proxy.dialects.base import Dialect


@dataclass(frozen=True, slots=True)
class RequestBody:
    """The client's request: parsed, and the UTF-8 JSON stored with its calls (the body as sent, when it is)."""

    data: dict[str, Any]
    sent: bytes


@dataclass(slots=True)
class Call:
    """One model call: the rollout's caller, the request parsed (with the output cap admission granted), the
    dialect that answers it, the body as sent and the client's User-Agent as kept (``rollwire.clients``). Not frozen: made once a call, where a frozen dataclass's
    ``__init__`` costs three times as much."""

    caller: Caller
    conv: Conversation
    dialect: Dialect
    request: RequestBody
    client: str = ""


__all__ = ["Call", "RequestBody"]
