"""The side-call rules (``rollwire.side_calls``): a call's features give its line (the agent's main line, or a side
call such as a title or a compaction summary); the rules are readable, round-trip, and a bad rule is named."""

from __future__ import annotations

from typing import Any

import pytest

from rollwire.errors import InvalidRequest
from rollwire.side_calls import DEFAULT_RULES, MAIN, CallFeatures, classify, rules_from

CLAUDE_TITLE = "Generate a concise, sentence-case title (3-7 words) that captures the main topic or goal of this"
CLAUDE_COMPACT = "You are a helpful AI assistant tasked with summarizing conversations."
CODEX_COMPACT = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM"
CODEX_MEMORY = "You are a Memory Writing Agent."


def _features(**given: Any) -> CallFeatures:
    base: dict[str, Any] = {"system": "", "last_user": "", "tools": 3, "max_tokens": 4096, "main_has_tools": True}
    return CallFeatures(**{**base, **given})


@pytest.mark.parametrize(
    ("features", "line"),
    [
        (_features(system="You are Claude Code.", last_user="fix the bug"), MAIN),
        (_features(system=CLAUDE_TITLE, tools=0), "side:title"),
        (_features(system=CLAUDE_COMPACT, tools=3), "side:compaction"),  # Claude Code keeps its tools here
        (_features(last_user=CODEX_COMPACT), "side:compaction"),
        (_features(system=CODEX_MEMORY), "side:memory"),
        (_features(last_user="quota", max_tokens=1, tools=0, main_has_tools=False), "side:probe"),
        (_features(tools=0), "side:toolless"),
        (_features(tools=0, main_has_tools=False), MAIN),  # a harness without tools: its turns are the main line
    ],
)
def test_default_rules(features: CallFeatures, line: str) -> None:
    assert classify(features) == line


def test_long_system_prompts_classify_alike_first_time_and_again() -> None:
    """A harness's system prompt runs to tens of thousands of characters and comes with every call: searches of
    texts up to the remembered size are remembered, longer ones searched each time; the answers are the same."""
    remembered = "You are a coding agent. Read files, run commands, fix what fails.\n" * 300  # ~20k characters
    too_long = remembered * 4  # past REMEMBERED_TEXT_CHARS
    for system in (remembered, too_long):
        for _ in range(2):
            assert classify(_features(system=system, last_user="fix the bug")) == MAIN
            assert classify(_features(system=system + CLAUDE_TITLE, tools=0)) == "side:title"
            assert classify(_features(system=system, last_user=CODEX_COMPACT)) == "side:compaction"


def test_rules_round_trip_and_bad_rules_are_named() -> None:
    assert rules_from([r.to_dict() for r in DEFAULT_RULES]) == DEFAULT_RULES
    for bad, where in (
        ({"name": "x", "text": "("}, "rules[0].text"),
        ({"name": "x", "colour": 1}, "rules[0]"),
        ({"text": "x"}, "rules[0]"),
        ({"name": "x", "max_tokens_at_most": "1"}, "rules[0].max_tokens_at_most"),
    ):
        with pytest.raises(InvalidRequest) as caught:
            rules_from([bad], "rules")
        assert caught.value.param == where
