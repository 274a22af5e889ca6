"""Must-show 3: request shapes the harnesses can send that the proxy cannot honour get a 4xx naming the
field, in each dialect's own error shape (the official clients raise their typed errors), and nothing is
recorded or sent to the engine. Also: harness model names map through the alias table, both recorded."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
from sqlmodel import select

from rollwire.store import ModelCall, open_engine, session_scope
from tests.proxy.dialects.conftest import Stack

FN: Any = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
CUSTOM: Any = {
    "type": "custom",
    "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "x"},
}
NAMESPACE: Any = {"type": "namespace", "name": "multi_agent_v1", "description": "", "tools": [FN, CUSTOM]}
USER: Any = {"role": "user", "content": "hi"}
RESPONSES_CASES: list[tuple[dict[str, Any], str]] = [  # hosted tools (web_search, ...) are left out, not refused
    ({"input": "hi", "tools": [FN, {"name": "untyped"}]}, "tools[1].type"),
    ({"input": "hi", "tools": [FN, {**CUSTOM, "format": {"type": "regex"}}]}, "tools[1].format"),
    ({"input": "hi", "tools": [FN, {**NAMESPACE, "tools": [NAMESPACE]}]}, "tools[1].tools[0].type"),
    ({"input": [{"type": "additional_tools", "tools": [FN, FN]}, USER]}, "input[0].tools[1].name"),
    ({"input": "hi", "tools": [FN, {**NAMESPACE, "name": "", "tools": [FN]}]}, "tools[1].name"),
    (
        {"input": "hi", "tools": [{**FN, "name": "ns__f"}, {**NAMESPACE, "name": "ns", "tools": [FN]}]},
        "tools[1].tools[0].name",
    ),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "local_shell_call", "call_id": "c"}]}, "input[0].type"),
    ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": "y"}}}, "text.format.schema"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
]


@pytest.mark.parametrize(("fields", "param"), RESPONSES_CASES)
def test_responses_refuses_naming_the_field(dialect_stack: Stack, fields: dict[str, Any], param: str) -> None:
    rollout = dialect_stack.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
    calls = len(dialect_stack.tap.calls)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-5-codex", **fields)
    assert caught.value.param == param and param in caught.value.message
    assert len(dialect_stack.tap.calls) == calls


TOOL: Any = {"name": "f", "input_schema": {"type": "object", "properties": {}}}
MESSAGES_CASES: list[tuple[dict[str, Any], str]] = [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "developer", "content": "x"}]}, "messages[0].role"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "absent"}}, "tool_choice.name"),
    ({"top_k": 0}, "top_k"),
    ({"thinking": {"type": "sometimes"}}, "thinking.type"),
    ({"output_config": {"format": {"type": "xml"}}}, "output_config.format"),
    ({"output_config": {"format": {"type": "json_schema", "schema": []}}}, "output_config.format.schema"),
]


@pytest.mark.parametrize(("fields", "param"), MESSAGES_CASES)
def test_messages_refuses_in_anthropic_shape(dialect_stack: Stack, fields: dict[str, Any], param: str) -> None:
    rollout = dialect_stack.new_rollout()
    client = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="unused", max_retries=0)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], **fields}
    calls = len(dialect_stack.tap.calls)
    with pytest.raises(anthropic.BadRequestError) as caught:
        # extra_body: this SDK version no longer has some of these parameters (top_k), harnesses still send them
        client.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=body.pop("messages"), extra_body=body)
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error" and param in error["error"]["message"]
    assert len(dialect_stack.tap.calls) == calls


def test_messages_needs_max_tokens_and_a_known_key(dialect_stack: Stack) -> None:
    rollout = dialect_stack.new_rollout()
    url = rollout["anthropic_base_url"] + "/v1/messages"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    missing = httpx.post(url, json=body, headers={"anthropic-version": "2023-06-01"}, timeout=30)
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]
    client = anthropic.Anthropic(base_url=dialect_stack.url, api_key="not-a-token", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert isinstance(caught.value.body, dict) and caught.value.body["error"]["type"] == "authentication_error"


def test_token_as_api_key_and_aliases_recorded(dialect_stack: Stack) -> None:
    """x-api-key on /v1/messages and Bearer on /v1/responses; any requested name is served and both are kept."""
    rollout = dialect_stack.new_rollout()
    claude = anthropic.Anthropic(base_url=dialect_stack.url, api_key=rollout["token"], max_retries=0)
    claude.messages.create(model="claude-opus-4-1", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    gpt = openai.OpenAI(base_url=dialect_stack.url + "/v1", api_key=rollout["token"], max_retries=0)
    gpt.responses.create(model="gpt-5-codex", input="hi", max_output_tokens=3)
    with session_scope(open_engine(dialect_stack.store_url)) as session:
        rows = session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout["id"])).all()
        names = sorted((r.dialect, r.requested_model, r.served_model) for r in rows)
    assert names == [
        ("messages", "claude-opus-4-1", dialect_stack.served),
        ("responses", "gpt-5-codex", dialect_stack.served),
    ]
