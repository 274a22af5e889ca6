"""A call's line: the agent's main line or a side call, by the rollout's rules (``rollwire.side_calls``) applied
to what the request shows: its system text, last user message, tools and output cap, and whether the
rollout's earlier calls offered tools."""

from __future__ import annotations

from collections.abc import Sequence

from rollwire.proxy.conversation import Conversation
from rollwire.proxy.splice.plan import PriorCall
from rollwire.side_calls import CallFeatures, SideCallRule, classify

NO_TOOLS = b"[]"
"""``Conversation.tools_key()`` of a request without tools."""


def call_line(conv: Conversation, priors: Sequence[PriorCall], rules: tuple[SideCallRule, ...]) -> str:
    system = "\n".join(m.content for m in conv.messages if m.role == "system")
    last_user = next((m.content for m in reversed(conv.messages) if m.role == "user"), "")
    features = CallFeatures(
        system=system,
        last_user=last_user,
        tools=len(conv.tools),
        max_tokens=conv.sampling.max_tokens,
        main_has_tools=any(p.tools_key != NO_TOOLS for p in priors),
    )
    return classify(features, rules)


__all__ = ["call_line"]
