"""Field checks every dialect shares: bounded numbers, function-tool names and schemas, named tool choices.

Each dialect names its own fields (``tools[0].function.name`` in Chat Completions, ``tools[0].name`` in
Responses and Messages), so the checks take the parameter names and keep one wording for the errors.
"""

from __future__ import annotations

import re
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.proxy.conversation import OutputFormat

OPENAI_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ANTHROPIC_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def requested_model(body: Any) -> str:
    """The model a request names; the body must be a JSON object (every dialect's first check)."""
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model is required", param="model")
    return model


def flag(body: dict[str, Any], name: str) -> bool:
    """``body[name]`` as a boolean (absent or null: false); a string such as "yes" is a 400, never truthy."""
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be a boolean, got {value!r}", param=name)
    return value


def number(body: dict[str, Any], name: str, kind: type, low: float, high: float) -> Any:
    """``body[name]`` as ``kind`` within [low, high]; None when absent; 400 naming the field otherwise."""
    value = body.get(name)
    if value is None:
        return None
    numeric = (int, float) if kind is float else int
    if isinstance(value, bool) or not isinstance(value, numeric) or not low <= value <= high:
        raise InvalidRequest(f"{name} must be a {kind.__name__} in [{low}, {high}], got {value!r}", param=name)
    return kind(value)


def output_format(fmt: Any, param: str) -> OutputFormat | None:
    """A requested output format as vLLM's ``structured_outputs`` (None for plain text). Chat nests the schema as
    ``{"type": "json_schema", "json_schema": {"schema": ...}}``; Responses (``text.format``) and Messages
    (``output_config.format``) put ``schema`` beside ``type``."""
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat({"json_object": True}, param)
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        holder = fmt.get("json_schema", fmt)
        schema = holder.get("schema") if isinstance(holder, dict) else None
        if not isinstance(schema, dict):
            where = f"{param}.json_schema.schema" if "json_schema" in fmt else f"{param}.schema"
            raise InvalidRequest(f"{where} must be a JSON Schema object", param=where)
        return OutputFormat({"json": schema}, param)
    raise InvalidRequest(f"{param} must be an object with type text, json_object or json_schema", param=param)


def checked_schema(
    name: Any, schema: Any, name_param: str, schema_param: str, pattern: re.Pattern[str] = OPENAI_TOOL_NAME
) -> dict[str, Any]:
    """Validate one function tool's name and JSON-Schema parameters; returns the schema (an object)."""
    if not isinstance(name, str) or not pattern.match(name):
        raise InvalidRequest(f"{name_param} must match {pattern.pattern}", param=name_param)
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise InvalidRequest(f"{schema_param} must be a JSON Schema object", param=schema_param)
    return schema


def openai_choice_mode(raw: Any, tools: tuple[dict[str, Any], ...]) -> str | None:
    """OpenAI's string tool choices (absent, auto, none, required) as the neutral form; None for a named tool."""
    if raw is None:
        return "auto" if tools else "none"
    if raw in ("auto", "none", "required"):
        if raw == "required" and not tools:
            raise InvalidRequest("tool_choice 'required' needs tools", param="tool_choice")
        return str(raw)
    return None


def named_choice(name: Any, tools: tuple[dict[str, Any], ...], param: str, label: str) -> str:
    """The neutral ``fn:<name>`` choice for a tool the request must call; it must be one of ``tools``."""
    if not isinstance(name, str) or name not in {t["function"]["name"] for t in tools}:
        raise InvalidRequest(f"{label} {name!r}, which is not in tools", param=param)
    return f"fn:{name}"


__all__ = [
    "ANTHROPIC_TOOL_NAME",
    "OPENAI_TOOL_NAME",
    "checked_schema",
    "flag",
    "named_choice",
    "number",
    "openai_choice_mode",
    "output_format",
    "requested_model",
]
