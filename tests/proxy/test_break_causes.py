"""Each break cause of the closed list is named from the call and the main-line call before it (``rollwire.proxy.audit``);
a history the platform cannot explain is "unknown", never a guess. Through the real proxy: tests/proxy/test_audit.py."""

from __future__ import annotations

import pytest

from rollwire.clients import CLIENT_CHARS, harness_of, kept_user_agent
from rollwire.proxy.audit.causes import CAUSES, Earlier, break_cause
from rollwire.proxy.conversation import Conversation, Message, ToolCall
from rollwire.proxy.lines import opens_sub_agent
from rollwire.side_calls import COMPACTION, MAIN

SYSTEM = Message("system", "You are an agent.")
TASK = Message("user", "List the files.")
TOOLS = ({"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}},)
LS = ToolCall("call_1", "ls", '{"path": "."}')
ANSWER = Message("assistant", "I will look.", tool_calls=(LS,))
RESULT = Message("tool", "a.txt b.txt", tool_call_id="call_1")
EARLIER = Earlier(Conversation("m", (SYSTEM, TASK), TOOLS), ANSWER, "m")
REWRITTEN = "history rewritten: message 1 differs from call 1's request"


def _cause(
    messages: tuple[Message, ...], recorded: str | None = REWRITTEN, *, tools: tuple = TOOLS, model: str = "m",
    line: str = "main",
) -> str:  # fmt: skip
    return break_cause(Conversation(model, messages, tools), line, recorded, model, EARLIER)


def test_a_continuation_with_no_recorded_break_is_unknown_not_guessed() -> None:
    assert _cause((SYSTEM, TASK, ANSWER, RESULT), recorded=None) == "unknown"


@pytest.mark.parametrize(
    ("messages", "recorded", "cause"),
    [
        ((SYSTEM, Message("user", "Summary: the agent listed files."), RESULT), REWRITTEN, "compaction"),
        ((SYSTEM, TASK, Message("assistant", "I looked.", tool_calls=(LS,)), RESULT), "assistant message 2", "compaction"),
        ((SYSTEM, ANSWER, RESULT), REWRITTEN, "client_truncation"),  # the task dropped, the rest kept in place
        ((SYSTEM, TASK), "history shortened: 2 messages, call 1 had 2", "retried_turn"),
        ((SYSTEM, TASK, ANSWER, RESULT), "branches from call 1, whose segment was already continued", "retried_turn"),
        ((Message("system", "You are a sub-agent."), Message("user", "Search.")), "history rewritten", "sub_agent"),
        (
            (SYSTEM, TASK, Message("assistant", "I will look.", tool_calls=(ToolCall("call_1", "ls", '{"path": ".."}'),)), RESULT),
            "assistant message 2 is not call 1's answer as sampled",
            "tool_call_reserialised",
        ),
        ((SYSTEM, TASK, ANSWER, RESULT), "re-rendered prompt diverges from call 1's tokens at position 40", "template"),
    ],
)  # fmt: skip
def test_each_history_names_its_cause(messages: tuple[Message, ...], recorded: str, cause: str) -> None:
    assert _cause(messages, recorded) == cause


def test_the_render_policy_names_what_the_harness_changed_in_its_answer() -> None:
    diverged = "re-rendered prompt diverges from call 1's tokens at position 40"
    thinking = Earlier(
        EARLIER.conv, Message("assistant", "I will look.", reasoning="ls lists files", tool_calls=(LS,)), "m"
    )
    sent_back = Conversation("m", (SYSTEM, TASK, ANSWER, RESULT), TOOLS)
    assert break_cause(sent_back, "main", diverged, "m", thinking) == "reasoning_dropped"
    spaced = Message("assistant", "I will look.", tool_calls=(ToolCall("call_1", "ls", '{"path":"."}'),))
    respaced = Conversation("m", (SYSTEM, TASK, spaced, RESULT), TOOLS)
    assert break_cause(respaced, "main", diverged, "m", EARLIER) == "tool_call_reserialised"
    inline = Earlier(EARLIER.conv, Message("assistant", "<think>hm</think>I will look."), "m")
    cut = Conversation("m", (SYSTEM, TASK, Message("assistant", "I will look."), RESULT), TOOLS)
    assert break_cause(cut, "main", "assistant message 2 is not call 1's answer", "m", inline) == "reasoning_dropped"


def test_lines_choices_tools_and_models() -> None:
    assert _cause((SYSTEM, TASK), line="side:title") == "side_call"
    assert _cause((SYSTEM, TASK, ANSWER), recorded="choice 2 of 3") == "extra_choice"
    assert _cause((SYSTEM, TASK, ANSWER, RESULT), tools=()) == "tools_changed"
    assert _cause((SYSTEM, TASK, ANSWER, RESULT), model="other") == "model_change"
    assert break_cause(None, "main", REWRITTEN, "m", EARLIER) == "unknown"  # the request could not be read back
    assert break_cause(Conversation("m", (SYSTEM, TASK)), "main", REWRITTEN, "m", None) == "unknown"


def test_every_cause_has_a_meaning_and_unknown_is_last() -> None:
    assert list(CAUSES)[-1] == "unknown" and all(CAUSES.values())


@pytest.mark.parametrize(
    ("agent", "name", "version"),
    [
        ("codex_cli_rs/0.171.0 (Debian 12.0.0; x86_64) xterm-256color (codex-tui; 0.171.0)", "codex_cli_rs", "0.171.0"),
        ("claude-cli/2.1.197 (external, cli)", "claude-cli", "2.1.197"),
        ("OpenAI/Python 1.109.1", "OpenAI/Python", "1.109.1"),
        ("Agents/Python 0.24.0", "Agents/Python", "0.24.0"),
        ("Anthropic/Python 0.69.0", "Anthropic/Python", "0.69.0"),
        ("curl", "curl", ""),
    ],
)  # fmt: skip
def test_the_harness_and_version_come_from_the_user_agent(agent: str, name: str, version: str) -> None:
    assert harness_of(agent) == (name, version)


def test_a_user_agent_is_kept_printable_and_bounded() -> None:
    hostile = "evil/1.0 \x1b[31m<script>\u202e" + "x" * 10_000
    kept = kept_user_agent(hostile)
    assert len(kept) == CLIENT_CHARS and all(" " <= c <= "~" for c in kept)
    assert kept.startswith("evil/1.0 ?[31m<script>?") and harness_of(kept) == ("evil", "1.0")
    assert kept_user_agent(None) == "" and kept_user_agent("\n") == "?"


def test_a_sub_agents_line_opens_with_its_cause_and_is_judged_on_its_own() -> None:
    sub = Conversation("m", (Message("system", "You are a sub-agent."), Message("user", "Search.")), ())
    assert break_cause(sub, "agent:1", "tools changed since call 4", "m", None) == "sub_agent"
    own = Earlier(sub, Message("assistant", "Found it."), "m")  # its next turn, history rewritten: its own compaction
    again = Conversation("m", (sub.messages[0], Message("user", "Summary: searched.")), ())
    assert break_cause(again, "agent:1", REWRITTEN, "m", own) == "compaction"


def test_after_a_compaction_summary_new_system_text_is_the_main_line_resuming() -> None:
    """Claude Code's system text carries a hash of the conversation, so it changes when it compacts."""
    resumed = Conversation("m", (Message("system", "You are an agent. #f9d"), Message("user", "Summary: listed.")), TOOLS)
    assert break_cause(resumed, "main", REWRITTEN, "m", EARLIER, previous_line=COMPACTION) == "compaction"
    assert break_cause(resumed, "main", REWRITTEN, "m", EARLIER) == "sub_agent"  # a proxy that gave it no line


@pytest.mark.parametrize(
    ("messages", "tools", "previous", "opens"),
    [
        ((Message("system", "You are a sub-agent."), TASK), TOOLS, MAIN, True),  # another system text
        ((SYSTEM, Message("user", "Search.")), (), MAIN, True),  # the same system text, another tool set
        ((SYSTEM, Message("user", "Summary: listed.")), TOOLS, MAIN, False),  # the main line compacted
        ((Message("system", "You are a sub-agent."), TASK), TOOLS, COMPACTION, False),  # resumed after a summary
        ((SYSTEM, TASK, ANSWER, RESULT), (), MAIN, False),  # carries the main line's history: tools changed
        ((Message("user", "Search."),), TOOLS, MAIN, True),  # fresh, without the main line's system text
    ],
)  # fmt: skip
def test_what_opens_a_sub_agent(messages: tuple[Message, ...], tools: tuple, previous: str, opens: bool) -> None:
    conv, main = Conversation("m", messages, tools), EARLIER.conv
    assert opens_sub_agent(conv.message_keys(), conv.tools_key(), main.message_keys(), main.tools_key(), previous) is opens
