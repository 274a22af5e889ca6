"""Parser registry by name: the proxy resolves its configured parsers at start-up (an unknown name fails there)."""

from __future__ import annotations

from collections.abc import Callable

from rollwire.errors import InvalidRequest
from rollwire.proxy.parsers.base import ReasoningParser, ToolParser
from rollwire.proxy.parsers.hermes import HermesToolParser
from rollwire.proxy.parsers.llama3_json import Llama3JsonToolParser
from rollwire.proxy.parsers.qwen3 import NoReasoningParser, Qwen3ReasoningParser

TOOL_PARSERS: dict[str, Callable[[], ToolParser]] = {
    "hermes": HermesToolParser,
    "qwen3": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
}
REASONING_PARSERS: dict[str, Callable[[], ReasoningParser]] = {
    "qwen3": Qwen3ReasoningParser,
    "deepseek_r1": Qwen3ReasoningParser,
    "none": NoReasoningParser,
}


def tool_parser(name: str) -> ToolParser:
    if name not in TOOL_PARSERS:
        raise InvalidRequest(f"unknown tool parser {name!r}; known: {', '.join(sorted(TOOL_PARSERS))}")
    return TOOL_PARSERS[name]()


def reasoning_parser(name: str) -> ReasoningParser:
    if name not in REASONING_PARSERS:
        raise InvalidRequest(f"unknown reasoning parser {name!r}; known: {', '.join(sorted(REASONING_PARSERS))}")
    return REASONING_PARSERS[name]()


__all__ = ["REASONING_PARSERS", "TOOL_PARSERS", "reasoning_parser", "tool_parser"]
