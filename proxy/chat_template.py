"""A chat template rendered as transformers' ``apply_chat_template(tokenize=False)`` renders it, without converting
the tool definitions again on every call.

Before each render transformers rebuilds everything a template sees out of plain JSON types (a safety step of its
sandbox), the tools included. A harness sends the same 10-30k characters of tool schemas with every call, and the
proxy renders every call's tail with them: at 20 tools that walk was two thirds of a tail render (~0.3 of
~0.45 ms). Here the converted tools are kept for the few tool sets in use (transformers renders in an immutable
sandbox, so no template can change them between renders), and the rest of the render is transformers' own steps,
in its order. Templates print each tool with the ``tojson`` filter on every render, which then was half of what
was left; the template is compiled here in an environment of its own whose ``tojson`` remembers the text of
each part of a kept tool set (the same object and options: the same text).

The messages the proxy renders are its own (``Message.to_template``), plain JSON values already: for them the
rebuild is skipped (``render(plain=True)``). And the environment's attribute lookup answers a dict's item without
first raising the exception the sandbox's lookup raises (``_dict_first``). Together they halve the render of a
long conversation.

Those steps are private to transformers. Where one is missing (another release), or where a probe render at
start-up differs from ``apply_chat_template``'s, every render goes through ``apply_chat_template`` itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from operator import is_
from typing import Any

from rollwire.compact_json import json_bytes
from rollwire.text_memo import find_recent

logger = logging.getLogger(__name__)

TOOL_SETS = 8
"""Converted tool sets kept (most recently used first): a harness sends one, a proxy serves a few harnesses."""


@dataclass(frozen=True, slots=True)
class _ToolSet:
    key: bytes
    """The tools as sent, as JSON (bytes: never decoded, see ``Conversation.tools_key``)."""
    converted: Any
    parts: list[Any]
    """Every dict and list inside ``converted`` (and itself): what ``tojson`` may remember text for."""
    source: list[Any]
    """The tools as given: a list of the very same objects is these tools without serializing them again (a
    proxy hands every call of a harness the tool objects it parsed once, ``ParsedMessages.tools``)."""


def _parts(value: Any) -> list[Any]:
    found: list[Any] = []
    todo: list[Any] = [value]
    while todo:
        node = todo.pop()
        if type(node) is dict:
            found.append(node)
            todo.extend(node.values())
        elif type(node) is list or type(node) is tuple:
            found.append(node)
            todo.extend(node)
    return found


@dataclass(frozen=True, slots=True)
class _Steps:
    """transformers' own render steps (``transformers.utils.chat_template_utils``)."""

    normalize: Callable[[Any], list[dict[str, Any]]]
    plain: Callable[[Any], Any]
    alias_reasoning: Callable[[Any], Any]
    build: Callable[[str], Any]
    """A template compiled in a new environment of transformers' making (its filters and globals)."""


def _steps() -> _Steps | None:
    try:
        from transformers.utils import chat_template_utils as utils

        return _Steps(
            utils._normalize_chat_messages,
            utils._plain_template_data,
            utils._alias_reasoning_fields,
            utils._cached_compile_jinja_template,  # despite its name, the uncached builder
        )
    except (ImportError, AttributeError):
        return None


_PROBE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
_PROBE: list[dict[str, Any]] = [
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


_DICT_ATTRIBUTES = frozenset(dir(dict))
"""Every name ``getattr`` finds on a ``dict`` (its type's and ``object``'s: a dict has no instance attributes)."""


def _dict_first(environment: Any) -> Callable[[Any, str], Any]:
    """``environment.getattr`` (what ``message.role`` runs), answering a plain dict's item without an exception.

    The sandbox asks for a Python attribute first and takes the item when that raises ``AttributeError``. For a
    ``dict`` and a name that is none of ``dict``'s own attributes, that is always the item (or undefined), so it
    is taken at once: the same value, or the same undefined. Templates read ``message.role``, ``message.content``
    and the like a few times a message; raising was about a third of rendering a long conversation (50 turns:
    1.35 ms to 0.93 with the tiny model's template, 2.43 to 1.88 with Qwen3's). Any other object, or a name
    ``dict`` has, goes through the sandbox's own ``getattr``.
    """
    sandboxed = environment.getattr
    undefined = environment.undefined

    def getattr(obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return undefined(obj=obj, name=attribute)
        return sandboxed(obj, attribute)

    return getattr


class ChatTemplate:
    """``render(messages, tools, add_generation_prompt, **template_variables)`` -> the prompt text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._steps = _steps()
        self._tools: list[_ToolSet] = []
        """Most recently used first."""
        self._tools_lock = threading.Lock()  # long prompts render on worker threads
        self._kept: dict[int, Any] = {}
        """id -> each part of a kept tool set (held here, so no other object has its id meanwhile)."""
        self._json: dict[tuple[Any, ...], tuple[Any, str]] = {}
        """(id, tojson's options) -> (the part, its text): the part is compared by identity on every hit."""
        self._compiled: dict[str, Any] = {}
        if self._steps is not None and not self._agrees():
            logger.info("chat template: rendering through apply_chat_template (the quick path differs here)")
            self._steps = None

    @property
    def quick(self) -> bool:
        """Whether renders skip converting the tools again (False: each goes through ``apply_chat_template``)."""
        return self._steps is not None

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[Any],
        add_generation_prompt: bool,
        *,
        plain: bool = False,
        **kwargs: Any,
    ) -> str:
        """``plain``: the caller vouches that ``messages`` hold plain JSON values only (dicts, lists, str, numbers,
        bools) and no None field, as ``Message.to_template`` builds them. transformers' conversion of the
        messages (drop None fields, rebuild everything out of plain types) is then a deep copy that changes
        nothing, and is skipped: half the time of rendering a long conversation (50 turns: 2.05 ms to 1.35)."""
        if self._steps is None:
            return self._reference(messages, tools, add_generation_prompt, **kwargs)
        return self._quick(self._steps, messages, tools, add_generation_prompt, plain=plain, **kwargs)

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
        *,
        plain: bool = False,
        **kwargs: Any,
    ) -> str:
        """``apply_chat_template``'s steps for one conversation, text out, no documents, the tools converted once."""
        template = self.tokenizer.get_chat_template(None, tools or None)
        chat = messages if plain else steps.plain(steps.normalize(messages))
        variables = steps.plain({**self.tokenizer.special_tokens_map, **kwargs})
        chat = steps.alias_reasoning(chat)
        compiled = self._compiled.get(template) or self._compile(steps, template)
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
        with self._tools_lock:
            same = find_recent(self._tools, lambda k: len(k.source) == len(tools) and all(map(is_, k.source, tools)))
        if same is not None:
            return same.converted
        key = json_bytes(tools)
        with self._tools_lock:
            alike = find_recent(self._tools, lambda k: k.key == key)
        if alike is not None:
            return alike.converted
        converted = steps.plain(tools)
        added = _ToolSet(key, converted, _parts(converted), list(tools))
        with self._tools_lock:
            self._tools.insert(0, added)
            self._kept.update((id(part), part) for part in added.parts)
            for dropped in self._tools[TOOL_SETS:]:
                for part in dropped.parts:
                    self._kept.pop(id(part), None)
            if len(self._tools) > TOOL_SETS:
                del self._tools[TOOL_SETS:]
                self._json = {k: v for k, v in self._json.items() if k[0] in self._kept}
        return converted

    def _compile(self, steps: _Steps, template: str) -> Any:
        """``template`` in an environment of its own, whose ``tojson`` remembers kept tools' text."""
        compiled = steps.build(template)
        filters = compiled.environment.filters
        filters["tojson"] = self._remembering(filters["tojson"])
        compiled.environment.getattr = _dict_first(compiled.environment)
        if len(self._compiled) >= 4:  # a tokenizer has one or two templates (default, tool use)
            self._compiled.clear()
        self._compiled[template] = compiled
        return compiled

    def _remembering(self, plain: Callable[..., str]) -> Callable[..., str]:
        """transformers' ``tojson``, remembering the text of each part of a kept tool set."""

        def tojson(
            x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
        ) -> str:
            if id(x) not in self._kept:
                return plain(x, ensure_ascii, indent, separators, sort_keys)
            key = (id(x), ensure_ascii, indent, separators, sort_keys)
            try:
                hit = self._json.get(key)
            except TypeError:  # options that cannot be a key (separators as a list)
                return plain(x, ensure_ascii, indent, separators, sort_keys)
            if hit is not None and hit[0] is x:
                return hit[1]
            text = plain(x, ensure_ascii, indent, separators, sort_keys)
            self._json[key] = (x, text)
            return text

        return tojson

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
                for plain in (False, True):  # the probes are plain JSON: either way, the same text
                    if self._probe(messages, tools, generation, plain, kwargs) != expected:
                        return False
        return True

    def _probe(
        self, messages: list[Any], tools: list[Any], generation: bool, plain: bool, kwargs: dict[str, Any]
    ) -> str | type[Exception]:
        """The quick path's text (its second render: the kept tools), or the class of what it raised."""
        assert self._steps is not None
        try:
            self._quick(self._steps, messages, tools, generation, plain=plain, **kwargs)
            return self._quick(self._steps, messages, tools, generation, plain=plain, **kwargs)
        except Exception as exc:  # noqa: BLE001  (compared with what apply_chat_template raised)
            return type(exc)


__all__ = ["TOOL_SETS", "ChatTemplate"]
