"""A harness's own shell tool works inside the local runtime's sandbox: Codex's ``exec_command``, called by a
scripted policy, runs a command in the rollout's workspace and its output goes back to the model; the command
sees the workspace (and Codex's own config there) and nothing of the host's home.

The policy is the demo's scripted teacher behind the proxy (``scripted_policy_stack``) playing a one-task suite
whose reference solution is that one shell call; Codex runs at its adapter's defaults, its own
(read-only, bubblewrap) sandbox included, nested in the rollout's; without the gateway (``mcp=False``: the shell is
the point).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import anyio
import pytest

from rollwire.mcp_servers.tasks.schema import Criterion, Suite, Task, ToolCall
from rollwire.orchestrator.suite_run import run_suite
from rollwire.sandbox import probe
from rollwire.settings import OrchestratorSettings, Settings
from rollwire.store.requests import whole_requests
from tests.harness_adapters.conftest import model_calls, needs_binary, scripted_policy_stack, workspace_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_harness,
    pytest.mark.skipif(probe("bwrap") is not None, reason=f"no sandbox here: {probe('bwrap')}"),
]


def _home_file() -> Path:
    """A file in this user's home (the command only tries to read it); a made-up one where there is none."""
    home = Path.home()
    files = sorted(p for p in home.iterdir() if p.is_file()) if home.is_dir() else []
    return files[0] if files else home / ".ssh" / "id_ed25519"


COMMAND = (
    'echo "$((6 * 7)) from the sandbox"; pwd; head -n 1 .codex/config.toml; '
    f"cat {shlex.quote(str(_home_file()))} >/dev/null 2>&1 && echo home: LEAKED || echo home: hidden; "
    "touch written-by-shell 2>/dev/null && echo write: allowed || echo write: refused"
)
"""The last check tells the two sandboxes apart: the rollout's lets the workspace be written, Codex's own default
(read-only) does not, so ``write: refused`` shows Codex's bubblewrap ran nested inside the rollout's."""


@needs_binary("codex", "@openai/codex")
def test_codex_shell_tool_runs_inside_the_workspace(tiny_model_dir: Path, tmp_path: Path) -> None:
    task = Task(
        id="shell-in-sandbox",
        instruction="Run one shell command and report what it printed.",
        servers=["workspace"],
        checker=[Criterion(kind="answer_contains", args={"value": "done"})],
        reference_solution=[ToolCall(server="shell", tool="exec_command", arguments={"cmd": COMMAND})],
        reference_answer="done",
    )
    suite = Suite(name="sandbox-shell", tasks=[task])
    suite_file = tmp_path / "sandbox-shell.json"
    suite_file.write_text(suite.model_dump_json())
    workspaces = tmp_path / "ws"
    settings = Settings(orchestrator=OrchestratorSettings(workspace_root=str(workspaces), keep_workspaces=True))
    with scripted_policy_stack(tiny_model_dir, tmp_path, [suite]) as (_tap, info):
        result = anyio.run(
            lambda: run_suite(
                info, suite=str(suite_file), harness="codex", task_ids=[task.id], deadline_s=120,
                harness_options={"model": info.model, "mcp": False}, settings=settings,
            )
        )  # fmt: skip
        (row,) = result.rollouts
        calls = model_calls(info, row.id)
    assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
    assert len(calls) >= 2, row.log_tail
    first = json.loads(calls[0].response_json)["output"]
    assert [i["name"] for i in first if i["type"] == "function_call"] == ["exec_command"]
    outputs = [
        str(item.get("output"))
        for item in json.loads(whole_requests(calls)[1])["input"]
        if item.get("type") == "function_call_output"
    ]
    assert len(outputs) == 1, outputs
    (output,) = outputs
    workspace = workspace_of(workspaces, row.id)
    assert "42 from the sandbox" in output, output
    assert str(workspace) in output and "model = " in output, output  # its cwd is the workspace, which it can read
    assert "home: hidden" in output, output
    assert "write: refused" in output and not (workspace / "written-by-shell").exists(), output
