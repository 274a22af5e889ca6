"""Adapters by name: the built-in ones plus any a package registers under the entry-point group
``rollwire.harness_adapters`` (``name = "module:AdapterClass"``), so one can be added from outside.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from rollwire.errors import NotFound
from rollwire.harness_adapters.base import Adapter

ENTRY_POINT_GROUP = "rollwire.harness_adapters"

BUILTIN: dict[str, str] = {
    "reference": "rollwire.harness_adapters.reference:ReferenceAgentAdapter",
    "codex": "rollwire.harness_adapters.codex:CodexAdapter",
    "claude-code": "rollwire.harness_adapters.claude_code:ClaudeCodeAdapter",
    "openai-agents": "rollwire.harness_adapters.openai_agents:OpenAIAgentsAdapter",
    "mini-swe-agent": "rollwire.harness_adapters.mini_swe_agent:MiniSweAgentAdapter",
}
"""Name -> "module:Class"; imported only when asked for."""


def _load(target: str) -> type[Any]:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def available() -> dict[str, str]:
    """Every adapter name with where it comes from (built-ins win over plugins of the same name)."""
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return {**found, **BUILTIN}


def get_adapter(name: str, **options: Any) -> Adapter:
    """Build the adapter registered as ``name``; unknown names list the known ones."""
    targets = available()
    if name not in targets:
        raise NotFound(f"no harness adapter named {name!r}; known: {', '.join(sorted(targets))}")
    adapter = _load(targets[name])(**options)
    if not isinstance(adapter, Adapter):
        raise NotFound(f"{targets[name]} does not implement the Adapter protocol (name + launch)")
    return adapter


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "available", "get_adapter"]
