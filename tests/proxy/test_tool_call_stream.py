"""Tool calls, reasoning and tool_choice through the openai client, streamed and not, over an upstream that
samples scripted ids (the tiny random model rarely emits a tool call); deltas must assemble into the calls."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)
from sqlmodel import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.settings import ProxySettings
from rollwire.store import ModelCall, decode_ids, open_engine, session_scope
from rollwire.store.schema import ENGINE_FAILED
from rollwire.tokenizers import load_tokenizer
from tests.proxy.asgi_log import SentLog
from tests.proxy.conftest import OPERATOR_KEY, OpenAIRollout, Proxy, admin_client

TWO_CALLS = (
    "<think>\nplan it\n</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
)
TOOLS: list[ChatCompletionFunctionToolParam] = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_weather", "get_time")
]
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Paris?"}]


def _function_calls(message: ChatCompletionMessage) -> list[ChatCompletionMessageFunctionToolCall]:
    """The message's tool calls, each a function call (the only kind of tool these tests declare)."""
    calls = []
    for call in message.tool_calls or []:
        assert isinstance(call, ChatCompletionMessageFunctionToolCall), call
        calls.append(call)
    return calls


class Script:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.text = ""
        self.prompts: list[list[int]] = []
        self.max_tokens: list[int | None] = []
        self.streams = True
        self.fail_after: int | None = None
        """Stream this many tokens, then the engine's mid-stream error chunk."""
        """Answer ``stream: true`` with one server-sent chunk per token (else one JSON body, as some upstreams)."""

    def ids(self) -> list[int]:
        return list(self.tokenizer(self.text, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]


def _chunks(prompt: list[int], ids: list[int], fail_after: int | None) -> Iterator[str]:
    for i, token in enumerate(ids):
        if i == fail_after:
            yield 'data: {"error": {"message": "engine fell over", "type": "upstream_error", "code": 502}}\n\n'
            break
        choice = {
            "index": 0,
            "text": "",
            "finish_reason": "stop" if i == len(ids) - 1 else None,
            "token_ids": [token],
            "prompt_token_ids": prompt if i == 0 else None,
            "logprobs": {"token_logprobs": [-0.25], "tokens": [f"t{token}"], "top_logprobs": None},
        }
        yield f"data: {json.dumps({'id': 'x', 'choices': [choice], 'weight_version': 7})}\n\n"
    yield "data: [DONE]\n\n"


@pytest.fixture()
def scripted(tiny_model_dir: Path) -> Iterator[tuple[str, Script]]:
    script = Script(load_tokenizer(tiny_model_dir))

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]})

    async def completions(request: Request) -> Response:
        body = await request.json()
        script.prompts.append(body["prompt"])
        script.max_tokens.append(body.get("max_tokens"))
        ids = script.ids()
        if body.get("stream") and script.streams:
            chunks = _chunks(body["prompt"], ids, script.fail_after)
            return StreamingResponse(chunks, media_type="text/event-stream")
        choice = {
            "index": 0,
            "text": "",
            "finish_reason": "stop",
            "token_ids": ids,
            "prompt_token_ids": body["prompt"],
            "logprobs": {"token_logprobs": [-0.25] * len(ids), "tokens": [f"t{i}" for i in ids], "top_logprobs": None},
        }
        return JSONResponse({"id": "x", "choices": [choice], "weight_version": 7})

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
    with ServerThread(app) as server:
        yield server.url, script


def test_parallel_calls_and_reasoning_non_streamed(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script]
) -> None:
    url, script = scripted
    script.text = TWO_CALLS
    proxy, client, rollout = openai_rollout(url)
    out = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    message = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in _function_calls(message)] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]
    assert getattr(message, "reasoning_content", None) == "plan it"  # a field the openai types lack
    assert out.usage is not None and out.usage.completion_tokens == len(script.ids())
    trajectory = proxy.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()
    assert trajectory["segments"][0]["policy_versions"][-1] == 7


@pytest.mark.parametrize("upstream_streams", [True, False])
def test_tool_call_deltas_assemble(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script], upstream_streams: bool
) -> None:
    url, script = scripted
    script.text = TWO_CALLS
    script.streams = upstream_streams
    _, client, _ = openai_rollout(url)
    stream = client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, stream=True, stream_options={"include_usage": True}
    )
    calls: dict[int, dict[str, str]] = {}
    reasoning, finish, usage = "", None, None
    calls_before_reasoning_ended = False
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            calls_before_reasoning_ended |= bool(choice.delta.tool_calls) and reasoning != "plan it"
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                call["name"] += (delta.function.name or "") if delta.function else ""
                call["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]
    assert all(c["id"].startswith("call_") for c in calls.values())
    assert finish == "tool_calls" and reasoning == "plan it"
    assert usage is not None and usage.completion_tokens == len(script.ids())
    assert calls_before_reasoning_ended is False


def test_tool_choice_none_and_parallel_off(openai_rollout: OpenAIRollout, scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.text = TWO_CALLS
    _, client, _ = openai_rollout(url)
    none = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="none")
    assert none.choices[0].message.tool_calls is None and "<tool_call>" in (none.choices[0].message.content or "")
    assert none.choices[0].finish_reason == "stop"
    single = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, parallel_tool_calls=False)
    assert [c.function.name for c in _function_calls(single.choices[0].message)] == ["get_weather"]


def test_required_prefills_the_prompt_and_unparseable_is_text(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script]
) -> None:
    url, script = scripted
    _, client, _ = openai_rollout(url)
    script.text = 'get_time", "arguments": {}}\n</tool_call>'
    out = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="required")
    assert [c.function.name for c in _function_calls(out.choices[0].message)] == ["get_time"]
    prefill = script.tokenizer('<tool_call>\n{"name": "', add_special_tokens=False)["input_ids"]
    assert script.prompts[-1][-len(prefill) :] == prefill  # the opening is prompt, not sampled
    script.text = '<tool_call>\n{"name": "get_time", "arguments": {broken</tool_call>'
    broken = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    assert broken.choices[0].message.tool_calls is None
    assert broken.choices[0].message.content == script.text and broken.choices[0].finish_reason == "stop"


def test_unset_max_tokens_is_the_rest_of_the_context(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script]
) -> None:
    """As OpenAI and vLLM's chat route: no max_tokens means up to the context's end, not the engine's 16."""
    url, script = scripted
    script.text = "ok"
    _, client, _ = openai_rollout(url)
    client.chat.completions.create(model="m", messages=MESSAGES)
    client.chat.completions.create(model="m", messages=MESSAGES, max_completion_tokens=9)
    assert script.max_tokens == [4096 - len(script.prompts[0]), 9]


def test_stop_string_is_cut_from_the_answer_but_kept_in_the_ids(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script]
) -> None:
    url, script = scripted
    script.text = "alpha STOP beta"
    proxy, client, rollout = openai_rollout(url)
    out = client.chat.completions.create(model="m", messages=MESSAGES, stop=["STOP"])
    assert out.choices[0].message.content == "alpha "
    segment = proxy.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()["segments"][0]
    assert segment["token_ids"][-len(script.ids()) :] == script.ids()


def test_an_upstream_failing_mid_stream_is_an_error_event_and_an_error_row(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script]
) -> None:
    url, script = scripted
    script.text = "one two three four five six seven eight"
    script.fail_after = 4
    proxy, client, rollout = openai_rollout(url)
    with pytest.raises(openai.APIError, match="engine fell over"):
        for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            pass
    engine = open_engine(proxy.store_url)
    with session_scope(engine) as session:
        rows = list(session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout["id"])).all())
    engine.dispose()
    recorded = [(r.status, r.finish_reason, len(decode_ids(r.completion_ids))) for r in rows]
    assert recorded == [(ENGINE_FAILED, "abort", 4)]
    assert "engine fell over" in (rows[0].error or "")


def test_the_engine_reported_version_beats_the_published_one(
    openai_rollout: OpenAIRollout, scripted: tuple[str, Script]
) -> None:
    # the engine knows which weights sampled an answer; a published version can lag or lead its reload
    url, script = scripted
    script.text = "hi"
    proxy, client, rollout = openai_rollout(url)
    assert proxy.admin.post("/admin/v1/policy_version", json={"version": 3}).status_code == 200
    client.chat.completions.create(model="m", messages=MESSAGES)
    trajectory = proxy.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()
    assert set(trajectory["segments"][0]["policy_versions"]) - {-1} == {7}


def test_a_streamed_answers_tail_leaves_in_one_write(
    scripted: tuple[str, Script], tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Reasoning streams as it is sampled; once the call is committed, its tool calls, finish reason, usage and
    ``[DONE]`` go out as one write (each write is a system call and a wake-up of the client: there were seven)."""
    url, script = scripted
    script.text = TWO_CALLS
    settings = ProxySettings(upstream=url, model=str(tiny_model_dir))
    app = create_app(settings, f"sqlite:///{tmp_path / 'store.db'}", tmp_path, operator_key=OPERATOR_KEY)
    log: list[tuple[Any, ...]] = []
    app.apps["main"] = SentLog(app.apps["main"], log)
    with ServerThread(app) as server:
        admin = admin_client(server.urls["admin"])
        rollout = Proxy(server.url, "", admin).new_rollout()
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="m", messages=MESSAGES, tools=TOOLS, stream=True, stream_options={"include_usage": True}
            )
        )
        admin.close()
    writes = [body.decode() for _, body, _ in log if body]
    assert all(w.endswith("\n\n") for w in writes)  # whole events only
    *streamed, tail = writes
    events = [json.loads(e[6:]) for w in streamed for e in w.split("\n\n") if e]
    deltas = [c["delta"] for e in events for c in e["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "plan it"  # as sampled, before the tail
    assert not any(d.get("tool_calls") for d in deltas)
    # two calls (each its name, then its arguments), the finish reason, usage, [DONE]
    assert tail.count("data: ") == 7 and tail.endswith("data: [DONE]\n\n")
    assert '"get_weather"' in tail and '"get_time"' in tail and '"finish_reason":"tool_calls"' in tail
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.tool_calls) == 4 and chunks[-1].usage


def test_text_streams_as_it_arrives_and_a_packet_of_tokens_is_one_delta(
    openai_rollout: OpenAIRollout, tiny_model_dir: Path
) -> None:
    """The engine's chunks that arrive together (one packet) are read as one: their text is one delta. A later
    packet is another: the first delta reaches the client while the engine still holds the rest (the engine
    here sends its second packet only once the client has the first)."""
    tokenizer = load_tokenizer(tiny_model_dir)
    packets = [tokenizer("Hello there", add_special_tokens=False)["input_ids"]]
    packets.append(tokenizer("! Bye.", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
    client_has_first = threading.Event()
    waited: list[bool] = []

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]})

    async def completions(request: Request) -> Response:
        body = await request.json()
        events = list(_chunks(body["prompt"], packets[0] + packets[1], None))
        first, rest = "".join(events[: len(packets[0])]), "".join(events[len(packets[0]) :])

        async def send() -> AsyncIterator[str]:
            yield first  # one write: the proxy reads these chunks together
            waited.append(await anyio.to_thread.run_sync(client_has_first.wait, 30))
            yield rest

        return StreamingResponse(send(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
    with ServerThread(app) as upstream:
        _, client, _ = openai_rollout(upstream.url)
        deltas = []
        for chunk in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            text = chunk.choices[0].delta.content if chunk.choices else None
            if text:
                deltas.append(text)
                client_has_first.set()
    assert waited == [True]  # the engine sent its second packet after the client had the first delta
    assert deltas == ["Hello there", "! Bye."]
