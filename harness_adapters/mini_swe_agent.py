"""Adapter for mini-swe-agent: its YAML config in the workspace, its litellm model on the rollout's base URL.

mini-swe-agent talks to models through litellm; the ``openai/<name>`` model with ``api_base`` set to the
rollout's base URL makes litellm send plain Chat Completions to the proxy (the key is the token, read by
litellm from ``OPENAI_API_KEY``). Its only tool is bash in the workspace (the local environment): it has
no MCP client, so it never sees the gateway's tools and cannot change a task's MCP environment state;
on MCP task suites it records model calls and scores what its final answer alone earns.

Which Python runs it: mini-swe-agent's litellm cannot share a virtual environment with rollwire (its boto3
pins ``python-dateutil<3``, kubernetes needs ``>=3``), so it usually lives in a venv of its own. The runner
(``mini_swe_runner``, stdlib + minisweagent only) is therefore written into the workspace and run by path
with the interpreter named by the ``python`` option, else by ``ROLLWIRE_MINI_SWE_AGENT_PYTHON``, else by the
current one (right where mini-swe-agent is installed beside rollwire; elsewhere the runner exits 2 saying so).

Where results land: the agent's submission (what follows ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) in
``final_answer.txt``; mini-swe-agent's full trajectory in ``mini.traj.json``; its output in the runtime's log.
"""

from __future__ import annotations

import importlib.resources
import os
import sys
from typing import Any

import yaml

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.harness_adapters.images import default_image
from rollwire.harness_adapters.mini_swe_runner import PYTHON_ENV

CONFIG = "mini-swe-agent.yaml"
TRAJECTORY = "mini.traj.json"
FINAL_ANSWER = "final_answer.txt"
RUNNER = ".rollwire/mini_swe_runner.py"
"""Where the runner script is written in the workspace (the harness's Python need not have rollwire)."""
QUIET_ENV = {
    "MSWEA_SILENT_STARTUP": "1",  # no banner
    "MSWEA_COST_TRACKING": "ignore_errors",  # a proxied model has no price in litellm's table
    "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",  # a retried call would be recorded twice
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm would otherwise fetch its price table from the internet
}


def mini_config(
    ctx: RolloutContext, *, model: str, max_turns: int, max_tokens: int, temperature: float, command_timeout_s: int
) -> dict[str, Any]:
    """The rollout's mini-swe-agent config (merged over its own ``mini.yaml`` by the runner)."""
    return {
        "model": {
            "model_class": "litellm",
            "model_name": f"openai/{model}",
            "cost_tracking": "ignore_errors",
            "model_kwargs": {
                "api_base": ctx.base_url,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "drop_params": True,
            },
        },
        "agent": {"step_limit": max_turns, "cost_limit": 0, "output_path": TRAJECTORY},
        "environment": {"environment_class": "local", "timeout": command_timeout_s},
    }


def harness_python(python: str | None = None) -> str:
    """The interpreter that runs the runner: the option, else ``$ROLLWIRE_MINI_SWE_AGENT_PYTHON``, else this one.

    An absolute path or a bare command name (found on the rollout's PATH); a relative path would silently
    resolve against the rollout's workspace, so it is refused.
    """
    if python is None:
        python, source = os.environ.get(PYTHON_ENV) or sys.executable, PYTHON_ENV
    else:
        source = "option python"
    if not isinstance(python, str) or not python.strip() or ("/" in python and not python.startswith("/")):
        raise ValueError(f"{source} must be an absolute path or a command name on PATH, got {python!r}")
    return python


def runner_source() -> str:
    """The runner script's text, shipped into each workspace."""
    return (importlib.resources.files("rollwire.harness_adapters") / "mini_swe_runner.py").read_text()


class MiniSweAgentAdapter:
    """Runs mini-swe-agent's default (non-interactive) agent through ``mini_swe_runner`` with its own Python."""

    name = "mini-swe-agent"

    def __init__(
        self,
        model: str | None = None,
        max_turns: int = 8,
        max_tokens: int = 256,
        temperature: float = 1.0,
        command_timeout_s: int = 30,
        python: str | None = None,
        image: str | None = None,
    ) -> None:
        if max_turns < 1 or max_tokens < 1:
            raise ValueError("max_turns and max_tokens must be at least 1")
        self.python = harness_python(python)
        self.model = model or "default"
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.command_timeout_s = command_timeout_s
        self.image = image or default_image(self.name)  # its `python` is the one with mini-swe-agent

    def launch(self, ctx: RolloutContext) -> Launch:
        config = mini_config(
            ctx,
            model=self.model,
            max_turns=self.max_turns,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            command_timeout_s=self.command_timeout_s,
        )
        argv = (self.python, RUNNER, "--config", CONFIG, "--final-answer", FINAL_ANSWER, "--", ctx.prompt)
        env = {**QUIET_ENV, "OPENAI_API_KEY": ctx.token}
        files = {CONFIG: yaml.safe_dump(config, sort_keys=False), RUNNER: runner_source()}
        return Launch(argv=argv, env=env, files=files, final_answer_path=FINAL_ANSWER, image=self.image)


__all__ = ["PYTHON_ENV", "MiniSweAgentAdapter", "harness_python", "mini_config"]
