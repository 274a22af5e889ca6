"""The demo's scripted expert keeps playing a task through what a long session does: asked for a summary (a
harness compacting its context), it writes the task and its progress, and the compacted session resumes from
that summary at the next step. Through the real Claude Code: tests/harness_adapters/test_claude_code_compaction.py."""

from __future__ import annotations

from rollwire.app.demo.teacher import END_OF_TURN, ScriptedExpert
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.mcp_servers.tasks.schema import ToolCall

STEPS = [ToolCall(server="", tool="Bash", arguments={"command": f"echo {i}"}) for i in range(3)]


def _turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def test_a_summary_carries_the_progress_and_the_session_resumes_from_it() -> None:
    suite = load_suite("tiny")
    task = suite.tasks[0].model_copy(update={"reference_solution": STEPS})
    expert = ScriptedExpert([suite.model_copy(update={"tasks": [task]})])
    opened = _turn("system", "You are an agent.") + _turn("user", task.instruction)
    two_done = opened + 2 * _turn("user", "<tool_response>\nok\n</tool_response>")
    assert '"echo 2"' in expert.next_turn(two_done + "<|im_start|>assistant\n")
    asked = two_done + _turn("user", "Your task is to create a detailed summary of the conversation so far.")
    summary = expert.next_turn(asked + "<|im_start|>assistant\n").removesuffix(END_OF_TURN)
    assert task.instruction in summary and "[2 of 3 reference steps done]" in summary
    resumed = _turn("system", "You are an agent.") + _turn("user", f"Continued from a summary:\n{summary}")
    assert '"echo 2"' in expert.next_turn(resumed + "<|im_start|>assistant\n")  # the third step, not the first
    finished = resumed + _turn("user", "<tool_response>\nok\n</tool_response>")
    assert expert.next_turn(finished) == f"{task.reference_answer or 'Done.'}{END_OF_TURN}"
