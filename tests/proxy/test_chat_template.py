"""The chat template's quick path (tools converted once per tool set) must render exactly what transformers'
``apply_chat_template(tokenize=False)`` renders: for the tiny model's template and real ones shipped with trl,
with and without tools, reasoning, tool calls and template switches. Where the quick path cannot be trusted
(a step missing, a probe render that differs), every render goes through ``apply_chat_template``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rollwire.proxy import chat_template
from rollwire.proxy.chat_template import TOOL_SETS, ChatTemplate
from rollwire.proxy.render import Renderer
from rollwire.tokenizers import qwen_tokenizer, trl_chat_template


def _tool(name: str, params: int = 2) -> dict[str, Any]:
    properties = {
        f"p{i}": {"type": "string", "description": f"parameter {i} of {name}, é ü 文件"} for i in range(params)
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} does one thing well.",
            "parameters": {"type": "object", "properties": properties, "required": ["p0"]},
        },
    }


TOOLS = [_tool("run_shell"), _tool("read_file", 4), _tool("write_file", 3)]

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "List the files."}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Start with ls.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "run_shell", "arguments": {"p0": "ls -la"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "README.md\nsrc\n"},
        {"role": "assistant", "content": "Two entries."},
        {"role": "user", "content": "Now read README.md, then the tests."},
    ],
]


def _cases() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], bool]]:
    cases = []
    for messages in CONVERSATIONS:
        for tools in ([], TOOLS):
            for kwargs in ({}, {"enable_thinking": False}):
                for generation in (True, False):
                    cases.append((messages, tools, kwargs, generation))
    return cases


def _same_renders(template: ChatTemplate) -> int:
    """How many of the cases rendered (the rest were refused by both paths alike)."""
    rendered = 0
    for messages, tools, kwargs, generation in _cases():
        try:
            expected = template.tokenizer.apply_chat_template(
                copy.deepcopy(messages), tools=copy.deepcopy(tools) or None, tokenize=False,
                add_generation_prompt=generation, **kwargs,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001  (a template may refuse a shape: then the quick path must too)
            with pytest.raises(type(exc)):
                template.render(copy.deepcopy(messages), copy.deepcopy(tools), generation, **kwargs)
            continue
        for plain in (False, True):  # the messages are plain JSON: vouching for it changes nothing
            for _ in range(2):  # converting the tools, then the kept ones
                text = template.render(copy.deepcopy(messages), copy.deepcopy(tools), generation, plain=plain, **kwargs)
                assert text == expected
        rendered += 1
    return rendered


def test_the_tiny_models_template_renders_as_transformers_does(tiny_model_dir: Path) -> None:
    template = Renderer.from_folder(tiny_model_dir).template
    assert template.quick
    assert _same_renders(template) == len(_cases())
    assert template._json  # each tool's text was remembered, and rendered the same again


@pytest.mark.parametrize("name", ["qwen3", "qwen2_5", "llama3_1", "deepseekv3", "gptoss"])
def test_real_templates_render_as_transformers_does(qwen_tokenizer_files: Path, name: str) -> None:
    tokenizer = qwen_tokenizer(None)
    tokenizer.chat_template = trl_chat_template(name)
    template = ChatTemplate(tokenizer)
    assert template.quick
    assert _same_renders(template) >= 16  # most shapes render (a template may refuse some: deepseekv3 does)


def test_tools_in_another_key_order_are_another_text(tiny_model_dir: Path) -> None:
    """Templates print a tool's keys in the order sent, so a reordered tool set is kept apart, not shared."""
    template = Renderer.from_folder(tiny_model_dir).template
    messages = CONVERSATIONS[1]
    reordered = [{"function": t["function"], "type": t["type"]} for t in TOOLS]
    first = template.render(messages, TOOLS, True)
    second = template.render(messages, reordered, True)
    assert second == template.tokenizer.apply_chat_template(
        messages, tools=reordered, tokenize=False, add_generation_prompt=True
    )
    assert first != second


def test_only_a_few_tool_sets_are_kept(tiny_model_dir: Path) -> None:
    template = Renderer.from_folder(tiny_model_dir).template
    for i in range(TOOL_SETS + 5):
        tools = [_tool(f"tool_{i}")]
        text = template.render(CONVERSATIONS[1], tools, True)
        assert f"tool_{i}" in text
    kept = [json.loads(t.key)[0]["function"]["name"] for t in template._tools]
    assert kept == [f"tool_{i}" for i in range(TOOL_SETS + 4, 4, -1)]  # the oldest went first
    assert len(template._kept) == sum(len(t.parts) for t in template._tools)  # and their parts with them


def test_without_transformers_steps_every_render_goes_through_apply_chat_template(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chat_template, "_steps", lambda: None)
    template = Renderer.from_folder(tiny_model_dir).template
    assert not template.quick
    _same_renders(template)


def test_a_probe_that_renders_differently_turns_the_quick_path_off(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = chat_template._steps()
    assert real is not None

    class Skewed:
        def __init__(self, compiled: Any) -> None:
            self.compiled = compiled
            self.environment = compiled.environment

        def render(self, **variables: Any) -> str:
            return self.compiled.render(**variables) + " "

    skewed = chat_template._Steps(real.normalize, real.plain, real.alias_reasoning, lambda t: Skewed(real.build(t)))
    monkeypatch.setattr(chat_template, "_steps", lambda: skewed)
    template = Renderer.from_folder(tiny_model_dir).template
    assert not template.quick
    _same_renders(template)


ATTRIBUTES_TEMPLATE = (
    "{%- for m in messages %}"
    "{{ m.role }}|{{ m.content.upper() }}|{{ m.missing is defined }}|{{ m.items is defined }}|"
    "{{ m.get('name', '-') }}|{{ m.keys() | list | length }}|{{ m.__class__ is defined }}|{{ m.pop is defined }};"
    "{%- endfor %}"
)


def test_attribute_lookups_on_messages_answer_as_the_sandbox_does(qwen_tokenizer_files: Path) -> None:
    """``message.role`` is the item; a name ``dict`` has (``items``, ``get``) is the method, a private or
    mutating one is refused; a missing one is undefined; a key named like a method does not shadow it."""
    tokenizer = qwen_tokenizer(None)
    tokenizer.chat_template = ATTRIBUTES_TEMPLATE
    template = ChatTemplate(tokenizer)
    assert template.quick
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "list the files", "name": "ada"},
        {"role": "assistant", "content": "ok", "items": "a key named like a method", "pop": 1},
    ]
    expected = tokenizer.apply_chat_template(copy.deepcopy(messages), tokenize=False)
    assert expected == "user|LIST THE FILES|False|True|ada|3|False|False;assistant|OK|False|True|-|4|False|False;"
    for plain in (False, True):
        assert template.render(copy.deepcopy(messages), [], False, plain=plain) == expected
