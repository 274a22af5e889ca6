"""Runs mini-swe-agent through its Python API on one task, with the config file the adapter wrote.

Self-contained on purpose (stdlib + minisweagent, never rollwire): mini-swe-agent usually has a virtual
environment of its own, so the adapter writes this file into the rollout's workspace and runs it by path,
``PYTHON .rollwire/mini_swe_runner.py --config mini-swe-agent.yaml --final-answer final_answer.txt -- TASK``,
with the Python that has mini-swe-agent (2.x).
The config is merged over mini-swe-agent's own ``mini.yaml`` (its prompts) exactly as its ``mini`` command
merges ``-c`` files, then its ``get_model`` / ``get_environment`` / ``get_agent`` build a litellm model, a
local bash environment and the non-interactive ``default`` agent. (The ``mini`` command itself would
first ask setup questions on a terminal, and keeps the submission only inside its trajectory file.)

Exit status 0 when the agent loop ended by itself (submitted, step limit, repeated format errors); 1 when
it raised (e.g. the model endpoint failed), with the reason on stderr; 2 when the config file is missing or
this Python has no mini-swe-agent.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

BASE_CONFIG = "mini.yaml"
"""mini-swe-agent's built-in config whose prompts the rollout config is merged over."""
PYTHON_ENV = "ROLLWIRE_MINI_SWE_AGENT_PYTHON"
"""The variable that picks the Python this runner runs with (read by the adapter, named in errors here)."""


def load_config(path: Path) -> dict[str, Any]:
    from minisweagent.config import get_config_from_spec
    from minisweagent.utils.serialize import recursive_merge

    return dict(recursive_merge(get_config_from_spec(BASE_CONFIG), get_config_from_spec(path)))


def run_mini(config: dict[str, Any], instruction: str) -> dict[str, Any]:
    """One task, start to end; returns the agent's exit info (``exit_status``, ``submission``)."""
    from minisweagent.agents import get_agent
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model

    model = get_model(config=config.get("model", {}))
    env = get_environment(config.get("environment", {}), default_type="local")
    agent = get_agent(model, env, config.get("agent", {}), default_type="default")
    return dict(agent.run(instruction))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python mini_swe_runner.py",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("instruction", help="the task, as the user would say it")
    parser.add_argument("--config", type=Path, required=True, help="mini-swe-agent YAML merged over its mini.yaml")
    parser.add_argument("--final-answer", type=Path, default=Path("final_answer.txt"), help="file for the submission")
    args = parser.parse_args(argv)
    if not args.config.is_file():
        print(f"mini-swe-agent runner: no config file at {args.config}", file=sys.stderr)
        return 2
    if find_spec("minisweagent") is None:
        print(
            f"mini-swe-agent runner: mini-swe-agent is not installed for {sys.executable}; "
            f"install it there (pip install 'mini-swe-agent>=2.4') or set {PYTHON_ENV} "
            "(or the adapter's python option) to a Python that has it",
            file=sys.stderr,
        )
        return 2
    try:
        info = run_mini(load_config(args.config), args.instruction)
    except Exception as exc:  # the harness failed: say why in one line, exit 1 (the log keeps the rest)
        print(f"mini-swe-agent runner: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 1
    submission = str(info.get("submission") or "")
    args.final_answer.write_text(submission)
    print(f"mini-swe-agent: {info.get('exit_status') or 'ended'}")
    print(submission)
    return 0


if __name__ == "__main__":
    sys.exit(main())
