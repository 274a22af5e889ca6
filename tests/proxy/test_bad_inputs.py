"""Must-show 5: each bad input gets a clear 4xx in OpenAI's error shape and writes nothing; an upstream that
is down gives 502 and one that times out 504, each with a message."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio.to_thread
import httpx
import openai
import pytest
from sqlmodel import Session, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollwire.app.serving import ServerThread
from rollwire.store import ModelCall, open_engine
from rollwire.store.schema import ENGINE_FAILED
from tests.proxy.conftest import Proxy

GOOD: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def _calls(proxy: Proxy, status: str = "complete") -> int:
    """The proxy's recorded calls of one status (a failed engine's calls are kept too, as the platform's failure)."""
    with Session(open_engine(proxy.store_url)) as session:
        return len(session.exec(select(ModelCall).where(ModelCall.status == status)).all())


CASES: list[tuple[str, Callable[[str], dict[str, Any]], int, str]] = [
    ("malformed json", lambda m: {"content": b'{"model": "x", "messages": ['}, 400, "malformed JSON"),
    ("empty messages", lambda m: {"json": {"model": m, "messages": []}}, 400, "messages must be a non-empty list"),
    ("unknown model", lambda m: {"json": {**GOOD, "model": "no-such-model"}}, 404, "does not exist"),
    (
        "tool without function",
        lambda m: {"json": {**GOOD, "model": m, "tools": [{"type": "function"}]}},
        400,
        "tools[0]",
    ),
    (
        "tool bad name",
        lambda m: {"json": {**GOOD, "model": m, "tools": [{"type": "function", "function": {"name": "a b"}}]}},
        400,
        "name must match",
    ),
    (
        "tool bad schema",
        lambda m: {
            "json": {
                **GOOD,
                "model": m,
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
            }
        },
        400,
        "JSON Schema object",
    ),
    ("required without tools", lambda m: {"json": {**GOOD, "model": m, "tool_choice": "required"}}, 400, "needs tools"),
    (
        "bad role",
        lambda m: {"json": {"model": m, "messages": [{"role": "robot", "content": "x"}]}},
        400,
        "role must be",
    ),
    ("bad temperature", lambda m: {"json": {**GOOD, "model": m, "temperature": 7}}, 400, "temperature"),
    (
        "image part",
        lambda m: {"json": {"model": m, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}},
        400,
        "unsupported content part",
    ),
    (
        "oversized body",
        lambda m: {"json": {**GOOD, "model": m, "messages": [{"role": "user", "content": "x" * 300_000}]}},
        413,
        "over the",
    ),
]


@pytest.fixture()
def small_proxy(start_proxy: Callable[..., Proxy], engine_url: str) -> Proxy:
    return start_proxy(engine_url, max_body_bytes=200_000, strict_models=True)


@pytest.mark.parametrize(("name", "request_kwargs", "status", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_4xx_and_writes_nothing(
    small_proxy: Proxy, served_model: str, name: str, request_kwargs: Any, status: int, message: str
) -> None:
    rollout = small_proxy.new_rollout()
    headers = {"Content-Type": "application/json"}
    response = httpx.post(
        f"{rollout['base_url']}/chat/completions", headers=headers, timeout=30, **request_kwargs(served_model)
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error["message"] and error["type"]
    assert _calls(small_proxy) == 0


def test_unknown_token_is_401(proxy: Proxy, served_model: str) -> None:
    client = openai.OpenAI(base_url=f"{proxy.url}/r/not-a-token/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="unknown rollout token"):
        client.chat.completions.create(model=served_model, messages=GOOD["messages"])
    bearer = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bearer.models.list()
    assert httpx.post(f"{proxy.admin_url}/admin/v1/runs", json={}).status_code == 401


def test_bearer_token_on_plain_v1_works(proxy: Proxy, served_model: str) -> None:
    token = proxy.new_rollout()["token"]
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=token, max_retries=0)
    assert client.chat.completions.create(model=served_model, messages=GOOD["messages"], max_tokens=2).choices


def test_upstream_down_is_502(start_proxy: Callable[..., Proxy], refusing_port: int) -> None:
    proxy = start_proxy(f"http://127.0.0.1:{refusing_port}")
    rollout = proxy.new_rollout()
    response = httpx.post(f"{rollout['base_url']}/chat/completions", json={**GOOD, "model": "m"}, timeout=30)
    message = response.json()["error"]["message"]
    assert response.status_code == 502 and "cannot reach the upstream" in message
    assert "(Connection refused)" in message, "what the system said, not the error's class alone"
    assert _calls(proxy) == 0 and _calls(proxy, ENGINE_FAILED) == 1  # the rollout's evidence that the engine failed


@pytest.fixture()
def hanging_upstream() -> Iterator[str]:
    """An upstream that lists a model but never finishes a completion (until the test ends)."""
    release = threading.Event()

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def completions(request: Request) -> Response:
        await anyio.to_thread.run_sync(release.wait, 30)
        return JSONResponse({}, status_code=500)

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
    with ServerThread(app) as server:
        yield server.url
        release.set()


def test_upstream_timeout_is_504(start_proxy: Callable[..., Proxy], hanging_upstream: str) -> None:
    proxy = start_proxy(hanging_upstream, upstream_timeout_s=0.5)
    rollout = proxy.new_rollout()
    response = httpx.post(f"{rollout['base_url']}/chat/completions", json={**GOOD, "model": "m"}, timeout=30)
    assert response.status_code == 504, response.text
    assert "timed out" in response.json()["error"]["message"]
    assert _calls(proxy) == 0 and _calls(proxy, ENGINE_FAILED) == 1


@pytest.fixture()
def echoing_upstream() -> Iterator[tuple[str, list[str]]]:
    """An upstream that streams one token and echoes the prompt's ids on the first chunk as vLLM does, the way
    the test says (``echo``: exact, one id changed, or the ids as strings; then "compact" JSON as vLLM writes it,
    or "spaced")."""
    echo: list[str] = ["exact", "compact"]

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def completions(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        echoed = {"exact": prompt, "changed": prompt[:-1] + [prompt[-1] + 1], "strings": [str(t) for t in prompt]}
        choice = {"index": 0, "text": "", "token_ids": [5], "logprobs": {"token_logprobs": [-0.1]},
                  "prompt_token_ids": echoed[echo[0]], "finish_reason": "stop"}  # fmt: skip
        separators = (",", ":") if echo[1] == "compact" else (", ", ": ")
        body = f"data: {json.dumps({'choices': [choice]}, separators=separators)}\n\ndata: [DONE]\n\n"
        return Response(body, media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
    with ServerThread(app) as server:
        yield server.url, echo


@pytest.mark.parametrize("echo", ["changed", "strings"])
@pytest.mark.parametrize("layout", ["compact", "spaced"])
def test_an_upstream_that_reports_another_prompt_is_502(
    start_proxy: Callable[..., Proxy], echoing_upstream: tuple[str, list[str]], echo: str, layout: str
) -> None:
    """The prompt an engine echoes is checked against what was sent: byte for byte where it is written as the
    proxy wrote it (vLLM's compact JSON), else as parsed. A list that differs in one id, or holds the same numbers
    as text, is another prompt; the exact echo answers, in either layout."""
    url, mode = echoing_upstream
    proxy = start_proxy(url)
    rollout = proxy.new_rollout()
    mode[:] = ["exact", layout]
    answered = httpx.post(f"{rollout['base_url']}/chat/completions", json={**GOOD, "model": "m"}, timeout=30)
    assert answered.status_code == 200, answered.text
    mode[0] = echo
    response = httpx.post(f"{rollout['base_url']}/chat/completions", json={**GOOD, "model": "m"}, timeout=30)
    assert response.status_code == 502, response.text
    assert "different prompt than the proxy sent" in response.json()["error"]["message"]
    assert _calls(proxy) == 1 and _calls(proxy, ENGINE_FAILED) == 1  # the exact call, and the engine's failure
