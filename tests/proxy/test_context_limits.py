"""Must-show 4: one context rule for every dialect (``rollwire.proxy.limits``), against the real engine served
with a short context: an output cap beyond what the context leaves is clamped to it, and the call records
both numbers; a prompt that alone fills the context is a 400 in the dialect's own error shape naming both."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from sqlmodel import select

from rollwire.app.serving import ServerThread
from rollwire.settings import EngineSettings
from rollwire.store import session_scope
from rollwire.store.db import open_engine
from rollwire.store.schema import ModelCall
from tests.proxy.conftest import Proxy
from tests.proxy.engine_tap import EngineTap

CONTEXT = 128
LONG = "count the stars " * 200
"""Well over CONTEXT tokens with the tiny tokenizer."""
HUGE_CAPS = {"chat": 100_000, "responses": 32_000, "messages": 64_000}
"""What clients send as a ceiling (Claude Code: 64000)."""


@pytest.fixture(scope="module")
def short_engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, EngineTap]]:
    from rollwire.engine import create_app as create_engine

    settings = EngineSettings(model=str(tiny_model_dir), device="cpu", max_model_len=CONTEXT)
    tap = EngineTap(create_engine(settings, tmp_path_factory.mktemp("short-engine")))
    with ServerThread(tap) as server:
        yield server.url, tap


@pytest.fixture()
def limited(start_proxy: Callable[..., Proxy], short_engine: tuple[str, EngineTap]) -> tuple[Proxy, EngineTap, str]:
    url, tap = short_engine
    served = str(httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"])
    return start_proxy(url), tap, served


def _send(proxy: Proxy, served: str, dialect: str, text: str, cap: int | None) -> str:
    """One request in ``dialect``; returns the rollout id."""
    rollout = proxy.new_rollout()
    messages: Any = [{"role": "user", "content": text}]
    if dialect == "messages":
        claude = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="unused", max_retries=0)
        # streamed, as Claude Code asks (the client will not wait on a 64000-token cap without a stream)
        with claude.messages.stream(
            model=served, max_tokens=cap or 1, messages=messages, extra_body={"temperature": 0.0}
        ) as stream:
            stream.get_final_message()
        return str(rollout["id"])
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
    if dialect == "chat":
        max_tokens = openai.omit if cap is None else cap  # omitted: the field is left out of the request
        client.chat.completions.create(model=served, messages=messages, temperature=0.0, max_tokens=max_tokens)
    else:
        max_output_tokens = openai.omit if cap is None else cap
        client.responses.create(model=served, input=text, temperature=0.0, max_output_tokens=max_output_tokens)
    return str(rollout["id"])


def _row(proxy: Proxy, rollout_id: str) -> ModelCall:
    with session_scope(open_engine(proxy.store_url)) as session:
        (row,) = session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout_id)).all()
        return row


@pytest.mark.parametrize("dialect", sorted(HUGE_CAPS))
def test_a_cap_beyond_the_context_is_clamped_and_both_are_recorded(
    limited: tuple[Proxy, EngineTap, str], dialect: str
) -> None:
    proxy, tap, served = limited
    rollout_id = _send(proxy, served, dialect, "Hi", HUGE_CAPS[dialect])
    request, answer = tap.calls[-1]
    left = CONTEXT - len(request["prompt"])
    assert request["max_tokens"] == left
    assert len(answer["choices"][0]["token_ids"]) <= left
    row = _row(proxy, rollout_id)
    assert (row.max_tokens_requested, row.max_tokens_granted) == (HUGE_CAPS[dialect], left)


def test_a_cap_that_fits_is_sent_as_asked(limited: tuple[Proxy, EngineTap, str]) -> None:
    proxy, tap, served = limited
    rollout_id = _send(proxy, served, "messages", "Hi", 5)
    assert tap.calls[-1][0]["max_tokens"] == 5
    row = _row(proxy, rollout_id)
    assert (row.max_tokens_requested, row.max_tokens_granted) == (5, 5)


def test_no_cap_is_the_rest_of_the_context(limited: tuple[Proxy, EngineTap, str]) -> None:
    proxy, tap, served = limited
    rollout_id = _send(proxy, served, "responses", "Hi", None)
    request = tap.calls[-1][0]
    row = _row(proxy, rollout_id)
    assert (row.max_tokens_requested, row.max_tokens_granted) == (None, CONTEXT - len(request["prompt"]))


def _numbers(message: str) -> tuple[int, int]:
    found = re.search(r"prompt is (\d+) tokens.*context is (\d+) tokens", message)
    assert found, message
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("dialect", sorted(HUGE_CAPS))
def test_a_prompt_past_the_context_is_a_400_in_the_dialects_shape(
    limited: tuple[Proxy, EngineTap, str], dialect: str
) -> None:
    proxy, tap, served = limited
    calls = len(tap.calls)
    error: Any
    if dialect == "messages":
        with pytest.raises(anthropic.BadRequestError) as refused:
            _send(proxy, served, dialect, LONG, 16)
        error = refused.value.body
        assert isinstance(error, dict) and error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        message = error["error"]["message"]
    else:
        with pytest.raises(openai.BadRequestError) as caught:
            _send(proxy, served, dialect, LONG, 16)
        assert caught.value.code == "invalid_request_error"
        message = caught.value.message
    prompt_len, context = _numbers(message)
    assert prompt_len > CONTEXT == context
    assert len(tap.calls) == calls  # refused before the engine


def test_the_proxy_reports_the_context_it_learnt(limited: tuple[Proxy, EngineTap, str]) -> None:
    proxy, _, served = limited
    _send(proxy, served, "chat", "Hi", 1)  # the proxy reads the upstream's model card on first use
    rollout = proxy.new_rollout()
    cards = httpx.get(rollout["base_url"] + "/models", timeout=10).json()["data"]
    assert {c["id"]: c["max_model_len"] for c in cards} == {served: CONTEXT}
