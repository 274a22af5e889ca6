"""A call's line: the agent's main line, a sub-agent's, or a side call.

Side calls are named by the rollout's rules (``rollwire.side_calls``) applied to what the request shows: its
system text, last user message, tools and output cap, and whether the rollout's earlier calls offered tools.
A call that continues an earlier one keeps that call's line. A call that continues none opens a sub-agent's
line when its conversation is one of its own (``opens_sub_agent``), and is the main line's otherwise (a
compaction, a truncation, a retry: the audit names which).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollwire.proxy.conversation import Conversation
from rollwire.proxy.splice.plan import PriorCall
from rollwire.side_calls import AGENT, COMPACTION, MAIN, CallFeatures, SideCallRule, agent_line, classify

NO_TOOLS = b"[]"
"""``Conversation.tools_key()`` of a request without tools."""
SYSTEM_ROLES = ("system", "developer")

Keys = Sequence[tuple[Any, ...]]
"""A conversation's ``Message.key()``s."""


def call_line(
    conv: Conversation, priors: Sequence[PriorCall], rules: tuple[SideCallRule, ...], continued: PriorCall | None
) -> str:
    """The line of ``conv``, a call of a rollout whose earlier calls are ``priors``; ``continued``: the one it
    continues (its plan splices onto it), if any."""
    system = "\n".join(m.content for m in conv.messages if m.role == "system")
    last_user = next((m.content for m in reversed(conv.messages) if m.role == "user"), "")
    features = CallFeatures(
        system=system,
        last_user=last_user,
        tools=len(conv.tools),
        max_tokens=conv.sampling.max_tokens,
        main_has_tools=any(p.tools_key != NO_TOOLS for p in priors),
    )
    side = classify(features, rules)
    if side != MAIN:
        return side
    if continued is not None:
        return continued.line if continued.line.startswith(AGENT) else MAIN
    main = next((p for p in reversed(priors) if p.line == MAIN), None)
    if main is None:
        return MAIN
    opens = opens_sub_agent(conv.message_keys(), conv.tools_key(), main.request_keys, main.tools_key, priors[-1].line)
    return agent_line(len({p.line for p in priors if p.line.startswith(AGENT)})) if opens else MAIN


def opens_sub_agent(keys: Keys, tools_key: bytes, main_keys: Keys, main_tools_key: bytes, previous_line: str) -> bool:
    """Whether a call that continues no earlier call opens a conversation of its own beside the main line's
    (``main_keys``, ``main_tools_key``: its latest call's request): it carries none of the main line's history
    but the opening system message, and another system message or tool set opens it.

    Not right after a compaction summary (``previous_line``: the line of the rollout's call before): the main
    line resumes there from the summary, and may open with new system text (Claude Code's carries a hash of the
    conversation)."""
    if previous_line == COMPACTION:
        return False
    shared = next((i for i, (a, b) in enumerate(zip(keys, main_keys)) if a != b), min(len(keys), len(main_keys)))
    if shared > 1 or (shared == 1 and not _system(keys)):
        return False  # it carries the main line's history: a rewrite of it, not a conversation of its own
    return tools_key != main_tools_key or _system(keys) != _system(main_keys)


def _system(keys: Keys) -> Any:
    """The key of the system message a conversation opens with (None where it opens otherwise)."""
    return keys[0] if keys and keys[0][0] in SYSTEM_ROLES else None


__all__ = ["NO_TOOLS", "call_line", "opens_sub_agent"]
