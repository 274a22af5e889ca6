"""Parsers turn sampled text into reasoning, content and tool calls; what does not parse stays text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollwire.errors import InvalidRequest
from rollwire.proxy.app import create_app
from rollwire.proxy.parsers import reasoning_parser, tool_parser
from rollwire.settings import ProxySettings


def test_hermes_parses_blocks_and_keeps_bad_ones_as_text() -> None:
    parser = tool_parser("hermes")
    content, calls = parser.parse('Sure.\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>')
    assert content == "Sure." and [(c.name, json.loads(c.arguments)) for c in calls] == [("f", {"a": 1})]
    text = '<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>'
    assert parser.parse(text) == (text, [])
    mixed = '<tool_call>{"name": "g", "arguments": {}}</tool_call><tool_call>{oops}</tool_call>'
    content, calls = parser.parse(mixed)
    assert [c.name for c in calls] == ["g"] and content == "<tool_call>{oops}</tool_call>"


def test_llama3_json() -> None:
    parser = tool_parser("llama3_json")
    content, calls = parser.parse(
        '<|python_tag|>{"name": "a", "parameters": {"x": 2}}; {"name": "b", "parameters": {}}'
    )
    assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [("a", {"x": 2}), ("b", {})]
    assert parser.parse("The answer is 4.") == ("The answer is 4.", [])
    assert parser.parse('{"name": "a", "parameters": {}} trailing')[1] == []


def test_qwen3_reasoning() -> None:
    parser = reasoning_parser("qwen3")
    assert parser.split("<think>\nhmm\n</think>\n\nanswer") == ("hmm", "answer")
    assert parser.split("no thinking") == (None, "no thinking")
    assert parser.split("<think>cut off") == (None, "<think>cut off")
    assert reasoning_parser("none").split("<think>a</think>b") == (None, "<think>a</think>b")


@pytest.mark.parametrize("field", ["tool_parser", "reasoning_parser", "splice_policy"])
def test_unknown_names_fail_at_start_up(field: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="unknown"):
        create_app(ProxySettings(**{field: "nope"}), f"sqlite:///{tmp_path / 's.db'}", tmp_path)


def test_ids_a_client_sees_differ_across_forked_workers_and_a_seeded_random() -> None:
    """Answer and tool-call ids come from a generator of their own, re-seeded in each forked worker."""
    import os
    import random

    from rollwire.proxy.parsers.base import new_id

    random.seed(0)
    first = new_id("call_")
    random.seed(0)
    assert new_id("call_") != first and len(first) == len("call_") + 24
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker forked after the parent drew ids
        os.write(write, new_id("").encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 64).decode() != new_id("")
