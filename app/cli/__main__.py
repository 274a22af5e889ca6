"""``rollwire``: build Settings once, configure logging, dispatch to a subcommand module.

Each subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args, settings) -> int``; heavy imports happen inside ``run`` so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from rollwire.errors import RollwireError

COMMANDS: dict[str, str] = {
    "agent": "rollwire.app.cli.agent",
    "demo": "rollwire.app.cli.demo",
    "rl": "rollwire.app.cli.rl",
    "report": "rollwire.app.cli.report",
    "audit": "rollwire.app.cli.audit",
    "up": "rollwire.app.cli.up",
    "engine": "rollwire.app.cli.engine",
    "vllm": "rollwire.app.cli.vllm",
    "train": "rollwire.app.cli.train",
    "export": "rollwire.app.cli.export",
    "proxy": "rollwire.app.cli.proxy",
    "traces": "rollwire.app.cli.traces",
    "mcp": "rollwire.app.cli.mcp",
    "k8s": "rollwire.app.cli.k8s",
    "rollouts": "rollwire.app.cli.rollouts",
    "replay": "rollwire.app.cli.replay",
    "run-harness": "rollwire.app.cli.run_harness",
}
"""Subcommand name -> module; modules are imported only to build the parser or run."""


def _accept_log_format(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` also after the command (``rollwire mcp gateway --log-format json``), at every level;
    SUPPRESS keeps a value given before the command when it is not repeated."""
    parser.add_argument("--log-format", choices=["text", "json"], default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _accept_log_format(child)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollwire",
        description="Train LLM agents with RL inside the harnesses they already use. "
        "Settings also come from ROLLWIRE_* env vars (a flag beats the env var, which beats the default).",
    )
    parser.add_argument("--log-level", default=None, help="logging level (default INFO; env ROLLWIRE_LOG_LEVEL)")
    parser.add_argument(
        "--log-format", default=None, choices=["text", "json"],
        help="log lines as text, or one JSON object per line with run/rollout/call ids (default text; env ROLLWIRE_LOG_FORMAT)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(command)
        _accept_log_format(command)
        command.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from rollwire.logging import configure_logging
    from rollwire.settings import Settings

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        settings = Settings()
    except Exception as exc:  # a malformed ROLLWIRE_* variable: one readable line
        print(f"rollwire: bad settings: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if args.log_format is not None:  # the parts a command starts (rollwire up, the demo) log the same way
        settings = settings.model_copy(update={"log_format": args.log_format})
    try:
        configure_logging(args.log_level or settings.log_level, settings.log_format)
    except ValueError as exc:  # ROLLWIRE_LOG_FORMAT set to an unknown name
        print(f"rollwire: bad settings: {exc}", file=sys.stderr)
        return 2
    try:
        return int(args._module.run(args, settings) or 0)
    except RollwireError as exc:
        print(f"rollwire {args.command}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _forget_unhandled_interrupt()
        return 130
    except BrokenPipeError:  # `rollwire audit RUN | head`: the reader left; say nothing more, as other tools do
        _stop_writing_stdout()
        return 141


def _stop_writing_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not raise on the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _forget_unhandled_interrupt() -> None:
    """Exit 130 under ``python -m rollwire.app.cli`` too, not by SIGINT.

    CPython remembers a KeyboardInterrupt that escaped an ``exec``/``eval`` of a string (dataclass and
    namedtuple creation run one) even after it was caught. Under ``python -m`` it then kills the process with
    SIGINT at exit, whatever status was asked for. A Ctrl-C or ``kill`` that lands during such an ``exec`` would
    end the command as -2 instead of 130. Evaluating a string that raises nothing clears that memory; the
    ``rollwire`` script itself exits through another path and never needed it.
    """
    exec("")  # noqa: S102 -- an empty string, evaluated only for the side effect above


if __name__ == "__main__":
    sys.exit(main())
