"""The conformance matrix: Codex CLI, Claude Code, the OpenAI Agents SDK and mini-swe-agent, each at its pinned
version and its defaults, run a multi-turn tool session (five tool turns and the end: six model calls) through the
real proxy against a scripted policy (the demo's teacher, behind an EngineTap that keeps what the engine was sent
and sampled). For each: every call recorded, every recorded prompt and sampled id the engine's own, and no segment
break the audit cannot explain. ``docs/harnesses.md``'s matrix is this run's ``rollwire audit --markdown``: a pin
that changes a harness's behaviour fails here until the matrix is written again from a run
(``ROLLWIRE_WRITE_MATRIX=1 pytest tests/harness_adapters/test_conformance_matrix.py``).

What this run does not show: a side call. None of the four makes one in its non-interactive mode at defaults (no
title, compaction or probe call was recorded); the causes of side calls, compaction, truncation and sub-agents
are shown through the real proxy by tests/proxy/test_audit.py."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from rollwire.app.stack import StackInfo
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.mcp_servers.tasks.schema import Suite, ToolCall
from rollwire.proxy.audit import Audit, as_markdown, audit
from rollwire.store import decode_ids
from rollwire.store.db import open_engine
from rollwire.store.prompts import whole_prompts
from rollwire.store.schema import Rollout
from tests.harness_adapters.conftest import mini_swe_python_or_why, model_calls, run_one_task, scripted_policy_stack
from tests.harness_adapters.docs_blocks import check_block

pytestmark = [pytest.mark.slow, pytest.mark.needs_harness, pytest.mark.timeout(1200)]
CONTEXT = 65536
"""What ``rollwire up`` serves the tiny model with (Claude Code's own prompt is ~31k tokens)."""
GATEWAY = "mcp__rollwire"


def _js(source: str) -> ToolCall:
    """One call of Codex's freeform ``exec`` tool (its default model's only tool): JavaScript calling its tools."""
    return ToolCall(server="", tool="exec", arguments={"input": source})


def _bash(command: str, tool: str = "bash") -> ToolCall:
    return ToolCall(server="", tool=tool, arguments={"command": command})


def _gateway(tool: str, **arguments: str) -> ToolCall:
    return ToolCall(server=GATEWAY, tool=tool, arguments=arguments)


@dataclass(frozen=True)
class Session:
    adapter: str
    task: str
    """A tiny-suite task of its own, so the teacher tells the sessions apart by their instructions."""
    steps: list[ToolCall]


@cache
def installed(adapter: str) -> tuple[tuple[str, str] | None, dict[str, Any]]:
    """The client the harness's calls name in their User-Agent, (name, version), from what is installed (None: the
    harness is not), and the run options it needs. mini-swe-agent calls through litellm, which sends the OpenAI
    SDK's User-Agent: its calls name that SDK in its own venv, and the adapter column says whose they are."""
    if adapter == "openai-agents":
        return ("Agents/Python", version("openai-agents")), {}
    if adapter == "mini-swe-agent":
        python, _ = mini_swe_python_or_why()
        if python is None:
            return None, {}
        probe = "import importlib.metadata as m; print(m.version('openai'))"
        said = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60).stdout.strip()
        return ("OpenAI/Python", said), {"python": python}
    binary, client = {"codex": ("codex", "codex_exec"), "claude-code": ("claude", "claude-cli")}[adapter]
    try:
        said = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return None, {}
    found = re.search(r"\d+\.\d+\.\d+", said)
    return ((client, found.group(0)) if found else None), {}


def _sessions() -> list[Session]:
    return [
        Session("codex", "write-cat", [
            _js('const r = await tools.exec_command({cmd: "ls -a"});\ntext(r.output);'),
            _js('const r = await tools.exec_command({cmd: "printf cat > draft.txt"});\ntext(r.output);'),
            _js('const r = await tools.exec_command({cmd: "cat draft.txt"});\ntext(r.output);'),
            _js(f'text(JSON.stringify(await tools.{GATEWAY}__write_file({{path: "answer.txt", content: "cat"}})));'),
            _js('const r = await tools.exec_command({cmd: "echo written"});\ntext(r.output);'),
        ]),
        Session("claude-code", "write-dog", [
            ToolCall(server="", tool="Bash", arguments={"command": "ls -a", "description": "Look around"}),
            ToolCall(server="", tool="Bash", arguments={"command": "printf dog > draft.txt", "description": "Draft"}),
            ToolCall(server="", tool="Bash", arguments={"command": "cat draft.txt", "description": "Check it"}),
            _gateway("write_file", path="answer.txt", content="dog"),
            ToolCall(server="", tool="Bash", arguments={"command": "echo written", "description": "Say so"}),
        ]),
        Session("openai-agents", "write-sun", [  # the task offers the gateway's write_file only
            _gateway("write_file", path="draft-1.txt", content="s"), _gateway("write_file", path="draft-2.txt", content="su"),
            _gateway("write_file", path="draft-3.txt", content="sun"), _gateway("write_file", path="answer.txt", content="su"),
            _gateway("write_file", path="answer.txt", content="sun"),
        ]),
        Session("mini-swe-agent", "write-red", [
            _bash("ls -a"), _bash("printf red > draft.txt"), _bash("cat draft.txt"), _bash("printf red > answer.txt"),
            _bash("cat answer.txt"), _bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat answer.txt"),
        ]),
    ]  # fmt: skip


SESSIONS = _sessions()


def _scripted_tiny() -> Suite:
    """The tiny suite with each session's task solved by that session's steps (what the teacher plays)."""
    suite = load_suite("tiny")
    steps = {s.task: s.steps for s in SESSIONS}
    tasks = [t.model_copy(update={"reference_solution": steps[t.id]}) if t.id in steps else t for t in suite.tasks]
    return suite.model_copy(update={"tasks": tasks})


@dataclass
class Run:
    tap: Any
    info: StackInfo
    rows: dict[str, Rollout]


@pytest.fixture(scope="module")
def run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The four sessions, one after another, on one stack. Each harness asks for its own model name; the proxy's
    alias table maps every name to the scripted policy, as a user's would."""
    folder = tmp_path_factory.mktemp("conformance")
    with pytest.MonkeyPatch.context() as env:  # read by the proxy process at its start
        env.setenv("ROLLWIRE_PROXY__MODEL_ALIASES", json.dumps({"*": "scripted-policy"}))
        with scripted_policy_stack(tiny_model_dir, folder, [_scripted_tiny()], max_model_len=CONTEXT) as (tap, info):
            env.delenv("ROLLWIRE_PROXY__MODEL_ALIASES")
            rows = {
                s.adapter: run_one_task(info, s.adapter, folder / "ws", deadline_s=240, task=s.task, **options)
                for s in SESSIONS
                for found, options in [installed(s.adapter)]
                if found
            }
            yield Run(tap, info, rows)


def _audit_of(run: Run) -> Audit:
    engine = open_engine(run.info.db_url)
    return Audit([call for row in run.rows.values() for call in audit(engine, rollout_id=row.id).calls])


@pytest.mark.parametrize("session", SESSIONS, ids=[s.adapter for s in SESSIONS])
def test_a_multi_turn_session_is_recorded_exactly(run: Run, session: Session) -> None:
    expected, _ = installed(session.adapter)
    if not expected:
        pytest.fail(f"{session.adapter} is not installed: .ci/run installs every pinned harness")
    row = run.rows[session.adapter]
    assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
    calls = model_calls(run.info, row.id)
    assert len(calls) >= 6 and all(c.status == "complete" for c in calls), [c.status for c in calls]
    sent = {(tuple(request["prompt"]), tuple(answer["choices"][0]["token_ids"])) for request, answer in run.tap.calls}
    for call, prompt in zip(calls, whole_prompts(calls)):  # every id recorded is one the engine saw or sampled
        assert (tuple(decode_ids(prompt)), tuple(decode_ids(call.completion_ids))) in sent, call.id
    found = audit(open_engine(run.info.db_url), rollout_id=row.id)
    (harness,) = found.harnesses()
    assert ((harness.harness, harness.version), harness.adapters) == (expected, {session.adapter}), harness
    assert not found.unknown(), [(c.call_id, c.reason) for c in found.unknown()]


def test_the_docs_matrix_is_this_run(run: Run) -> None:
    check_block("conformance matrix", as_markdown(_audit_of(run)))
