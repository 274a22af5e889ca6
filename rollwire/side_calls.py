"""Which calls of a rollout are the agent's main line, which are a sub-agent's, and which are side calls.

Harnesses make calls that are not the agent's turn: Claude Code asks for a session title and, near its
context limit, a compaction summary; Codex writes a compaction handoff and runs a memory-writing agent; some
clients probe with a one-token call. They land in the same rollout, so each recorded call says which line it
belongs to (``main``, ``agent:<n>`` for the n-th sub-agent the rollout opened, or ``side:<rule>``), and a
trainer can learn from the agents' own turns only. Side calls are named here, by rules; sub-agents by how their
conversation opens (``rollwire.proxy.lines``).

The rules are data a user can read (``DEFAULT_RULES`` below) and replace:
a rollout whose ``meta`` carries ``side_call_rules`` (a list of rule objects, set from the harness adapter's
``side_call_rules``) is classified by those instead. A rule matches when every condition it sets holds; the
first matching rule names the side call; no match means the main line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.text_memo import remember_short_texts

MAIN = "main"
SIDE = "side:"
"""Prefix of a side call's line: ``side:<rule>``."""
AGENT = "agent:"
"""Prefix of a sub-agent's line: ``agent:<n>``, n from 1 in the order the rollout opened them."""
COMPACTION = f"{SIDE}compaction"


def is_side_call(line: str) -> bool:
    """Whether a call of this line was a side call (not an agent's turn)."""
    return line.startswith(SIDE)


def agent_line(opened: int) -> str:
    """The line of the sub-agent opened after ``opened`` others."""
    return f"{AGENT}{opened + 1}"


@dataclass(frozen=True, slots=True)
class CallFeatures:
    """What the rules look at, taken from one request."""

    system: str
    """The system / developer / instructions text."""
    last_user: str
    """The text of the last user message."""
    tools: int
    """How many tools the request offers."""
    max_tokens: int | None
    """The output cap as requested (None: not set)."""
    main_has_tools: bool
    """Earlier calls of this rollout offered tools."""


@dataclass(frozen=True, slots=True)
class SideCallRule:
    name: str
    text: str | None = None
    """A regular expression searched in the system prompt and the last user message."""
    max_tokens_at_most: int | None = None
    no_tools_while_main_has_tools: bool = False

    def matches(self, call: CallFeatures) -> bool:
        checks: list[bool] = []
        if self.text is not None:
            checks.append(_found(self.text, call.system) or _found(self.text, call.last_user))
        if self.max_tokens_at_most is not None:
            checks.append(call.max_tokens is not None and call.max_tokens <= self.max_tokens_at_most)
        if self.no_tools_while_main_has_tools:
            checks.append(call.tools == 0 and call.main_has_tools)
        return bool(checks) and all(checks)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.text is not None:
            out["text"] = self.text
        if self.max_tokens_at_most is not None:
            out["max_tokens_at_most"] = self.max_tokens_at_most
        if self.no_tools_while_main_has_tools:
            out["no_tools_while_main_has_tools"] = True
        return out


REMEMBERED_TEXT_CHARS = 65_536
"""Longest text whose search results are remembered (128 entries at most: ~8M characters in all)."""


@remember_short_texts(REMEMBERED_TEXT_CHARS, entries=128)
def _found(pattern: str, text: str) -> bool:
    """Whether ``pattern`` occurs in ``text``. A harness sends the same system prompt (often 10-20k characters)
    with every call of every rollout, and searching it for each rule's phrases cost ~0.2 ms a call
    (``bench/proxy.py --system-chars``): remembered, a repeat costs one hash of the text."""
    return re.search(pattern, text) is not None


DEFAULT_RULES: tuple[SideCallRule, ...] = (
    SideCallRule(
        "title",
        text=r"Generate a concise, sentence-case title|succinct title and git branch name|Generate a thread title",
    ),  # Claude Code's session title and branch name; Codex's thread title
    SideCallRule(
        "compaction",
        text=r"tasked with summarizing conversations|create a detailed summary of the conversation so far"
        r"|CONTEXT CHECKPOINT COMPACTION",
    ),  # Claude Code's /compact and auto-compaction; Codex's compaction handoff
    SideCallRule("memory", text=r"You are a Memory Writing Agent"),  # Codex's memories
    SideCallRule("probe", max_tokens_at_most=1),  # quota / reachability checks
    SideCallRule("toolless", no_tools_while_main_has_tools=True),  # a helper call beside a tool-using agent
)


def classify(call: CallFeatures, rules: tuple[SideCallRule, ...] = DEFAULT_RULES) -> str:
    """``main``, or ``side:<name>`` of the first rule that matches."""
    for rule in rules:
        if rule.matches(call):
            return f"{SIDE}{rule.name}"
    return MAIN


def rules_from(raw: Any, where: str = "side_call_rules") -> tuple[SideCallRule, ...]:
    """Rules from their JSON form (a list of objects); a 400 naming the field for anything else."""
    if not isinstance(raw, list):
        raise InvalidRequest(f"{where} must be a list of rule objects", param=where)
    out = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise InvalidRequest(f"{at} must be an object with a name", param=at)
        unknown = set(item) - {"name", "text", "max_tokens_at_most", "no_tools_while_main_has_tools"}
        if unknown:
            raise InvalidRequest(f"{at} has unknown conditions {sorted(unknown)}", param=at)
        text, cap = item.get("text"), item.get("max_tokens_at_most")
        toolless = item.get("no_tools_while_main_has_tools")
        try:
            if text is not None:
                re.compile(text)
        except (re.error, TypeError):
            raise InvalidRequest(f"{at}.text must be a regular expression", param=f"{at}.text") from None
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)):
            raise InvalidRequest(f"{at}.max_tokens_at_most must be an integer", param=f"{at}.max_tokens_at_most")
        if toolless is not None and not isinstance(toolless, bool):
            raise InvalidRequest(f"{at}.no_tools_while_main_has_tools must be a boolean", param=at)
        out.append(SideCallRule(item["name"], text, cap, bool(toolless)))
    return tuple(out)




def rules_of(meta: Mapping[str, Any]) -> tuple[SideCallRule, ...]:
    """A rollout's rules: its ``meta.side_call_rules`` (checked when the rollout was created), else the defaults."""
    if "side_call_rules" not in meta:
        return DEFAULT_RULES
    try:
        return rules_from(meta["side_call_rules"])
    except InvalidRequest:
        return DEFAULT_RULES


__all__ = [
    "AGENT", "COMPACTION", "DEFAULT_RULES", "MAIN", "SIDE", "CallFeatures", "SideCallRule", "agent_line", "classify",
    "is_side_call", "rules_from", "rules_of",
]  # fmt: skip
