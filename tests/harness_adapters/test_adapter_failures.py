"""Must-show 3, adapter by adapter: a harness that hangs on its model is stopped at the deadline, one that cannot
reach its endpoints fails with its own stderr line kept, Claude Code's wrapper keeps claude's exit status and
answer, and every config path an adapter hands its harness lies inside the rollout's workspace."""

from __future__ import annotations

import ast
import json
import socket
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rollwire.app.stack import StackInfo
from rollwire.harness_adapters.base import RolloutContext
from rollwire.harness_adapters.registry import BUILTIN, get_adapter
from tests.harness_adapters.conftest import MINI_SWE_PYTHON_ENV, needs_module, run_one_task, workspace_of

CTX = RolloutContext(
    run_id="run", rollout_id="ro", task_id="write-cat", prompt="-Write cat to answer.txt.", token="tok",
    base_url="http://proxy.test/r/tok/v1", anthropic_base_url="http://proxy.test/r/tok",
    mcp_url="http://gateway.test/r/tok/mcp", deadline_s=60,
)  # fmt: skip


@pytest.fixture()
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def _stack(tmp_path: Path, port: int) -> StackInfo:
    url = f"http://127.0.0.1:{port}"
    return StackInfo(url, url, url, None, "key", f"sqlite:///{tmp_path / 'store.db'}", str(tmp_path / "state"), "m")


def test_a_harness_hanging_on_its_model_is_stopped_at_the_deadline(tmp_path: Path, silent_port: int) -> None:
    started = time.monotonic()
    row = run_one_task(_stack(tmp_path, silent_port), "reference", tmp_path / "ws", deadline_s=3)
    assert row.status == "timed_out" and "deadline" in (row.error or "")
    assert time.monotonic() - started < 30


@needs_module("agents", "openai-agents")
def test_a_harness_that_cannot_reach_its_endpoints_fails_with_its_stderr(tmp_path: Path, refusing_port: int) -> None:
    row = run_one_task(_stack(tmp_path, refusing_port), "openai-agents", tmp_path / "ws", deadline_s=60)
    assert row.status == "failed" and row.exit_code == 1, (row.status, row.log_tail)
    assert "openai-agents runner: " in (row.log_tail or "") and "status 1" in (row.error or "")


FAKE_CLAUDE = """#!/bin/sh
echo "HOME=$HOME"
echo "CLAUDE_CONFIG_DIR=$CLAUDE_CONFIG_DIR"
echo "ARGS=$*"
echo "boom: the model is unreachable" >&2
exit 3
"""


def test_claude_wrapper_keeps_exit_status_answer_and_stderr(tmp_path: Path, silent_port: int) -> None:
    fake = tmp_path / "fake-claude"
    fake.write_text(FAKE_CLAUDE)
    fake.chmod(0o755)
    row = run_one_task(_stack(tmp_path, silent_port), "claude-code", tmp_path / "ws", deadline_s=30, command=str(fake))
    assert row.status == "failed" and row.exit_code == 3, (row.status, row.log_tail)
    workspace = workspace_of(tmp_path / "ws", row.id)
    said = dict(line.split("=", 1) for line in (row.final_answer or "").splitlines())
    assert said["HOME"] == str(workspace) and said["CLAUDE_CONFIG_DIR"] == str(workspace / ".claude")
    assert "--mcp-config .rollwire/claude-mcp.json --strict-mcp-config" in said["ARGS"]
    assert "boom: the model is unreachable" in (row.log_tail or "") and "ARGS=" in (row.log_tail or "")


def test_every_builtin_adapter_keeps_its_config_inside_the_workspace() -> None:
    for name in BUILTIN:
        launch = get_adapter(name).launch(CTX)
        for key, value in launch.env.items():
            assert not value.startswith("/"), f"{name} sets {key} to a path outside the workspace: {value}"
        assert "HOME" not in launch.env, f"{name} must leave HOME to the runtime (the workspace)"
        assert launch.argv[-2:] == ("--", CTX.prompt), f"{name}: a prompt starting with '-' must not read as a flag"


def test_codex_config_points_at_the_rollout() -> None:
    launch = get_adapter("codex").launch(CTX)
    assert launch.env["CODEX_HOME"] == ".codex" and launch.env["ROLLWIRE_TOKEN"] == "tok"
    config = tomllib.loads(launch.files[".codex/config.toml"])
    provider = config["model_providers"][config["model_provider"]]
    assert (provider["base_url"], provider["wire_api"], provider["env_key"]) == (CTX.base_url, "responses", "ROLLWIRE_TOKEN")
    assert config["mcp_servers"]["rollwire"]["url"] == CTX.mcp_url
    # Codex's defaults: its own model, tools, sandbox and approval policy (no feature switched off)
    assert not {"model", "sandbox_mode", "approval_policy", "web_search", "features", "agents"} & set(config)
    chosen_launch = get_adapter("codex", model="m", sandbox="workspace-write").launch(CTX)
    chosen = tomllib.loads(chosen_launch.files[".codex/config.toml"])
    assert (chosen["model"], chosen["sandbox_mode"]) == ("m", "workspace-write")
    assert "mcp_servers" not in tomllib.loads(get_adapter("codex", mcp=False).launch(CTX).files[".codex/config.toml"])
    assert launch.argv[launch.argv.index("--output-last-message") + 1] == launch.final_answer_path


def test_claude_mcp_config_and_env() -> None:
    launch = get_adapter("claude-code", model="my-model").launch(CTX)
    servers = json.loads(launch.files[".rollwire/claude-mcp.json"])["mcpServers"]
    assert servers == {"rollwire": {"type": "http", "url": CTX.mcp_url}}
    assert launch.env["ANTHROPIC_BASE_URL"] == CTX.anthropic_base_url and launch.env["ANTHROPIC_API_KEY"] == "tok"
    assert "my-model" in launch.argv


def test_mini_swe_agent_config_points_litellm_at_the_proxy() -> None:
    launch = get_adapter("mini-swe-agent", max_turns=3).launch(CTX)
    config = yaml.safe_load(launch.files["mini-swe-agent.yaml"])
    assert config["model"]["model_name"] == "openai/default"
    assert config["model"]["model_kwargs"]["api_base"] == CTX.base_url and launch.env["OPENAI_API_KEY"] == "tok"
    assert config["agent"]["step_limit"] == 3 and launch.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_mini_swe_agent_runner_is_shipped_into_the_workspace_and_imports_no_rollwire() -> None:
    launch = get_adapter("mini-swe-agent").launch(CTX)
    assert launch.argv[1] == ".rollwire/mini_swe_runner.py"
    tree = ast.parse(launch.files[".rollwire/mini_swe_runner.py"])
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    outside = {name for name in imported if name.split(".")[0] not in {*sys.stdlib_module_names, "minisweagent"}}
    assert not outside, f"the runner must run in a Python without rollwire, yet imports {outside}"


def test_mini_swe_agent_python_comes_from_the_option_else_the_env_var_else_this_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(MINI_SWE_PYTHON_ENV, raising=False)
    assert get_adapter("mini-swe-agent").launch(CTX).argv[0] == sys.executable
    monkeypatch.setenv(MINI_SWE_PYTHON_ENV, "/opt/mini/bin/python")
    assert get_adapter("mini-swe-agent").launch(CTX).argv[0] == "/opt/mini/bin/python"
    assert get_adapter("mini-swe-agent", python="python3.12").launch(CTX).argv[0] == "python3.12"
    monkeypatch.setenv(MINI_SWE_PYTHON_ENV, "venv/bin/python")
    with pytest.raises(ValueError, match=f"{MINI_SWE_PYTHON_ENV} must be an absolute path"):
        get_adapter("mini-swe-agent")
    with pytest.raises(ValueError, match="option python must be an absolute path"):
        get_adapter("mini-swe-agent", python="")


NO_SITE_PYTHON = f"""#!/bin/sh
exec {sys.executable} -S "$@"
"""


def test_mini_swe_agent_on_a_python_without_it_fails_saying_how_to_fix(tmp_path: Path, silent_port: int) -> None:
    bare = tmp_path / "bare-python"  # this interpreter without its site-packages: no mini-swe-agent, no rollwire
    bare.write_text(NO_SITE_PYTHON)
    bare.chmod(0o755)
    stack = _stack(tmp_path, silent_port)
    row = run_one_task(stack, "mini-swe-agent", tmp_path / "ws", deadline_s=30, python=str(bare))
    assert row.status == "failed" and row.exit_code == 2, (row.status, row.log_tail)
    said = row.log_tail or ""
    assert f"mini-swe-agent is not installed for {sys.executable}" in said and MINI_SWE_PYTHON_ENV in said, said


def test_mini_swe_agent_that_cannot_reach_its_model_fails_with_its_stderr(
    tmp_path: Path, mini_swe_python: str, refusing_port: int
) -> None:
    row = run_one_task(
        _stack(tmp_path, refusing_port), "mini-swe-agent", tmp_path / "ws", deadline_s=60, python=mini_swe_python
    )
    assert row.status == "failed" and row.exit_code == 1, (row.status, row.log_tail)
    assert "mini-swe-agent runner: " in (row.log_tail or "") and "status 1" in (row.error or "")


@pytest.mark.parametrize(("name", "options"), [("codex", {"sandbox": "yolo"}), ("openai-agents", {"max_turns": 0})])
def test_bad_options_are_refused_by_name(name: str, options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="sandbox|max_turns"):
        get_adapter(name, **options)


def test_the_served_model_name_is_not_forced_on_codex() -> None:
    """Codex's tools depend on the model name: the CLIs leave it its default model, others get the served name."""
    from rollwire.app.cli.stack_args import with_served_model

    assert with_served_model("codex", {}, "served") == {}
    assert with_served_model("codex", {"model": "mine"}, "served") == {"model": "mine"}
    assert with_served_model("reference", {}, "served") == {"model": "served"}
