"""Structured output enforced by the engine, through the proxy: a JSON schema asked for in each dialect's own
field comes back schema-valid from the bundled engine (llguidance, ``engine/grammar.py``) and from real vLLM
(CPU build), for a schema the tiny model breaks when unconstrained (same prompt, same seed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.proxy.conftest import Proxy

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 99}, "city": {"enum": ["Paris", "Rome"]}},
    "required": ["answer", "city"],
    "additionalProperties": False,
}
PROMPT = "Where is the Eiffel tower, and how tall is it in metres? Answer as JSON."


def _valid(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def _chat(rollout: dict[str, Any], model: str, constrained: bool) -> str:
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    extra: dict[str, Any] = {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}
    out = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=40, temperature=1.0, seed=3,
        **(extra if constrained else {}),
    )  # fmt: skip
    return out.choices[0].message.content or ""


def test_a_schema_is_enforced_where_the_unconstrained_model_breaks_it(
    start_proxy: Callable[..., Proxy], any_engine_url: str
) -> None:
    model = str(httpx.get(f"{any_engine_url}/v1/models", timeout=30).json()["data"][0]["id"])
    proxy = start_proxy(any_engine_url)
    free = _chat(proxy.new_rollout(), model, constrained=False)
    assert not _valid(free), free  # the tiny model does not write this JSON of itself
    answer = _chat(proxy.new_rollout(), model, constrained=True)
    assert _valid(answer), answer


@pytest.mark.parametrize("dialect", ["responses", "messages"])
def test_the_other_dialects_fields_reach_the_bundled_engine(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str, dialect: str
) -> None:
    rollout = start_proxy(engine_url).new_rollout()
    if dialect == "messages":
        client = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
        message = client.messages.create(
            model=served_model, max_tokens=40, messages=[{"role": "user", "content": PROMPT}],
            output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
        )  # fmt: skip
        text = "".join(block.text for block in message.content if block.type == "text")
    else:
        response = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0).responses.create(
            model=served_model, max_output_tokens=40, input=PROMPT,
            text={"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}},
        )  # fmt: skip
        text = response.output_text
    assert _valid(text), text


def test_a_schema_the_engine_cannot_compile_is_a_400_naming_the_field(engine_url: str, served_model: str) -> None:
    body = {"model": served_model, "prompt": [1, 2, 3], "max_tokens": 4, "structured_outputs": {"json": {"type": 7}}}
    reply = httpx.post(f"{engine_url}/v1/completions", json=body, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "structured_outputs", reply.text
