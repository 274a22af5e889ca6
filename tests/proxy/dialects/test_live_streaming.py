"""Streaming is real: text reaches the official clients while the engine is still generating (the tap has not
seen the engine's answer end yet), the streamed answer is the one a non-streamed call with the same seed gets,
and a client that leaves mid-stream stops the engine and leaves one partial row that no trajectory uses."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
from sqlmodel import select

from rollwire.store import ModelCall, decode_ids, open_engine, session_scope
from tests.proxy.dialects.conftest import Stack

LONG = 256
"""Output tokens asked for: the tiny engine needs far longer for them than one chunk needs to reach the client."""
PROMPT = "Write a long story about a lighthouse keeper."


def _engine_done(stack: Stack, first: int) -> bool:
    return len(stack.tap.calls) > first


def test_chat_tokens_arrive_while_the_engine_generates(dialect_stack: Stack) -> None:
    rollout = dialect_stack.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]
    first = len(dialect_stack.tap.calls)
    started = time.perf_counter()
    stream = client.chat.completions.create(
        model="m", messages=messages, max_tokens=LONG, temperature=1.0, seed=11, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    first_text_at, done_at_first_text, texts, usage = None, None, [], None
    for chunk in stream:
        usage = chunk.usage or usage
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and delta.content:
            if first_text_at is None:
                first_text_at, done_at_first_text = time.perf_counter() - started, _engine_done(dialect_stack, first)
            texts.append(delta.content)
    total = time.perf_counter() - started
    assert done_at_first_text is False, "the first text arrived only after the engine had finished"
    assert first_text_at is not None and first_text_at < total / 2, (first_text_at, total)
    assert len(texts) > 10  # token by token, not one block at the end
    sampled = dialect_stack.tap.calls[-1][1]["choices"][0]["token_ids"]
    assert usage is not None and usage.completion_tokens == len(sampled) > 10
    dialect_stack.check_exact(rollout["id"], first)

    again = dialect_stack.new_rollout()
    plain = openai.OpenAI(base_url=again["base_url"], api_key="x", max_retries=0).chat.completions.create(
        model="m", messages=messages, max_tokens=LONG, temperature=1.0, seed=11
    )
    assert dialect_stack.tap.calls[-1][1]["choices"][0]["token_ids"] == sampled  # same seed, same sample
    assert "".join(texts) == plain.choices[0].message.content


StreamOnce = Callable[[dict[str, Any], int], tuple[bool | None, list[str], str]]


def _long_sample(stack: Stack, stream_once: StreamOnce) -> tuple[str, int, bool | None, list[str], str]:
    """Stream one answer. A sample that ends within ten tokens cannot show streaming, and these dialects carry no
    seed, so draw again while the engine's sample (not the proxy's output) is that short, at most five times."""
    for _ in range(5):
        rollout = stack.new_rollout()
        first = len(stack.tap.calls)
        done_at_first, deltas, final = stream_once(rollout, first)
        if len(stack.tap.calls[-1][1]["choices"][0]["token_ids"]) > 10:
            break
    return rollout["id"], first, done_at_first, deltas, final


def test_responses_and_messages_text_arrives_while_the_engine_generates(dialect_stack: Stack) -> None:
    def responses(rollout: dict[str, Any], first: int) -> tuple[bool | None, list[str], str]:
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
        done_at_first, deltas = None, []
        with client.responses.stream(model="m", input=PROMPT, max_output_tokens=LONG, temperature=1.0) as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    done_at_first = _engine_done(dialect_stack, first) if done_at_first is None else done_at_first
                    deltas.append(event.delta)
            return done_at_first, deltas, stream.get_final_response().output_text

    def messages(rollout: dict[str, Any], first: int) -> tuple[bool | None, list[str], str]:
        client = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
        done_at_first, deltas = None, []
        with client.messages.stream(
            model="m", max_tokens=LONG, messages=[{"role": "user", "content": PROMPT}]
        ) as stream:
            for text in stream.text_stream:
                done_at_first = _engine_done(dialect_stack, first) if done_at_first is None else done_at_first
                deltas.append(text)
            message = stream.get_final_message()
        return done_at_first, deltas, "".join(b.text for b in message.content if b.type == "text")

    for stream_once in (responses, messages):
        rollout_id, first, done_at_first, deltas, final = _long_sample(dialect_stack, stream_once)
        assert done_at_first is False and len(deltas) > 10, (stream_once.__name__, deltas)
        assert "".join(deltas) == final
        dialect_stack.check_exact(rollout_id, first)


def _rows(stack: Stack, rollout_id: str) -> list[ModelCall]:
    engine = open_engine(stack.store_url)
    try:
        with session_scope(engine) as session:
            return list(session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout_id)).all())
    finally:
        engine.dispose()


def test_a_client_leaving_mid_stream_stops_the_engine_and_leaves_a_partial_row(dialect_stack: Stack) -> None:
    rollout = dialect_stack.new_rollout()
    first = len(dialect_stack.tap.calls)
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 4000,
        "temperature": 1.0,
        "stream": True,
    }
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", rollout["base_url"] + "/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break  # leave after the first text
    rows: list[ModelCall] = []
    deadline = time.monotonic() + 30
    while not rows and time.monotonic() < deadline:
        time.sleep(0.1)  # the proxy notices the disconnect on its own schedule; nothing to wait on but the store
        rows = _rows(dialect_stack, rollout["id"])
    assert [(r.status, r.finish_reason) for r in rows] == [("partial", "abort")]
    sampled = decode_ids(rows[0].completion_ids)
    assert 0 < len(sampled) < 4000 and "client left" in (rows[0].error or "")
    assert not _engine_done(dialect_stack, first)  # the engine's answer never completed: it was cancelled
    dialect_stack.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 0.0}).raise_for_status()
    trajectory = dialect_stack.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()
    assert trajectory["segments"] == []  # a partial answer is never trained on
