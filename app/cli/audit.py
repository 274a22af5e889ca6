"""Audit how faithfully a run's calls were recorded, per harness version (from each call's User-Agent) and per
turn: calls, calls spliced exactly onto an earlier call's ids, prompt tokens reused and prefilled again, and
every segment break by cause, from a closed list (``rollwire audit --causes`` prints it). A break of cause
"unknown" is a defect in rollwire: --fail-on-unknown exits 1 on one (for CI).

  rollwire audit RUN --dir ~/.rollwire/rl/rl-1a2b            # a run folder's store
  rollwire audit --rollout ROLLOUT --db sqlite:///store.db    # one rollout
  rollwire audit RUN --harness codex_cli_rs --json            # one harness, as JSON
  rollwire audit RUN --html audit.html                        # a page with every break and its recorded reason
  rollwire audit RUN --markdown                               # one table row per harness version
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rollwire.app.cli.store_args import add_store_arguments, store_url
from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

HELP = "how faithfully a run's calls were recorded: per harness version and turn, splices and breaks by cause"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "run", metavar="RUN", nargs="?", help="the run's id (`rollwire traces ls` shows each rollout's)"
    )
    parser.add_argument("--rollout", metavar="ID", help="audit this rollout only")
    parser.add_argument(
        "--harness",
        metavar="NAME",
        help="only calls of this harness: its client name (codex_cli_rs) or adapter (codex)",
    )
    add_store_arguments(parser)
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print the audit as JSON instead of tables")
    shape.add_argument(
        "--markdown", action="store_true", help="print one Markdown row per harness version (the harness matrix)"
    )
    parser.add_argument("--html", metavar="FILE", help="also write the audit as an HTML page to FILE")
    parser.add_argument("--fail-on-unknown", action="store_true", help="exit 1 when any break has cause unknown")
    parser.add_argument("--causes", action="store_true", help="print the closed list of causes and what each means")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.proxy.audit import CAUSES, as_html, as_markdown, as_text, audit
    from rollwire.store import open_engine

    if args.causes:
        print("\n".join(f"{cause:24} {meaning}" for cause, meaning in CAUSES.items()))
        return 0
    if not (args.run or args.rollout):
        raise InvalidRequest("name a RUN or --rollout ID (`rollwire traces ls` lists them)")
    found = audit(open_engine(store_url(args, settings), read_only=True), run_id=args.run, rollout_id=args.rollout,
                  harness=args.harness)  # fmt: skip
    if args.json:
        print(json.dumps(found.as_json(), indent=2))
    elif args.markdown:
        print(as_markdown(found))
    else:
        print(as_text(found))
    if args.html:
        title = f"rollwire audit: {'rollout ' + args.rollout if args.rollout else 'run ' + args.run}"
        Path(args.html).write_text(as_html(found, title), encoding="utf-8")
        print(f"audit page: {args.html}", file=sys.stderr)
    unknown = found.unknown()
    if args.fail_on_unknown and unknown:
        print(f"rollwire audit: {len(unknown)} breaks of unknown cause", file=sys.stderr)
        return 1
    return 0


__all__ = ["HELP", "add_arguments", "run"]
