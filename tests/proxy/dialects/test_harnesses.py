"""Must-show 2: the real Codex CLI (``codex exec``) and Claude Code (``claude -p``), configured only through
their own config files and environment, run a task to its end against proxy + engine; every request they
made was answered without a 4xx and the rollout's trajectory is exact. Skipped when a binary is absent."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rollwire.harness_adapters.claude_code import QUIET_ENV  # the same quiet environment the adapter sets
from tests.proxy.dialects.conftest import Stack

pytestmark = pytest.mark.needs_harness
TIMEOUT_S = 240


def _needs(name: str, package: str) -> pytest.MarkDecorator:
    """Skip at collection (before the stack starts) when the harness binary is absent."""
    reason = f"{name} is not installed (npm install -g {package}); .ci/run installs it"
    return pytest.mark.skipif(shutil.which(name) is None, reason=reason)


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", **QUIET_ENV}
    return subprocess.run(
        argv,
        check=False,
        cwd=cwd,
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _answered(stack: Stack, token: str, since: int) -> list[tuple[str, str, int]]:
    return [a for a in stack.statuses.answers[since:] if f"/r/{token}/" in a[1]]


CODEX_CONFIG = """\
model_provider = "rollwire"

[model_providers.rollwire]
name = "rollwire"
base_url = "{base_url}"
wire_api = "responses"
env_key = "ROLLWIRE_TOKEN"
request_max_retries = 0
stream_max_retries = 0
"""
"""Codex at its defaults (its default model, tools, sandbox and approval policy): only where the model is."""


@_needs("codex", "@openai/codex")
def test_codex_exec_runs_to_its_end(dialect_stack: Stack, tmp_path: Path) -> None:
    codex = str(shutil.which("codex"))
    rollout = dialect_stack.new_rollout()
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(CODEX_CONFIG.format(base_url=rollout["base_url"]))
    first, since = len(dialect_stack.tap.calls), len(dialect_stack.statuses.answers)
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(home), "ROLLWIRE_TOKEN": rollout["token"]}
    done = _run([codex, "exec", "--skip-git-repo-check", "List the files here."], work, env)
    assert done.returncode == 0, done.stderr[-2000:]
    answered = _answered(dialect_stack, rollout["token"], since)
    assert answered and all(path.endswith("/v1/responses") and status == 200 for _, path, status in answered), answered
    dialect_stack.check_exact(rollout["id"], first)


@_needs("claude", "@anthropic-ai/claude-code")
def test_claude_code_print_mode_runs_to_its_end(dialect_stack: Stack, tmp_path: Path) -> None:
    claude = str(shutil.which("claude"))
    rollout = dialect_stack.new_rollout()
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "HOME": str(tmp_path),
        "CLAUDE_CONFIG_DIR": str(tmp_path / ".claude"),
        "ANTHROPIC_BASE_URL": rollout["anthropic_base_url"],
        "ANTHROPIC_API_KEY": rollout["token"],
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "24",
        "MAX_THINKING_TOKENS": "0",
    }
    argv = [claude, "-p", "List the files here.", "--model", "claude-sonnet-4-5", "--max-turns", "2"]
    # one tool and a short system prompt keep the prompt inside the tiny model's context
    argv += ["--tools", "Read", "--system-prompt", "You are a terse coding agent."]
    first, since = len(dialect_stack.tap.calls), len(dialect_stack.statuses.answers)
    done = _run(argv, work, env)
    # a random tiny model often runs into the output cap, which Claude Code reports as its own error and exits 1:
    # that is the harness judging the sample, not the protocol failing
    # (or, should it emit a tool call, into --max-turns)
    said = done.stdout + done.stderr
    judged = "output token maximum" in said or "max turns" in said.lower()
    assert done.returncode == 0 or judged, said[-2000:]
    answered = _answered(dialect_stack, rollout["token"], since)
    assert answered and all(status == 200 for _, _, status in answered), answered
    dialect_stack.check_exact(rollout["id"], first)
