"""Compaction and sub-agents kept on: the real ``claude -p`` compacts its own context mid-task and hands a step to
a sub-agent (its ``Agent`` tool), driven by a scripted policy, and the task is still solved with reward 1.0.

The record: the compaction call is a side call (``side:compaction``); the next main call opens a new segment
whose audited cause is "compaction"; the sub-agent's calls are a line of their own (``agent:1``), opened with
cause "sub_agent" and spliced after; the main line splices on past it. Every segment is trained with the
rollout's reward, and every recorded (prompt, sampled) pair is one the upstream was sent and returned.

One harness setting differs from Claude Code's defaults, and it is what the test is about:
``CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000`` (the adapter's ``compact_window``), the smallest window Claude Code
takes, so it compacts after a few long tool outputs rather than at ~150k tokens. The upstream reports a 128k
context, past Claude Code's compaction point (about 64k tokens at that window).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.mcp_servers.tasks.schema import Suite, ToolCall
from rollwire.proxy.audit import audit
from rollwire.proxy.audit.render import as_markdown, as_text
from rollwire.reconstruct import reconstruct
from rollwire.store import decode_ids
from rollwire.store.db import open_engine
from rollwire.store.prompts import whole_prompts
from rollwire.store.requests import whole_requests
from rollwire.trainer.batching import samples_from
from tests.harness_adapters.conftest import model_calls, needs_binary, run_one_task, scripted_policy_stack, workspace_of
from tests.harness_adapters.docs_blocks import check_block

pytestmark = [pytest.mark.slow, pytest.mark.needs_harness]
CONTEXT = 131072
COMPACT_WINDOW = 100_000
SUB_TASK = 'Write "dog" to note.txt.'
LONG_OUTPUT = ToolCall(server="", tool="Bash", arguments={"command": "seq 1 4000", "description": "Count"})
"""~19k characters, ~15k tokens: three of them on Claude Code's ~45k-token prompt pass its compaction point."""
STEPS = [
    LONG_OUTPUT,
    LONG_OUTPUT,
    LONG_OUTPUT,
    ToolCall(
        server="",
        tool="Agent",
        arguments={"description": "Write the note", "prompt": SUB_TASK, "subagent_type": "general-purpose"},
    ),  # fmt: skip
    ToolCall(server="mcp__rollwire", tool="write_file", arguments={"path": "answer.txt", "content": "cat"}),
]
SUB_STEPS = [ToolCall(server="", tool="Bash", arguments={"command": "printf dog > note.txt", "description": "Note"})]


def _script() -> Suite:
    """The tiny suite's write-cat played through long outputs and a sub-agent; the sub-agent's own task beside it."""
    suite = load_suite("tiny")
    main = next(t for t in suite.tasks if t.id == "write-cat").model_copy(update={"reference_solution": STEPS})
    sub = main.model_copy(
        update={
            "id": "note-dog",
            "instruction": SUB_TASK,
            "reference_solution": SUB_STEPS,
            "reference_answer": "Noted.",
        }
    )
    return suite.model_copy(update={"tasks": [main, sub]})


@needs_binary("claude", "@anthropic-ai/claude-code")
def test_claude_code_compacts_and_delegates_and_every_line_is_recorded(tiny_model_dir: Path, tmp_path: Path) -> None:
    with scripted_policy_stack(tiny_model_dir, tmp_path, [_script()], max_model_len=CONTEXT) as (tap, info):
        row = run_one_task(
            info, "claude-code", tmp_path / "ws", deadline_s=300, model=info.model, compact_window=COMPACT_WINDOW
        )
        calls = model_calls(info, row.id)
        trajectory = reconstruct(open_engine(info.db_url), row.id)
        found = audit(open_engine(info.db_url), rollout_id=row.id)
    assert row.status == "finished" and row.reward == 1.0, (row.error, row.reward_breakdown, row.log_tail)
    workspace = workspace_of(tmp_path / "ws", row.id)
    assert (workspace / "note.txt").read_text() == "dog"  # the sub-agent's Bash call really ran

    lines = [c.line for c in calls]
    requests = [json.loads(r) for r in whole_requests(calls)]
    compact = lines.index("side:compaction")
    asked = json.dumps(requests[compact]["messages"][-1]["content"])
    assert "summary of the conversation" in asked  # Claude Code's own compaction prompt
    resumed = compact + 1
    assert lines[resumed] == "main" and calls[resumed].segment_break is not None
    assert calls[resumed].segment_index not in {c.segment_index for c in calls[:compact]}
    sub = [i for i, line in enumerate(lines) if line == "agent:1"]
    assert len(sub) >= 2 and lines.count("side:compaction") == 1, lines
    assert all(calls[i].segment_index == calls[sub[0]].segment_index for i in sub)  # the sub-agent's turns splice
    after = [c for c in calls[sub[-1] + 1 :] if c.line == "main"]
    assert after and all(c.segment_break is None and c.reused_prefix_len > 0 for c in after)  # main splices on

    causes = {(c.call_id, c.cause) for c in found.calls if c.kind == "break"}
    assert causes == {
        (calls[compact].id, "side_call"), (calls[resumed].id, "compaction"), (calls[sub[0]].id, "sub_agent")
    }, causes  # fmt: skip
    text = as_text(found)
    assert all(cause in text for cause in ("side_call", "compaction", "sub_agent"))
    check_block("long session", as_markdown(found))  # docs/harnesses.md's table is this run's

    assert len(tap.calls) == len(calls)  # every upstream call recorded, ids as sent and returned
    sent = {(tuple(req["prompt"]), tuple(out["choices"][0]["token_ids"])) for req, out in tap.calls}
    recorded = {
        (tuple(decode_ids(p)), tuple(decode_ids(c.completion_ids))) for c, p in zip(calls, whole_prompts(calls))
    }
    assert recorded == sent

    assert [s.line for s in trajectory.segments] == ["main", "side:compaction", "main", "agent:1"]
    samples = samples_from(trajectory, advantage=0.5)  # with --train-side-calls: every segment
    assert len(samples) == 4 and all(s.reward == 1.0 and s.advantage == 0.5 for s in samples)
    assert sum(sum(s.loss_mask) for s in samples) == sum(len(decode_ids(c.completion_ids)) for c in calls)
    agents = samples_from(trajectory, advantage=0.5, main_only=True)  # GRPO's default: both main segments, the sub-agent's
    assert [s.reward for s in agents] == [1.0, 1.0, 1.0]
