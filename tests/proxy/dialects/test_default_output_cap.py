"""The operator's default output cap (``default_max_output_tokens``) is set at admission, so every dialect's
request that sets no cap gets it, and one that asks for less keeps its own; the request is recorded as sent."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai import omit
from sqlmodel import col, select

from rollwire.store import ModelCall, open_engine, session_scope
from tests.proxy.dialects.conftest import Stack

DEFAULT_CAP = 48
"""What the dialect stack's proxy sets (``default_max_output_tokens``)."""


def _last_call(stack: Stack) -> tuple[dict[str, Any], ModelCall]:
    """The engine request of the stack's latest completion, and the call's row."""
    engine = open_engine(stack.store_url)
    with session_scope(engine) as session:
        row = session.exec(select(ModelCall).order_by(col(ModelCall.id).desc())).first()
    engine.dispose()
    assert row is not None
    return stack.tap.calls[-1][0], row


@pytest.mark.parametrize("asked", [None, 5])
def test_chat_gets_the_default_cap_unless_it_asks_for_less(dialect_stack: Stack, asked: int | None) -> None:
    rollout = dialect_stack.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
    cap = asked if asked is not None else omit  # unset: the field is left out of the request
    client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "Hi."}], max_tokens=cap)
    sent, row = _last_call(dialect_stack)
    assert sent["max_tokens"] == (asked or DEFAULT_CAP)
    assert row.max_tokens_requested == (asked or DEFAULT_CAP)
    assert ("max_tokens" in json.loads(row.request_json)) == (asked is not None)  # recorded as sent


@pytest.mark.parametrize("asked", [None, 5])
def test_responses_gets_the_default_cap_unless_it_asks_for_less(dialect_stack: Stack, asked: int | None) -> None:
    rollout = dialect_stack.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
    client.responses.create(model="gpt-test", input="Hi.", max_output_tokens=asked if asked is not None else omit)
    sent, row = _last_call(dialect_stack)
    assert sent["max_tokens"] == (asked or DEFAULT_CAP)
    assert ("max_output_tokens" in json.loads(row.request_json)) == (asked is not None)
