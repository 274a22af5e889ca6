"""``rollwire audit`` over calls the real proxy recorded from the official OpenAI and Anthropic SDKs (their default
User-Agents) in front of the bundled engine: each history edit a harness makes (a side call, compaction, client
truncation, a retried turn, new tools, a sub-agent, n > 1) is a break of its own cause, never "unknown"; per harness
version and turn, calls, splices and tokens reused add up. The causes on hand-made histories:
tests/core/test_break_causes.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from rollwire.app.cli.__main__ import main
from rollwire.store import ModelCall, open_engine, session_scope
from tests.proxy.conftest import Proxy
from tests.proxy.test_side_call_segments import CLAUDE_TITLE

TOOLS: list[ChatCompletionFunctionToolParam] = [
    {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}
]
SYSTEM: ChatCompletionMessageParam = {"role": "system", "content": "You are an agent."}


def _user(text: str) -> ChatCompletionMessageParam:
    return {"role": "user", "content": text}


class _Agent:
    """Calls the rollout's proxy as a harness would, keeping each answer as it came back."""

    def __init__(self, rollout: dict[str, Any], model: str) -> None:
        self.chat = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
        self.model = model

    def turn(self, messages: list[ChatCompletionMessageParam], **extra: Any) -> list[ChatCompletionMessageParam]:
        """``messages`` + the answer (choice 0) as the SDK returned it."""
        done = self.chat.chat.completions.create(model=self.model, messages=messages, max_tokens=4, seed=1, **extra)
        return [*messages, {"role": "assistant", "content": done.choices[0].message.content or ""}]


def _audit(proxy: Proxy, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["audit", *args, "--db", proxy.store_url])
    return code, capsys.readouterr().out


def test_each_history_edit_is_a_break_of_its_cause(
    proxy: Proxy, served_model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rollout = proxy.new_rollout()
    agent = _Agent(rollout, served_model)
    one = agent.turn([SYSTEM, _user("List the files.")])  # turn 1: opens
    two = agent.turn([*one, _user("Go on.")])  # 2: spliced
    claude = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
    claude.messages.create(  # 3: Claude Code's title call, a side call
        model="claude-haiku-4-5", max_tokens=4, system=CLAUDE_TITLE, messages=[{"role": "user", "content": "hi"}]
    )
    agent.turn([*two, _user("And then?")])  # 4: spliced onto turn 2
    five = agent.turn([SYSTEM, _user("Summary: the agent listed files."), _user("Finish.")])  # 5: compaction
    six_asked: list[ChatCompletionMessageParam] = [SYSTEM, *five[2:], _user("Done?")]  # the summary dropped
    agent.turn(six_asked)  # 6: client truncation
    seven = agent.turn(six_asked)  # 7: the same request again
    eight = agent.turn([*seven, _user("Use ls.")], tools=TOOLS)  # 8: tools changed
    sub = [{"role": "system", "content": "You are a sub-agent that searches."}, _user("Find a.txt.")]
    nine = agent.turn(sub, tools=TOOLS)  # type: ignore[arg-type]  # 9: a sub-agent
    agent.turn([*nine, _user("More.")], tools=TOOLS, n=2)  # 10: choice 1 spliced, choice 2 a segment of its own
    assert eight  # every turn answered

    code, out = _audit(proxy, capsys, rollout["run"], "--json", "--fail-on-unknown", "--html", str(tmp_path / "a.html"))
    assert code == 0, out
    found = json.loads(out)
    causes = [(b["turn"], b["cause"]) for b in found["breaks"]]
    assert causes == [
        (3, "side_call"), (5, "compaction"), (6, "client_truncation"), (7, "retried_turn"), (8, "tools_changed"),
        (9, "sub_agent"), (11, "extra_choice"),
    ], found["breaks"]  # fmt: skip
    assert [b["line"] for b in found["breaks"] if b["turn"] >= 9] == ["agent:1", "agent:1"]  # the sub-agent's own line
    harnesses = {(h["harness"], h["version"]): h for h in found["harnesses"]}
    assert set(harnesses) == {("OpenAI/Python", openai.__version__), ("Anthropic/Python", anthropic.__version__)}
    chat = harnesses[("OpenAI/Python", openai.__version__)]
    assert (chat["calls"], chat["spliced"], chat["rollouts"]) == (10, 3, 1)
    assert chat["splice_rate"] == pytest.approx(3 / 9, abs=1e-4)  # turns 2, 4, 10 of the nine that could continue
    turns = {t["turn"]: t for t in chat["turns"]}
    assert turns[2]["reused"] > 0 and turns[2]["prefilled_again"] == 0
    assert turns[5]["reused"] == 0 and 0 < turns[5]["prefilled_again"] < turns[5]["prompt_tokens"]
    with session_scope(open_engine(proxy.store_url)) as session:
        stored = {c.id: c for c in session.query(ModelCall).all()}
    assert sum(t["prompt_tokens"] for t in chat["turns"]) == sum(
        c.reused_prefix_len + len(c.prompt_ids) // 4 if c.prompt_base else len(c.prompt_ids) // 4
        for c in stored.values()
        if c.dialect == "chat"
    )
    page = (tmp_path / "a.html").read_text()
    assert "client_truncation" in page and "history rewritten" in page

    code, out = _audit(proxy, capsys, rollout["run"], "--harness", "Anthropic/Python")
    assert code == 0 and "Anthropic/Python" in out and "OpenAI/Python" not in out and "side_call 1" in out


def test_bad_requests_are_one_line(proxy: Proxy, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["audit", "no-such-run", "--db", proxy.store_url]) == 1
    assert capsys.readouterr().err.strip() == "rollwire audit: no run no-such-run in the store"
    assert main(["audit", "--db", proxy.store_url]) == 1
    assert "name a RUN or --rollout ID" in capsys.readouterr().err
    assert main(["audit", "x", "--db", f"sqlite:///{tmp_path / 'none.db'}"]) == 1
    assert "no store at" in capsys.readouterr().err and not (tmp_path / "none.db").exists()
    assert main(["audit", "--causes"]) == 0 and "client_truncation" in capsys.readouterr().out
