"""Write an RL run's report from its store: train reward and held-out pass@1 across policy versions (versions.png),
held-out pass@k and pass^k per evaluated version, per-task pass rates, the curriculum's draws (draws.png), and
where other runs in the store ran the same suite with another harness, one table of pass@k per harness.

  rollwire report demo --db sqlite:///path/to/out/store.db --out report/
  rollwire report rl-1a2b --dir ~/.rollwire/rl/rl-1a2b       # a `rollwire rl` run's folder holds its store
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rollwire.app.cli.store_args import add_store_arguments, store_url
from rollwire.settings import Settings

HELP = "write an RL run's report (curves across policy versions, pass@k, draws, harnesses) from its store"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run", metavar="RUN", help="the run's id (`rollwire traces ls` lists rollouts with theirs)")
    add_store_arguments(parser)
    parser.add_argument("--out", metavar="DIR", help="where report.html and the PNGs go (default: <dir>/report or ./report-RUN)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.app.rl.report import write
    from rollwire.rollouts import RolloutBook
    from rollwire.store.db import open_engine, session_scope
    from rollwire.store.schema import Run

    db_url = store_url(args, settings)
    out = Path(args.out) if args.out else (Path(args.dir) / "report" if args.dir else Path(f"report-{args.run}"))
    engine = open_engine(db_url)
    with session_scope(engine) as session:
        runs = [run.id for run in session.query(Run).all()]
    paths = write(RolloutBook(engine), args.run, out, runs)
    print(f"report: {paths['html']}   curves: {paths['versions']}   draws: {paths['draws']}")
    return 0


__all__ = ["HELP", "add_arguments", "run"]
