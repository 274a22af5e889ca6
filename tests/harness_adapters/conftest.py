"""Fixtures for running real harnesses: the local stack as child processes on loopback, and one-task runs.

The stack is ``rollwire.stack.LocalStack`` (engine, env servers, gateway, proxy), started the way ``rollwire
up`` starts it, with a context long enough for Codex's and Claude Code's own prompts and an output cap for
requests that set none (Codex never does), so a random tiny model answers quickly.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import anyio
import pytest

from rollwire.orchestrator.suite_run import run_suite
from rollwire.reconstruct import load_calls
from rollwire.settings import OrchestratorSettings, Settings
from rollwire.stack import LocalStack, StackInfo
from rollwire.store.db import open_engine
from rollwire.store.schema import ModelCall, Rollout

MAX_MODEL_LEN = 32768
"""Above the tiny model's own 8192: Codex's instructions and tools alone are about 15k tokens."""
DEFAULT_MAX_OUTPUT_TOKENS = 32


def needs_binary(name: str, package: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} is not installed (npm install -g {package})")


def needs_module(module: str, package: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(find_spec(module) is None, reason=f"{package} is not installed (pip install {package})")


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
