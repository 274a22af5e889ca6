"""Responses tools: what the template sees, and how calls of them go back.

Kinds the proxy serves:
- ``function``: shown as is.
- ``namespace`` (Codex sends one MCP server's tools as ``{"type": "namespace", "name": "mcp__rollwire", "tools":
  [...]}``): a chat template only knows a flat list of functions, so each tool inside becomes one tool named
  ``<namespace>__<tool>`` (Codex's own canonical flat name: the namespace's trailing and the tool's leading
  underscores trimmed around the ``__``). The name depends only on the pair, so the same request always renders
  the same tools and a call carried back in history (with ``namespace``) maps to the name the model sampled;
  the answer maps the flat name back to namespace + tool. The namespace ``functions`` is the API's default
  one (the name every plain function already lives in): its tools keep their bare names and their calls go
  back without a namespace.
- ``custom`` (freeform: the model writes raw text, optionally under a grammar): shown as a function with one
  string parameter ``input`` (the grammar, if any, quoted in its description); a sampled call goes back as a
  ``custom_tool_call`` whose ``input`` is that string.

Tools may also arrive in ``additional_tools`` input items (Codex's default model sends all of its tools that
way and none at the top level): they join the same list.

Hosted tools (``web_search``, ``file_search``, ``code_interpreter``, ``image_generation``, ``computer_use``,
``mcp``, ...) run on OpenAI's servers, which the proxy is not: they are left out of what the model sees and
listed, with where they stood, as ``left_out_tools`` on the answer (so on the recorded call), never refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.proxy.dialects.fields import OPENAI_TOOL_NAME, checked_schema

NAMESPACE_JOIN = "__"
DEFAULT_NAMESPACE = "functions"
"""The Responses API's own namespace of plain functions: a tool in it is the bare-named tool."""
CUSTOM_INPUT = "input"
"""The one string parameter a freeform tool is shown with."""


def flat_name(namespace: str | None, name: str) -> str:
    """The one tool name the template shows for ``name`` inside ``namespace``."""
    if namespace is None or namespace == DEFAULT_NAMESPACE:
        return name
    return f"{namespace.rstrip('_')}{NAMESPACE_JOIN}{name.lstrip('_')}"


@dataclass(frozen=True, slots=True)
class ResponsesTools:
    functions: tuple[dict[str, Any], ...] = ()
    """What the template sees, in the neutral ``{"type": "function", "function": {...}}`` shape."""
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Flat name -> (namespace, tool name as the client declared it), for non-default namespaces."""
    custom: frozenset[str] = frozenset()
    """Flat names of freeform tools: their calls go back as ``custom_tool_call``."""
    left_out: tuple[dict[str, str], ...] = ()
    """Hosted tools not shown to the model: ``{"type": ..., "at": <where in the request>}``."""


def _kind(tool: Any) -> Any:
    return tool.get("type") if isinstance(tool, dict) else None


def _custom_schema(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """A freeform tool as the template shows it: one string ``input``, its grammar (if any) described."""
    fmt = tool.get("format") or {"type": "text"}
    if not isinstance(fmt, dict) or fmt.get("type", "text") not in ("text", "grammar"):
        raise InvalidRequest(f"{where}.format must be text or grammar", param=f"{where}.format")
    about = "Raw text input (not JSON)."
    if fmt.get("type") == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition")
        if not isinstance(syntax, str) or not isinstance(definition, str):
            raise InvalidRequest(f"{where}.format needs syntax and definition strings", param=f"{where}.format")
        about = f"Raw text input (not JSON) following this {syntax} grammar:\n{definition.strip()}"
    prop = {"type": "string", "description": about}
    return {"type": "object", "properties": {CUSTOM_INPUT: prop}, "required": [CUSTOM_INPUT]}


class _Flattener:
    """Collects the template's functions; each name it shows must stand for one tool, or a call could not be
    mapped back."""

    def __init__(self) -> None:
        self.functions: list[dict[str, Any]] = []
        self.namespaced: dict[str, tuple[str, str]] = {}
        self.custom: set[str] = set()
        self.left_out: list[dict[str, str]] = []
        self.given_by: dict[str, str] = {}

    def tool(self, tool: Any, where: str, namespace: str | None = None) -> None:
        kind = _kind(tool)
        if kind in ("function", "custom"):
            self.function(tool, where, namespace, custom=kind == "custom")
        elif kind == "namespace" and namespace is None:
            self.namespace(tool, where)
        elif isinstance(kind, str) and kind != "namespace":
            self.left_out.append({"type": kind, "at": where})
        else:
            raise InvalidRequest(f"{where}.type {kind!r} is not a tool type", param=f"{where}.type")

    def function(self, tool: dict[str, Any], where: str, namespace: str | None, custom: bool) -> None:
        default = {"type": "object", "properties": {}}
        schema = _custom_schema(tool, where) if custom else tool.get("parameters") or default
        params = checked_schema(tool.get("name"), schema, f"{where}.name", f"{where}.parameters")
        name = flat_name(namespace, tool["name"])
        if name in self.given_by:
            raise InvalidRequest(
                f"{where}.name: the tool name {name!r} is also given by {self.given_by[name]}", param=f"{where}.name"
            )
        self.given_by[name] = where
        if name != tool["name"] and namespace is not None:
            self.namespaced[name] = (namespace, tool["name"])
        if custom:
            self.custom.add(name)
        fn = {"name": name, "description": str(tool.get("description") or ""), "parameters": params}
        self.functions.append({"type": "function", "function": fn})

    def namespace(self, tool: dict[str, Any], where: str) -> None:
        namespace, inner = tool.get("name"), tool.get("tools")
        if not isinstance(namespace, str) or not OPENAI_TOOL_NAME.match(namespace):
            raise InvalidRequest(f"{where}.name must match {OPENAI_TOOL_NAME.pattern}", param=f"{where}.name")
        if not isinstance(inner, list):
            raise InvalidRequest(f"{where}.tools must be a list of tools", param=f"{where}.tools")
        for j, fn in enumerate(inner):
            self.tool(fn, f"{where}.tools[{j}]", namespace)

    def tools(self, raw: Any, where: str) -> None:
        if not isinstance(raw, list):
            raise InvalidRequest(f"{where} must be a list of tools", param=where)
        for i, tool in enumerate(raw):
            self.tool(tool, f"{where}[{i}]")


def additional_tools(items: Any) -> list[tuple[str, Any]]:
    """(where, tools) of each ``additional_tools`` item in ``input``."""
    if not isinstance(items, list):
        return []
    return [
        (f"input[{i}].tools", item.get("tools"))
        for i, item in enumerate(items)
        if isinstance(item, dict) and item.get("type") == "additional_tools"
    ]


def parse_tools(body: dict[str, Any]) -> ResponsesTools:
    """The request's ``tools`` and its ``additional_tools`` items, flattened for the template."""
    flat = _Flattener()
    if body.get("tools") is not None:
        flat.tools(body["tools"], "tools")
    for where, tools in additional_tools(body.get("input")):
        flat.tools(tools, where)
    return ResponsesTools(tuple(flat.functions), flat.namespaced, frozenset(flat.custom), tuple(flat.left_out))


__all__ = [
    "CUSTOM_INPUT",
    "DEFAULT_NAMESPACE",
    "NAMESPACE_JOIN",
    "ResponsesTools",
    "additional_tools",
    "flat_name",
    "parse_tools",
]
