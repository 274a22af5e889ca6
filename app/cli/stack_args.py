"""What the commands that run harnesses share: which stack to run against, and the adapter's options.

``rollwire rollouts`` and ``rollwire run-harness`` both take ``--stack FILE`` (default: the file
``rollwire up`` writes) or explicit URLs, and repeatable ``--option KEY=VALUE`` for the adapter.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.settings import Settings


def add_option_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE",
        help="harness adapter option, repeatable (e.g. max_turns=2); VALUE is JSON when it parses, else a string",
    )  # fmt: skip


def add_sandbox_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--no-sandbox", action="store_true",
        help="local runtime: run harnesses WITHOUT the bubblewrap sandbox, with your full access to this machine "
        "(for where no sandbox can be made: by default the run refuses to start there)",
    )  # fmt: skip


def apply_sandbox_argument(args: argparse.Namespace, settings: Settings) -> Settings:
    """Settings with the sandbox off when ``--no-sandbox`` was given."""
    if not args.no_sandbox:
        return settings
    return settings.model_copy(update={"orchestrator": settings.orchestrator.model_copy(update={"sandbox": False})})


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that say which stack a command runs against (read back by ``stack_from_args``)."""
    where = parser.add_argument_group("which stack")
    where.add_argument("--stack", type=Path, default=None, metavar="FILE", help="stack file (default: rollwire up's)")
    where.add_argument("--proxy-url", default=None, help="proxy base URL rollouts call (instead of a stack file)")
    where.add_argument("--gateway-url", default=None, help="MCP gateway base URL (with --proxy-url)")
    where.add_argument("--db", default=None, metavar="URL", help="store URL (with --proxy-url; default: home)")
    where.add_argument("--state-dir", default=None, help="env servers' state folder (with --proxy-url; default: home)")


def harness_options(pairs: list[str]) -> dict[str, Any]:
    """``--option KEY=VALUE`` pairs as adapter keyword arguments."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"--option {pair!r} must look like KEY=VALUE")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def default_state_dir(settings: Settings) -> str:
    """The env servers' state folder where no flag names one: the settings', else ``<home>/mcp_state``."""
    return settings.mcp.state_dir or str(settings.home / "mcp_state")


def stack_from_args(args: argparse.Namespace, settings: Settings) -> Any:
    """The StackInfo to run against: explicit URLs, else the stack file (``<home>/stack.json`` by default)."""
    from rollwire.app.stack import StackInfo, stack_file

    if args.proxy_url:
        if not args.gateway_url:
            raise InvalidRequest("--proxy-url needs --gateway-url too (the MCP gateway rollouts use)")
        state = args.state_dir or default_state_dir(settings)
        db = args.db or settings.store_url()
        return StackInfo(args.proxy_url, args.gateway_url, "", None, "", db, state, "")  # no admin listener known
    return StackInfo.load(args.stack or stack_file(settings.home))


def with_served_model(harness: str, options: dict[str, Any], model: str) -> dict[str, Any]:
    """Name the stack's served model to adapters that take a ``model`` option, unless the user named one or the
    adapter runs its harness's own default model (``uses_default_model``: Codex's tools depend on the name)."""
    from rollwire.orchestrator.suite_run import build_adapter

    if not model or "model" in options:
        return options
    try:
        if getattr(build_adapter(harness, options), "uses_default_model", False):
            return options
        build_adapter(harness, {**options, "model": model})
    except InvalidRequest:  # a plugin adapter without a model option: it keeps its own default
        return options
    return {**options, "model": model}


__all__ = [
    "add_option_argument",
    "add_sandbox_argument",
    "add_stack_arguments",
    "apply_sandbox_argument",
    "default_state_dir",
    "harness_options",
    "stack_from_args",
    "with_served_model",
]
