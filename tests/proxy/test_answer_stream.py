"""AnswerStream: sampled ids fed one token at a time stream deltas that assemble into exactly the final message,
which for every answer a client can assemble is the same message a non-streamed call parses out of the ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollwire.proxy.answer import CONTENT, REASONING, AnswerStream, Delta
from rollwire.proxy.conversation import Message
from rollwire.proxy.parsers import reasoning_parser, tool_parser
from rollwire.proxy.render import Renderer

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWERS = [
    "Hello there, how are you today?",
    "<think>\nplan it\nstep two\n</think>\n\nThe answer is 4.",
    f"<think>\nneed a tool\n</think>\n\nLet me check.\n{CALL}",
    f"{CALL}\n{CALL}",
    "<think>\ncut off while thin",
    "<think></think>Plain after empty thinking.",
    "Text with a <tool_call> that never closes",
    '<tool_call>\n{"name": "get_weather", "arguments": {broken</tool_call>',
    "  leading spaces and trailing ones   ",
    "unicode: caf\u00e9 \u2603 \u65e5\u672c\u8a9e \U0001f600 done",
    "alpha STOP beta",
    "a <thinking> tag that is not reasoning",
]


@pytest.fixture(scope="module")
def renderer(tiny_model_dir: Path) -> Renderer:
    return Renderer.from_folder(tiny_model_dir)


def _ids(renderer: Renderer, text: str) -> list[int]:
    return renderer.encode(text) + [renderer.tokenizer.eos_token_id]


def _stream(renderer: Renderer, tools: bool, stops: tuple[str, ...] = ()) -> AnswerStream:
    return AnswerStream(renderer, reasoning_parser("qwen3"), tool_parser("hermes") if tools else None, stops)


def _assembled(deltas: list[Delta]) -> tuple[str | None, str]:
    reasoning = None
    content = ""
    for channel, text in deltas:
        if channel == REASONING:
            reasoning = (reasoning or "") + text
        else:
            content += text
    return reasoning, content


def _calls(message: Message) -> list[tuple[str, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in message.tool_calls]


@pytest.mark.parametrize("tools", [True, False])
@pytest.mark.parametrize("text", ANSWERS)
def test_streamed_deltas_assemble_into_the_final_message(renderer: Renderer, text: str, tools: bool) -> None:
    stops = ("STOP",)
    ids = _ids(renderer, text)
    live = _stream(renderer, tools, stops)
    deltas: list[Delta] = []
    for token in ids:
        deltas += live.feed([token])
    message, tail = live.finish()
    deltas += tail
    reasoning, content = _assembled(deltas)
    assert content == message.content
    assert reasoning == message.reasoning or (reasoning == "" and message.reasoning == "")

    whole = _stream(renderer, tools, stops)
    whole.ids.extend(ids)
    expected, _ = whole.finish()
    assert _calls(message) == _calls(expected)
    if text == "<think>\ncut off while thin":  # streamed as reasoning, so it stays reasoning (whole: text)
        assert (message.reasoning, message.content, expected.content) == ("cut off while thin", "", text)
    else:
        assert (message.key(), message.reasoning) == (expected.key(), expected.reasoning)
    if text.startswith("<think>\nplan"):
        assert deltas[0] == (REASONING, "") and sum(1 for c, _ in deltas if c == REASONING) > 2
        assert sum(1 for c, _ in deltas if c == CONTENT) > 2  # streamed, not sent whole at the end


def test_text_streams_before_the_answer_ends_but_a_tool_call_waits(renderer: Renderer) -> None:
    live = _stream(renderer, tools=True)
    shown = []
    for token in renderer.encode(f"Let me check the weather.\n{CALL}"):
        shown += live.feed([token])
    assert _assembled(shown) == (None, "Let me check the weather.")  # the call's text never streamed
    message, tail = live.finish()
    assert tail == [] and _calls(message) == [("get_weather", {"city": "Paris"})]


def test_a_half_sampled_stop_string_is_held_back(renderer: Renderer) -> None:
    live = _stream(renderer, tools=False, stops=("STOP",))
    shown = []
    for token in renderer.encode("alpha ST"):
        shown += live.feed([token])
    assert _assembled(shown) == (None, "alpha")
    for token in renderer.encode("OP beta"):
        shown += live.feed([token])
    message, tail = live.finish()
    assert message.content == "alpha " and _assembled(shown + tail) == (None, "alpha ")
