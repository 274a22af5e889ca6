"""Why a call started a new trajectory segment, as one cause from a closed list.

The proxy decides *whether* a call continues an earlier one (``proxy.splice.plan``) and records a readable
reason when it does not. This module names the cause, from what the call and the main-line call before it
hold: their parsed requests, the earlier call's answer as sampled, their lines and models. The call a sub-agent's
line opens with breaks for that cause; later calls are judged against their own line's. Pure: the audit
(``rollwire.proxy.audit.figures``) reads the store and hands the parsed pieces in.

"unknown" is a defect to fix (a break the platform cannot explain), never a bucket to grow: ``rollwire audit
--fail-on-unknown`` fails on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.lines import opens_sub_agent
from rollwire.side_calls import AGENT, MAIN, is_side_call

CAUSES: dict[str, str] = {
    "side_call": "side call: a request beside the agent's turns (a title, a compaction summary, a probe)",
    "compaction": "compaction or history rewrite: earlier messages replaced by other text",
    "template": "template re-render differs: the history is the same, its rendering is not (render policy)",
    "reasoning_dropped": "reasoning dropped by the harness from an answer it sends back",
    "tool_call_reserialised": "tool call re-serialised differently: a sampled call sent back with other arguments",
    "client_truncation": "client truncation: the harness dropped earlier messages to fit its context",
    "sub_agent": "sub-agent: another system prompt or tool set opens its own conversation",
    "tools_changed": "tools changed: the same conversation offered another tool set",
    "retried_turn": "retried turn: an earlier state of the conversation sent again (a retry or a fork)",
    "extra_choice": "extra choice: choice 2..n of an n > 1 request opens a segment each",
    "model_change": "model change: the call asked for another model than the call before",
    "unknown": "unknown: a break the platform cannot explain (a defect to report)",
}
"""The closed list, in the order the audit shows it: cause -> what it means."""


@dataclass(frozen=True, slots=True)
class Earlier:
    """The main-line call a break is judged against: its request, its answer as sampled, its model."""

    conv: Conversation
    answer: Message
    model: str


def break_cause(
    conv: Conversation | None, line: str, recorded: str | None, model: str, earlier: Earlier | None,
    previous_line: str = MAIN,
) -> str:  # fmt: skip
    """The cause of a call's segment break. ``conv``: the call's request (None where it could not be read back);
    ``recorded``: the proxy's reason (``ModelCall.segment_break``); ``earlier``: the latest earlier complete call
    of the same line (main or the sub-agent's), None for none; ``previous_line``: the line of the call before."""
    if is_side_call(line):
        return "side_call"
    if recorded is not None and recorded.startswith("choice "):
        return "extra_choice"
    if line.startswith(AGENT) and earlier is None:
        return "sub_agent"  # the call that opened the sub-agent's line
    if conv is None or earlier is None:
        return "unknown"
    if model != earlier.model:
        return "model_change"
    return _history_cause(conv, earlier, recorded or "", previous_line)


def _history_cause(conv: Conversation, earlier: Earlier, recorded: str, previous_line: str) -> str:
    before = conv_with_answer(earlier)
    old = [m.key() for m in before]
    new = [m.key() for m in conv.messages]
    was = earlier.conv
    if opens_sub_agent(conv.message_keys(), conv.tools_key(), was.message_keys(), was.tools_key(), previous_line):
        return "sub_agent"  # a sub-agent recorded on the main line (by a proxy that did not give it a line)
    if conv.tools_key() != was.tools_key():
        return "tools_changed"
    at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), None)
    if at is None:
        if len(new) <= len(old) or recorded.startswith("branches from"):
            return "retried_turn"  # an earlier state again, or the earlier call's segment was continued already
        return _rendered_cause(earlier.answer, conv.messages[len(before) - 1]) if recorded else "unknown"
    if at == len(before) - 1:  # the answer as sent back differs from the answer as sampled
        return _answer_cause(earlier.answer, conv.messages[at])
    if _is_subsequence(new[at:], old[at:]) or _dropped_then_kept(old, new, at):
        return "client_truncation"
    return "compaction"


def conv_with_answer(earlier: Earlier) -> tuple[Message, ...]:
    """The earlier call's history as it stood once it answered: its request's messages + its sampled answer."""
    return (*earlier.conv.messages, earlier.answer)


def _is_subsequence(part: list[Any], whole: list[Any]) -> bool:
    """``part`` is ``whole`` with some entries left out (order kept): messages dropped, none rewritten."""
    found = iter(whole)
    return bool(part) and len(part) < len(whole) and all(any(k == w for w in found) for k in part)


def _dropped_then_kept(old: list[Any], new: list[Any], at: int) -> bool:
    """Messages ``old[at:j]`` dropped and the rest of ``old`` kept in place, with the new turn's messages after."""
    rest = new[at:]
    for j in range(at + 1, len(old)):
        if rest[: len(old) - j] == old[j:]:
            return True
    return False


def _answer_cause(sampled: Message, sent_back: Message) -> str:
    """Why the answer sent back is not the answer as sampled (message keys differ)."""
    if sampled.role != sent_back.role:
        return "compaction"
    if (
        [c.name for c in sampled.tool_calls] == [c.name for c in sent_back.tool_calls]
        and sampled.tool_calls
        and ([c.key() for c in sampled.tool_calls] != [c.key() for c in sent_back.tool_calls])
    ):
        return "tool_call_reserialised"
    if (
        sampled.reasoning is None
        and _strip_think(sampled.content) == sent_back.content.strip() != sampled.content.strip()
    ):
        return "reasoning_dropped"  # reasoning the engine left inline, cut out of the content by the harness
    return "compaction"


def _rendered_cause(sampled: Message, sent_back: Message) -> str:
    """Why the same history renders to other tokens (render policy): what the harness changed in the answer that
    the message key does not see, else the template itself."""
    if sampled.reasoning and not sent_back.reasoning:
        return "reasoning_dropped"
    if [c.arguments for c in sampled.tool_calls] != [c.arguments for c in sent_back.tool_calls]:
        return "tool_call_reserialised"
    return "template"


def _strip_think(content: str) -> str:
    """``content`` without a leading ``<think>...</think>`` block (how templates inline reasoning)."""
    text = content.strip()
    if text.startswith("<think>") and "</think>" in text:
        return text.split("</think>", 1)[1].strip()
    return text


__all__ = ["CAUSES", "Earlier", "break_cause", "conv_with_answer"]
