"""Must-show 1: the official openai client against proxy + engine, streamed and not, with tools; every test
runs against the bundled engine and against real vLLM (``any_engine_url``)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

from tests.proxy.conftest import Proxy


@pytest.fixture()
def proxy(start_proxy: Callable[..., Proxy], any_engine_url: str) -> Proxy:
    return start_proxy(any_engine_url)


@pytest.fixture()
def served_model(any_engine_url: str) -> str:
    return str(httpx.get(f"{any_engine_url}/v1/models", timeout=10).json()["data"][0]["id"])


TOOLS: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
]


def _client(proxy: Proxy) -> openai.OpenAI:
    rollout = proxy.new_rollout()
    return openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)


def test_non_streamed_usage_and_shape(proxy: Proxy, served_model: str) -> None:
    client = _client(proxy)
    out = client.chat.completions.create(
        model=served_model, messages=MESSAGES, tools=TOOLS, max_tokens=12, seed=1, logprobs=True, top_logprobs=2
    )
    choice = out.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert out.usage is not None and out.usage.completion_tokens >= 1
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    assert choice.logprobs is not None and len(choice.logprobs.content or []) == out.usage.completion_tokens
    assert all(len(t.top_logprobs) >= 1 for t in choice.logprobs.content or [])


def test_streamed_matches_usage(proxy: Proxy, served_model: str) -> None:
    client = _client(proxy)
    stream = client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        tools=TOOLS,
        max_tokens=10,
        seed=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens >= 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    assert isinstance(text, str)


def test_n_choices_and_models(proxy: Proxy, served_model: str) -> None:
    client = _client(proxy)
    assert [m.id for m in client.models.list()] == [served_model]
    out = client.chat.completions.create(model=served_model, messages=MESSAGES, max_tokens=5, n=3, seed=2)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert out.usage is not None and out.usage.completion_tokens >= 3


def test_named_tool_choice_opens_the_call_in_the_prompt(proxy: Proxy, served_model: str) -> None:
    """A named tool_choice is honoured by a prompt prefill; a call the length limit cut off finishes with
    ``length`` and is not handed back as text."""
    client = _client(proxy)
    out = client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        tools=TOOLS,
        max_tokens=6,
        seed=5,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    message = out.choices[0].message
    if message.tool_calls:
        call = message.tool_calls[0]
        assert isinstance(call, ChatCompletionMessageFunctionToolCall) and call.function.name == "get_weather"
    else:
        assert out.choices[0].finish_reason == "length"
        assert "<tool_call>" not in (message.content or "") and '"name"' not in (message.content or "")


def test_tool_choice_naming_an_unknown_tool_is_400(proxy: Proxy, served_model: str) -> None:
    client = _client(proxy)
    with pytest.raises(openai.BadRequestError, match="not in tools"):
        client.chat.completions.create(
            model=served_model,
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
