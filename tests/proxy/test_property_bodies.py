"""Must-show 8, as a property: whatever request body a client sends to any dialect (good bodies with fields
replaced, added or broken by generated JSON, including lone surrogates, deep nesting and odd numbers), the
real proxy on loopback answers below 500, a refusal comes in that dialect's error shape, and a refused
request stores nothing.

The upstream is a scripted engine on loopback that answers every completion at once with two tokens, so the
examples exercise the proxy's edge, not sampling; the example count and deadline are fixed below.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func
from sqlmodel import Session, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollwire.app.serving import ServerThread
from rollwire.store import ModelCall, open_engine
from tests.proxy.conftest import Proxy

EXAMPLES = 120
"""Per dialect (four targets: about 500 requests in all, well under a minute on one core)."""


@pytest.fixture(scope="module")
def instant_upstream() -> Iterator[str]:
    """Answers each prompt with two fixed token ids per choice (a whole JSON body, even when asked to stream)."""

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 32768}]})

    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        choice = {"token_ids": [72, 73], "logprobs": {"token_logprobs": [-0.5, -0.5]}, "finish_reason": "length"}
        choices = [{"index": i, **choice, "prompt_token_ids": body["prompt"]} for i in range(int(body.get("n", 1)))]
        return JSONResponse({"id": "cmpl", "object": "text_completion", "choices": choices})

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
    with ServerThread(app) as server:
        yield server.url


SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\udc00\ud800"])
TEXT = st.one_of(st.text(max_size=12), SURROGATES)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=12
)
DEEP = st.integers(min_value=60, max_value=20_000).map(lambda n: f"<deep {n}>")
"""A placeholder, written out as ``n`` nested arrays once the body is JSON text (Python cannot nest them)."""
_DEEP = re.compile(r'"<deep (\d+)>"')
VALUES = st.one_of(JSON, DEEP)

TOOL_OPENAI = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
TOOL_RESPONSES = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
TOOL_MESSAGES = {"name": "f", "input_schema": {"type": "object", "properties": {}}}
BASES: dict[str, dict[str, Any]] = {
    "chat": {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
        "max_tokens": 2,
        "tools": [TOOL_OPENAI],
    },
    "responses": {"model": "m", "input": [{"role": "user", "content": "hi"}], "tools": [TOOL_RESPONSES]},
    "messages": {
        "model": "m",
        "system": "s",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_tokens": 2,
        "tools": [TOOL_MESSAGES],
    },
}
FIELDS = [
    "model", "messages", "input", "instructions", "system", "tools", "tool_choice", "max_tokens",
    "max_output_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop",
    "stop_sequences", "stream", "stream_options", "logprobs", "top_logprobs", "response_format", "text",
    "output_config", "output_format", "parallel_tool_calls", "thinking", "metadata", "reasoning", "tools.0",
    "messages.0", "messages.0.content", "messages.-1.role", "input.0", "input.0.content", "tools.0.function",
    "tools.0.parameters", "tools.0.input_schema", "tool_choice.name", "text.format", "output_config.format",
    "input.0.role", "input.0.type", "input.-1", "messages.0.content.0", "messages.0.content.0.type", "tools.0.type",
    "tools.0.name", "tool_choice.type", "messages.0.tool_calls", "messages.0.content.0.text", "tools.0.function.name",
]  # fmt: skip
TARGETS = {
    "chat": ("/chat/completions", "chat"),
    "responses": ("/responses", "responses"),
    "messages": ("/messages", "messages"),
    "count_tokens": ("/messages/count_tokens", "messages"),
}


def _put(body: Any, path: str, value: Any) -> Any:
    """``body`` with the value at dotted ``path`` replaced (containers on the way are created as needed)."""
    head, _, rest = path.partition(".")
    if isinstance(body, list) and head.lstrip("-").isdigit():
        if not body:
            return [value] if not rest else body
        index = int(head) % len(body)
        items = list(body)
        items[index] = _put(body[index], rest, value) if rest else value
        return items
    out = dict(body) if isinstance(body, dict) else {}
    out[head] = _put(out.get(head, {}), rest, value) if rest else value
    return out


@st.composite
def bodies(draw: st.DrawFn, dialect: str) -> bytes:
    """A good body of ``dialect``, then one to three fields replaced by generated JSON; sometimes the text is
    cut short or given a non-JSON constant."""
    body: Any = json.loads(json.dumps(BASES[dialect]))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        body = _put(body, draw(st.sampled_from(FIELDS)), draw(VALUES))
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        body = draw(VALUES)
    text = _DEEP.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), json.dumps(body))
    damage = draw(st.integers(min_value=0, max_value=19))
    if damage == 0:
        text = text[: draw(st.integers(min_value=0, max_value=len(text)))]
    elif damage == 1:
        text = text.replace("2", "NaN", 1)
    return text.encode()


def _stored(engine: Any) -> int:
    with Session(engine) as session:
        return int(session.exec(select(func.count()).select_from(ModelCall)).one())


def _check_error_shape(dialect: str, answer: httpx.Response) -> None:
    body = answer.json()
    if dialect == "messages":
        assert body["type"] == "error", body
        assert isinstance(body["error"]["type"], str) and isinstance(body["error"]["message"], str), body
    else:
        assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["type"], str), body
        assert "param" in body["error"] and "code" in body["error"], body


@pytest.mark.parametrize("target", list(TARGETS))
def test_no_body_gets_a_5xx_and_refusals_store_nothing(
    start_proxy: Callable[..., Proxy], instant_upstream: str, target: str
) -> None:
    proxy = start_proxy(instant_upstream)
    base = proxy.new_rollout()["base_url"]
    route, dialect = TARGETS[target]
    engine = open_engine(proxy.store_url)
    client = httpx.Client(timeout=30, headers={"Content-Type": "application/json"})

    @settings(
        max_examples=EXAMPLES,
        deadline=None,  # one example is one HTTP round trip: its time is the machine's, not the property's
        derandomize=True,  # CI runs the same examples every time
        database=None,  # nothing written beside the tests
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(body=bodies(dialect if target != "count_tokens" else "messages"))
    def check(body: bytes) -> None:
        before = _stored(engine)
        answer = client.post(base + route, content=body)
        assert answer.status_code < 500, (answer.status_code, answer.text[:500])
        if answer.status_code >= 400:
            _check_error_shape(dialect, answer)
            assert _stored(engine) == before, "a refused request stored a call"

    try:
        check()
    finally:
        client.close()
        engine.dispose()
