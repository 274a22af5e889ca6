"""Fixtures for running real harnesses: the local stack as child processes on loopback, and one-task runs.

The stack is ``rollwire.app.stack.LocalStack`` (engine, env servers, gateway, proxy), started the way ``rollwire
up`` starts it, with a context long enough for Codex's and Claude Code's own prompts and an output cap for
requests that set none (Codex never does), so a random tiny model answers quickly.

mini-swe-agent lives in a venv of its own (``.ci/run`` creates ``.venv-harness/mini-swe-agent``); its tests
run with the Python named by ``ROLLWIRE_MINI_SWE_AGENT_PYTHON``, else that venv's, else this one if it has it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import anyio
import pytest

from rollwire.app.demo.teacher import build_teacher_app
from rollwire.app.serving import ServerThread
from rollwire.app.stack import LocalStack, StackInfo
from rollwire.harness_adapters.mini_swe_runner import PYTHON_ENV as MINI_SWE_PYTHON_ENV
from rollwire.mcp_servers.tasks.schema import Suite
from rollwire.orchestrator.suite_run import run_suite
from rollwire.reconstruct import load_calls
from rollwire.settings import OrchestratorSettings, Settings
from rollwire.store.db import open_engine
from rollwire.store.schema import ModelCall, Rollout
from tests.sampling import SAMPLE_SEED_ENV

MAX_MODEL_LEN = 32768
"""Above the tiny model's own 8192: Codex's instructions and tools alone are about 15k tokens."""
DEFAULT_MAX_OUTPUT_TOKENS = 32
MINI_SWE_VENV_PYTHON = Path(__file__).resolve().parents[2] / ".venv-harness" / "mini-swe-agent" / "bin" / "python"
"""Where ``.ci/run`` installs mini-swe-agent (beside rollwire's own venv, which cannot hold it)."""


def needs_binary(name: str, package: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} is not installed (npm install -g {package})")


def needs_module(module: str, package: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(find_spec(module) is None, reason=f"{package} is not installed (pip install {package})")


def _has_mini_swe_agent(python: str) -> bool:
    probe = "import importlib.util as u, sys; sys.exit(u.find_spec('minisweagent') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
    except OSError:
        return False


@cache
def mini_swe_python_or_why() -> tuple[str | None, str]:
    """The Python that has mini-swe-agent, or None and why none was found (the env var, the venv, this one)."""
    named = os.environ.get(MINI_SWE_PYTHON_ENV)
    if named:
        found = _has_mini_swe_agent(named)
        return (named, "") if found else (None, f"{MINI_SWE_PYTHON_ENV}={named} has no mini-swe-agent")
    for python in (str(MINI_SWE_VENV_PYTHON), sys.executable):
        if _has_mini_swe_agent(python):
            return python, ""
    return None, (
        f"mini-swe-agent is in neither {MINI_SWE_VENV_PYTHON} nor this Python (.ci/run creates that venv; "
        f"or set {MINI_SWE_PYTHON_ENV})"
    )


@pytest.fixture(scope="session")
def mini_swe_python() -> str:
    """The Python that runs mini-swe-agent; skips with the reason where there is none, fails under CI."""
    python, why = mini_swe_python_or_why()
    if python is None:
        if os.environ.get("CI"):  # .ci/run installs it: a missing one is a broken CI setup, not a skip
            pytest.fail(why)
        pytest.skip(why)
    return python


@pytest.fixture(scope="session")
def engine_stack(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """Bundled engine (tiny model) + env servers + gateway + proxy, as child processes, for the whole session."""
    folder = tmp_path_factory.mktemp("harness-stack")
    stack = LocalStack(
        Settings(),
        db_url=f"sqlite:///{folder / 'store.db'}",
        state_dir=folder / "state",
        log_dir=folder / "logs",
        engine_args=["--max-model-len", str(MAX_MODEL_LEN)],
    )
    with pytest.MonkeyPatch.context() as env:  # read by the proxy process only, at its start
        env.setenv("ROLLWIRE_PROXY__DEFAULT_MAX_OUTPUT_TOKENS", str(DEFAULT_MAX_OUTPUT_TOKENS))
        for name, value in SAMPLE_SEED_ENV.items():
            env.setenv(name, value)
        info = stack.start()
    try:
        yield info
    finally:
        stack.stop()


def run_one_task(
    stack: StackInfo, harness: str, workspaces: Path, *, deadline_s: float, task: str = "write-cat", **options: Any
) -> Rollout:
    """One rollout of one tiny-suite task through ``run_suite`` + the local runtime; its workspace is kept."""
    settings = Settings(orchestrator=OrchestratorSettings(workspace_root=str(workspaces), keep_workspaces=True))
    result = anyio.run(
        lambda: run_suite(
            stack, suite="tiny", harness=harness, task_ids=[task], deadline_s=deadline_s,
            harness_options=options, settings=settings,
        )
    )  # fmt: skip
    (row,) = result.rollouts
    return row


def model_calls(stack: StackInfo, rollout_id: str) -> list[ModelCall]:
    return load_calls(open_engine(stack.db_url), rollout_id)


def workspace_of(workspaces: Path, rollout_id: str) -> Path:
    """The local runtime's workspace folder of one rollout."""
    return workspaces / f"rollwire-{rollout_id}" / "workspace"


@contextmanager
def scripted_policy_stack(
    model_dir: Path, folder: Path, suites: list[Suite], max_model_len: int | None = None
) -> Iterator[tuple[Any, StackInfo]]:
    """A local stack whose upstream is the demo's scripted teacher (playing ``suites``' reference solutions)
    behind an EngineTap, so a test sees exactly what the upstream was sent and returned; ``max_model_len``:
    the context it reports (None: none, so the proxy sends output caps as asked)."""
    from tests.proxy.engine_tap import EngineTap

    app = build_teacher_app(model_dir, suites, served_name="scripted-policy", max_model_len=max_model_len)
    tap = EngineTap(app)
    with ServerThread(tap) as upstream:
        stack = LocalStack(
            Settings(), upstream=upstream.url, db_url=f"sqlite:///{folder / 'store.db'}",
            state_dir=folder / "state", log_dir=folder / "logs",
        )  # fmt: skip
        with stack as info:
            yield tap, info
