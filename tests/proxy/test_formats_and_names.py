"""Must-show 5 and 6: structured output is sent to an upstream that enforces it and refused by name where it
cannot be (never silently ignored), in every dialect; a forced tool call the length limit cuts off finishes
with ``length`` and is not handed back as text; ``rollwire proxy`` answers any model name while the upstream
serves one model (recorded as requested), and ``strict_models`` refuses unknown names in the dialect's shape."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from openai.types.responses import FunctionToolParam
from sqlmodel import Session, select

from rollwire.store import ModelCall, open_engine
from tests.proxy.conftest import Proxy
from tests.proxy.upstream_shim import UpstreamShim, shimmed_engine

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
QUESTION = "Where is the Eiffel tower? Answer as JSON."
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]
USER_MESSAGES: list[MessageParam] = [{"role": "user", "content": QUESTION}]
"""``USER`` in the Messages dialect's types."""


def _calls(proxy: Proxy) -> list[ModelCall]:
    with Session(open_engine(proxy.store_url)) as session:
        return list(session.exec(select(ModelCall)).all())


def _ask_for_json(dialect: str, rollout: dict[str, Any], model: str) -> None:
    """One request per dialect that asks for SCHEMA as the answer's format, in that dialect's own field."""
    if dialect == "messages":
        client = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
        client.messages.create(
            model=model,
            max_tokens=4,
            messages=USER_MESSAGES,
            output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
        )
        return
    openai_client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    if dialect == "chat":
        openai_client.chat.completions.create(
            model=model,
            max_tokens=4,
            messages=USER,
            response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA}},
        )
    else:
        openai_client.responses.create(
            model=model,
            max_output_tokens=4,
            input=QUESTION,
            text={"format": {"type": "json_schema", "name": "place", "schema": SCHEMA}},
        )


FORMAT_PARAMS = {"chat": "response_format", "responses": "text.format", "messages": "output_config.format"}


@pytest.fixture()
def enforcing(tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[str, UpstreamShim]]:
    """The bundled engine, which enforces structured outputs (as vLLM does), with its requests kept."""
    with shimmed_engine(tiny_model_dir, tmp_path / "engine") as found:
        yield found


@pytest.mark.parametrize("dialect", list(FORMAT_PARAMS))
def test_structured_output_reaches_an_upstream_that_enforces_it(
    start_proxy: Callable[..., Proxy], enforcing: tuple[str, UpstreamShim], served_model: str, dialect: str
) -> None:
    upstream, shim = enforcing
    proxy = start_proxy(upstream)
    _ask_for_json(dialect, proxy.new_rollout(), served_model)
    assert shim.formats == [{"json": SCHEMA}]  # vLLM's /v1/completions field, as vLLM takes it
    assert len(_calls(proxy)) == 1


@pytest.mark.parametrize("dialect", list(FORMAT_PARAMS))
def test_structured_output_is_refused_by_name_where_the_upstream_cannot_enforce_it(
    start_proxy: Callable[..., Proxy], tiny_model_dir: Path, tmp_path: Path, served_model: str, dialect: str
) -> None:
    with shimmed_engine(tiny_model_dir, tmp_path / "engine", structured_outputs=False) as (upstream, shim):
        proxy = start_proxy(upstream)
        error = anthropic.BadRequestError if dialect == "messages" else openai.BadRequestError
        with pytest.raises(error) as caught:
            _ask_for_json(dialect, proxy.new_rollout(), served_model)
        param = FORMAT_PARAMS[dialect]
        assert param in str(caught.value) and "cannot enforce an output format" in str(caught.value)
        if dialect == "messages":
            assert isinstance(caught.value, anthropic.BadRequestError)
            assert isinstance(caught.value.body, dict) and caught.value.body["type"] == "error"
        else:
            assert isinstance(caught.value, openai.BadRequestError) and caught.value.param == param
        assert shim.formats == [] and _calls(proxy) == []  # refused before the engine was asked


def test_plain_text_formats_are_accepted(proxy: Proxy, served_model: str) -> None:
    client = openai.OpenAI(base_url=proxy.new_rollout()["base_url"], api_key="x", max_retries=0)
    out = client.chat.completions.create(
        model=served_model, max_tokens=2, messages=USER, response_format={"type": "text"}
    )
    assert out.choices[0].message is not None


TOOL_SCHEMA: dict[str, object] = {"type": "object", "properties": {"city": {"type": "string"}}}


@pytest.mark.parametrize("dialect", list(FORMAT_PARAMS))
def test_a_forced_call_cut_off_by_length_is_not_text(proxy: Proxy, served_model: str, dialect: str) -> None:
    """tool_choice required (Chat, Responses) / any (Messages) with 3 output tokens: the call cannot close."""
    rollout = proxy.new_rollout()
    if dialect == "messages":
        client = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
        answer = client.messages.create(
            model=served_model,
            max_tokens=3,
            messages=USER_MESSAGES,
            tools=[{"name": "lookup", "input_schema": TOOL_SCHEMA}],
            tool_choice={"type": "any"},
        )
        assert answer.stop_reason == "max_tokens"
        texts = [b.text for b in answer.content if b.type == "text"]
        assert all(b.type != "tool_use" for b in answer.content)
    elif dialect == "chat":
        openai_client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
        chat_tool: ChatCompletionFunctionToolParam = {
            "type": "function",
            "function": {"name": "lookup", "parameters": TOOL_SCHEMA},
        }
        out = openai_client.chat.completions.create(
            model=served_model, max_tokens=3, messages=USER, tools=[chat_tool], tool_choice="required"
        )
        assert out.choices[0].finish_reason == "length" and not out.choices[0].message.tool_calls
        texts = [out.choices[0].message.content or ""]
    else:
        openai_client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
        tool: FunctionToolParam = {"type": "function", "name": "lookup", "parameters": TOOL_SCHEMA, "strict": None}
        response = openai_client.responses.create(
            model=served_model, max_output_tokens=3, input="Where?", tools=[tool], tool_choice="required"
        )
        assert response.status == "incomplete"
        assert all(item.type != "function_call" for item in response.output)
        texts = [response.output_text]
    assert all("<tool_call>" not in t and '"name"' not in t for t in texts), texts
    assert len(_calls(proxy)) == 1  # recorded all the same: the sampled ids are the trajectory's


def test_any_model_name_is_answered_and_recorded_as_requested(proxy: Proxy, served_model: str) -> None:
    """No alias table (as `rollwire proxy` alone): the names Claude Code and Codex send are answered."""
    rollout = proxy.new_rollout()
    chat = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    out = chat.chat.completions.create(model="gpt-5-codex", max_tokens=2, messages=USER)
    assert out.model == "gpt-5-codex"
    claude = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
    answer = claude.messages.create(model="claude-sonnet-4-5", max_tokens=2, messages=USER_MESSAGES)
    assert answer.model == "claude-sonnet-4-5"
    calls = sorted(_calls(proxy), key=lambda c: c.id or 0)
    assert [(c.requested_model, c.served_model) for c in calls] == [
        ("gpt-5-codex", served_model),
        ("claude-sonnet-4-5", served_model),
    ]


def test_strict_models_refuses_unknown_names_in_each_dialect_shape(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str
) -> None:
    proxy = start_proxy(engine_url, strict_models=True)
    rollout = proxy.new_rollout()
    chat = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="gpt-5-codex") as chat_error:
        chat.chat.completions.create(model="gpt-5-codex", max_tokens=2, messages=USER)
    assert chat_error.value.param == "model"
    with pytest.raises(openai.NotFoundError, match="gpt-5-codex"):
        chat.responses.create(model="gpt-5-codex", max_output_tokens=2, input="hi")
    claude = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as claude_error:
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=2, messages=USER_MESSAGES)
    body: Any = claude_error.value.body
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert "claude-sonnet-4-5" in body["error"]["message"]
    out = chat.chat.completions.create(model=served_model, max_tokens=2, messages=USER)
    assert out.model == served_model and len(_calls(proxy)) == 1
