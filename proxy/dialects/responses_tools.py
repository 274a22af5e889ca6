"""Responses ``tools``: function tools, and ``namespace`` tools (Codex sends all of one MCP server's tools as
one ``{"type": "namespace", "name": "mcp__rollwire", "tools": [functions...]}``).

A chat template only knows a flat list of functions, so each function inside a namespace becomes one tool
named ``<namespace>__<tool>`` (Codex's own canonical flat name: the namespace's trailing and the tool's
leading underscores trimmed around the ``__``). The name depends only on the pair, so the same request
always renders the same tools and a call carried back in history (``function_call`` with ``namespace``)
maps to the name the model sampled; the answer maps the flat name back to namespace + tool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollwire.proxy.dialects.fields import OPENAI_TOOL_NAME, checked_schema

from rollwire.errors import InvalidRequest

NAMESPACE_JOIN = "__"


def flat_name(namespace: str, name: str) -> str:
    """The one tool name the template shows for ``name`` inside ``namespace``."""
    return f"{namespace.rstrip('_')}{NAMESPACE_JOIN}{name.lstrip('_')}"


@dataclass(frozen=True, slots=True)
class ResponsesTools:
    functions: tuple[dict[str, Any], ...] = ()
    """What the template sees, in the neutral ``{"type": "function", "function": {...}}`` shape."""
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Flat name -> (namespace, tool name as the client declared it)."""


def _kind(tool: Any) -> Any:
    return tool.get("type") if isinstance(tool, dict) else None


class _Flattener:
    """Collects the template's functions; each name it shows must stand for one tool, or a call could not be
    mapped back."""

    def __init__(self) -> None:
        self.functions: list[dict[str, Any]] = []
        self.namespaced: dict[str, tuple[str, str]] = {}
        self.given_by: dict[str, str] = {}

    def function(self, tool: dict[str, Any], where: str, namespace: str | None = None) -> None:
        params = checked_schema(
            tool.get("name"), tool.get("parameters") or {"type": "object", "properties": {}},
            f"{where}.name", f"{where}.parameters",
        )  # fmt: skip
        name = tool["name"] if namespace is None else flat_name(namespace, tool["name"])
        if name in self.given_by:
            raise InvalidRequest(
                f"{where}.name: the tool name {name!r} is also given by {self.given_by[name]}", param=f"{where}.name"
            )
        self.given_by[name] = where
        if namespace is not None:
            self.namespaced[name] = (namespace, tool["name"])
        fn = {"name": name, "description": str(tool.get("description") or ""), "parameters": params}
        self.functions.append({"type": "function", "function": fn})

    def namespace(self, tool: dict[str, Any], where: str) -> None:
        namespace, inner = tool.get("name"), tool.get("tools")
        if not isinstance(namespace, str) or not OPENAI_TOOL_NAME.match(namespace):
            raise InvalidRequest(f"{where}.name must match {OPENAI_TOOL_NAME.pattern}", param=f"{where}.name")
        if not isinstance(inner, list):
            raise InvalidRequest(f"{where}.tools must be a list of function tools", param=f"{where}.tools")
        for j, fn in enumerate(inner):
            at = f"{where}.tools[{j}]"
            if _kind(fn) != "function":
                raise InvalidRequest(f"{at}.type {_kind(fn)!r} is not supported (only 'function')", param=f"{at}.type")
            self.function(fn, at, namespace)


def parse_tools(raw: Any) -> ResponsesTools:
    """Function and namespace tools flattened for the template; any other type is refused by name."""
    if raw is None:
        return ResponsesTools()
    if not isinstance(raw, list):
        raise InvalidRequest("tools must be a list of function or namespace tools", param="tools")
    flat = _Flattener()
    for i, tool in enumerate(raw):
        kind = _kind(tool)
        if kind == "function":
            flat.function(tool, f"tools[{i}]")
        elif kind == "namespace":
            flat.namespace(tool, f"tools[{i}]")
        else:
            raise InvalidRequest(
                f"tools[{i}].type {kind!r} is not supported (only 'function' and 'namespace')",
                param=f"tools[{i}].type",
            )
    return ResponsesTools(tuple(flat.functions), flat.namespaced)


__all__ = ["NAMESPACE_JOIN", "ResponsesTools", "flat_name", "parse_tools"]
