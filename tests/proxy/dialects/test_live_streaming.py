"""Streaming is real: text reaches the official clients while the engine's answer is still open (the tap holds the
answer's end until the client has seen text, so no test races the engine), the streamed answer is the one a non-streamed call with the same seed gets,
and a client that leaves mid-stream stops the engine and leaves one partial row that no trajectory uses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from sqlmodel import select
from transformers import AutoTokenizer

from rollwire.store import ModelCall, decode_ids, open_engine, session_scope
from tests.polling import wait_until
from tests.proxy.dialects.conftest import Stack

LONG = 256
"""Output tokens asked for: room for more than ten streamed deltas."""
PROMPT = "Write a long story about a lighthouse keeper."


def _engine_done(stack: Stack, first: int) -> bool:
    return len(stack.tap.calls) > first


def test_chat_tokens_arrive_while_the_engine_generates(dialect_stack: Stack) -> None:
    rollout = dialect_stack.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
    first = len(dialect_stack.tap.calls)
    done_at_first_text, texts, usage = None, [], None
    with dialect_stack.tap.holding_ends() as release:  # the engine's end waits for the client's first text
        stream = client.chat.completions.create(
            model="m", messages=messages, max_tokens=LONG, temperature=1.0, seed=11, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        for chunk in stream:
            usage = chunk.usage or usage
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is not None and delta.content:
                if done_at_first_text is None:
                    done_at_first_text = _engine_done(dialect_stack, first)
                    release.set()
                texts.append(delta.content)
    assert done_at_first_text is False, "the first text arrived only after the engine had finished"
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


LONG_TEXT = 6
"""Tokens of answer text a sample needs to tell token-by-token streaming from one block (a tool call's tokens are
held, not text; the tiny model's answers are often a short sentence)."""


def _long_sample(
    stack: Stack, stream_once: StreamOnce, text_tokens: Callable[[str], int]
) -> tuple[str, int, bool | None, list[str], str]:
    """Stream one answer. A sample with little text (a short one, or mostly a tool call) cannot show token-by-token
    streaming, and these dialects carry no seed, so draw again while the final answer's text is short, at most twelve
    times. The final text is the same however the proxy streams it, so a proxy that sends blocks fails every draw."""
    for _ in range(12):
        rollout = stack.new_rollout()
        first = len(stack.tap.calls)
        done_at_first, deltas, final = stream_once(rollout, first)
        if text_tokens(final) >= LONG_TEXT:
            break
    return rollout["id"], first, done_at_first, deltas, final


def test_responses_and_messages_text_arrives_while_the_engine_generates(dialect_stack: Stack, tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir), local_files_only=True)

    def text_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    def responses(rollout: dict[str, Any], first: int) -> tuple[bool | None, list[str], str]:
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
        done_at_first, deltas = None, []
        with (
            dialect_stack.tap.holding_ends() as release,
            client.responses.stream(model="m", input=PROMPT, max_output_tokens=LONG, temperature=1.0) as stream,
        ):
            for event in stream:
                if event.type == "response.output_text.delta":
                    if done_at_first is None:
                        done_at_first = _engine_done(dialect_stack, first)
                        release.set()
                    deltas.append(event.delta)
            return done_at_first, deltas, stream.get_final_response().output_text

    def messages(rollout: dict[str, Any], first: int) -> tuple[bool | None, list[str], str]:
        client = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
        done_at_first, deltas = None, []
        with (
            dialect_stack.tap.holding_ends() as release,
            client.messages.stream(model="m", max_tokens=LONG, messages=[{"role": "user", "content": PROMPT}]) as stream,
        ):
            for text in stream.text_stream:
                if done_at_first is None:
                    done_at_first = _engine_done(dialect_stack, first)
                    release.set()
                deltas.append(text)
            message = stream.get_final_message()
        return done_at_first, deltas, "".join(b.text for b in message.content if b.type == "text")

    for stream_once in (responses, messages):
        rollout_id, first, done_at_first, deltas, final = _long_sample(dialect_stack, stream_once, text_tokens)
        said = f"{stream_once.__name__}: {len(deltas)} deltas for {text_tokens(final)} text tokens: {json.dumps(deltas)}"
        assert done_at_first is False, "the first text arrived only after the engine had finished; " + said
        assert len(deltas) > text_tokens(final) / 2 >= LONG_TEXT / 2, said  # token by token, not blocks
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
    # the proxy notices the disconnect on its own schedule; nothing to wait on but the store
    rows = wait_until(lambda: _rows(dialect_stack, rollout["id"]), "the partial call's row", every_s=0.1)
    assert [(r.status, r.finish_reason) for r in rows] == [("partial", "abort")]
    sampled = decode_ids(rows[0].completion_ids)
    assert 0 < len(sampled) < 4000 and "client left" in (rows[0].error or "")
    assert not _engine_done(dialect_stack, first)  # the engine's answer never completed: it was cancelled
    dialect_stack.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 0.0}).raise_for_status()
    trajectory = dialect_stack.admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()
    assert trajectory["segments"] == []  # a partial answer is never trained on
