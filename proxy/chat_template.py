"""A chat template rendered as transformers' ``apply_chat_template(tokenize=False)`` renders it, without converting
the tool definitions again on every call.

Before each render transformers rebuilds everything a template sees out of plain JSON types (a safety step of its
sandbox), the tools included. A harness sends the same 10-30k characters of tool schemas with every call, and the
proxy renders every call's tail with them: at 20 tools that walk was two thirds of a tail render (~0.3 of
~0.45 ms). Here the converted tools are kept for the few tool sets in use (transformers renders in an immutable
sandbox, so no template can change them between renders), and the rest of the render is transformers' own steps,
in its order.

Those steps are private to transformers. Where one is missing (another release), or where a probe render at
start-up differs from ``apply_chat_template``'s, every render goes through ``apply_chat_template`` itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rollwire.compact_json import json_text

logger = logging.getLogger(__name__)

TOOL_SETS = 8
"""Converted tool sets kept (most recently used first): a harness sends one, a proxy serves a few harnesses."""


@dataclass(frozen=True, slots=True)
class _Steps:
    """transformers' own render steps (``transformers.utils.chat_template_utils``)."""

    normalize: Callable[[Any], list[dict[str, Any]]]
    plain: Callable[[Any], Any]
    alias_reasoning: Callable[[Any], Any]
    compile: Callable[[str], Any]


def _steps() -> _Steps | None:
    try:
        from transformers.utils import chat_template_utils as utils

        return _Steps(
            utils._normalize_chat_messages,
            utils._plain_template_data,
            utils._alias_reasoning_fields,
            utils._compile_jinja_template,
        )
    except (ImportError, AttributeError):
        return None


_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
_PROBE = [
    {"role": "system", "content": "You are careful."},
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Start with ls.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run_shell", "arguments": {"command": "ls"}}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "README.md"},
]


class ChatTemplate:
    """``render(messages, tools, add_generation_prompt, **template_variables)`` -> the prompt text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._steps = _steps()
        self._tools: list[tuple[str, Any]] = []
        """(the tools as sent, as JSON text; converted), most recently used first."""
        self._tools_lock = threading.Lock()  # long prompts render on worker threads
        if self._steps is not None and not self._agrees():
            logger.info("chat template: rendering through apply_chat_template (the quick path differs here)")
            self._steps = None

    @property
    def quick(self) -> bool:
        """Whether renders skip converting the tools again (False: each goes through ``apply_chat_template``)."""
        return self._steps is not None

    def render(
        self, messages: list[dict[str, Any]], tools: list[Any], add_generation_prompt: bool, **kwargs: Any
    ) -> str:
        if self._steps is None:
            return self._reference(messages, tools, add_generation_prompt, **kwargs)
        return self._quick(self._steps, messages, tools, add_generation_prompt, **kwargs)

    def _reference(
        self, messages: list[dict[str, Any]], tools: list[Any], add_generation_prompt: bool, **kwargs: Any
    ) -> str:
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
        return str(text)

    def _quick(
        self,
        steps: _Steps,
        messages: list[dict[str, Any]],
        tools: list[Any],
        add_generation_prompt: bool,
        **kwargs: Any,
    ) -> str:
        """``apply_chat_template``'s steps for one conversation, text out, no documents, the tools converted once."""
        template = self.tokenizer.get_chat_template(None, tools or None)
        chat = steps.normalize(messages)
        variables = steps.plain({**self.tokenizer.special_tokens_map, **kwargs})
        chat = steps.alias_reasoning(steps.plain(chat))
        compiled = steps.compile(template)
        return str(
            compiled.render(
                messages=chat,
                tools=self._converted(steps, tools) if tools else None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        )

    def _converted(self, steps: _Steps, tools: list[Any]) -> Any:
        """``tools`` as transformers converts them, kept by their JSON text in the order sent (templates print
        the keys in that order, so differently ordered tools are different text)."""
        key = json_text(tools)
        with self._tools_lock:
            for i, (known, converted) in enumerate(self._tools):
                if known == key:
                    if i:
                        self._tools.insert(0, self._tools.pop(i))
                    return converted
        converted = steps.plain(tools)
        with self._tools_lock:
            self._tools.insert(0, (key, converted))
            del self._tools[TOOL_SETS:]
        return converted

    def _agrees(self) -> bool:
        """The quick path renders the probe conversations as ``apply_chat_template`` does (or fails as it does)."""
        assert self._steps is not None
        cases = [(_PROBE, _PROBE_TOOLS, {}), (_PROBE, [], {}), (_PROBE[:2], _PROBE_TOOLS, {"enable_thinking": False})]
        for messages, tools, kwargs in cases:
            for generation in (True, False):
                try:
                    expected: str | type[Exception] = self._reference(messages, tools, generation, **kwargs)
                except Exception as exc:  # noqa: BLE001  (a template may refuse the probe: then both must)
                    expected = type(exc)
                try:
                    found: str | type[Exception] = self._quick(self._steps, messages, tools, generation, **kwargs)
                    found = self._quick(self._steps, messages, tools, generation, **kwargs)  # the kept tools, too
                except Exception as exc:  # noqa: BLE001
                    found = type(exc)
                if found != expected:
                    return False
        return True


__all__ = ["TOOL_SETS", "ChatTemplate"]
