"""Export recorded trajectories for other trainers (sft / verl / trl flavours, JSONL or Parquet), as
rollwire's own trajectory dicts (``--flavor trajectory``), or a store's model calls as flat whole rows
(``--flavor calls``: one row per call, the whole request and prompt; what DuckDB or pandas read as they are).

Reads from a trace store (``--db URL``: a stopped demo's or stack's store), a running proxy's trajectory
stream (``--admin-url URL --run RUN``: the proxy's admin listener), or a JSONL file of trajectory dicts
(``--input FILE``), and writes one row per segment that holds sampled tokens (one line per trajectory for
``trajectory``).
``rollwire traces export`` is the same command. Examples:

  rollwire export --db sqlite:///path/to/store.db --flavor trl --out trl.jsonl
  rollwire export --admin-url http://127.0.0.1:8001 --run RUN --format parquet --out sft.parquet
  rollwire export --db sqlite:///path/to/store.db --flavor calls --format parquet --out calls.parquet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollwire.settings import Settings

if TYPE_CHECKING:
    from rollwire.trajectory import Trajectory

HELP = "export recorded trajectories as JSONL/Parquet for other trainers"


TRAJECTORY = "trajectory"
"""The flavour that writes whole Trajectory dicts (what ``--input`` and the trajectory stream carry)."""
CALLS = "calls"
"""The flavour that writes a store's model calls, one flat row each (``reconstruct.call_rows``)."""


def add_arguments(parser: argparse.ArgumentParser, with_db: bool = True) -> None:
    from rollwire.trainer.export import FLAVORS

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    source = parser.add_argument_group("where from (one of)")
    if with_db:
        source.add_argument("--db", default=None, metavar="URL", help="a trace store's SQLAlchemy URL")
    source.add_argument(
        "--admin-url", default=None, metavar="URL",
        help="the proxy's admin listener, whose trajectory stream to read (default: the trainer's admin_url setting)",
    )  # fmt: skip
    source.add_argument("--input", type=Path, default=None, help="a JSONL file of trajectory dicts")
    pick = parser.add_argument_group("what")
    pick.add_argument("--run", default=None, help="run id whose trajectories to export (a store: default all runs)")
    pick.add_argument("--all", action="store_true", help="a store: include rollouts that have not finished")
    pick.add_argument("--min-reward", type=float, default=None, help="only rollouts with at least this reward")
    parser.add_argument("--operator-key", default=None, help="operator key (default: the trainer/proxy setting)")
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="output format")
    parser.add_argument(
        "--flavor", choices=[*FLAVORS, TRAJECTORY, CALLS], default="sft",
        help="row layout (default sft; calls: a store's model calls, --db only)",
    )  # fmt: skip
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (verl decodes prompts); default tiny")
    parser.add_argument("--out", type=Path, required=True, help="output file")


def _store_rollouts(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The store (read-only) and the ids of the rollouts to export from it, oldest first."""
    from sqlmodel import col, select

    from rollwire.errors import InvalidRequest
    from rollwire.store import Rollout, open_engine, session_scope

    if args.db.startswith("sqlite:///") and not Path(args.db.split("///", 1)[1]).is_file():
        raise InvalidRequest(f"no trace store at {args.db}", param="db")
    engine = open_engine(args.db, read_only=True)
    with session_scope(engine) as session:
        query = select(Rollout).order_by(col(Rollout.created_ns))
        if args.run:
            query = query.where(Rollout.run_id == args.run)
        if not args.all:
            query = query.where(col(Rollout.finished_seq).is_not(None))
        return engine, [r.id for r in session.exec(query).all()]


def _from_store(args: argparse.Namespace) -> list[Trajectory]:
    from rollwire.reconstruct import reconstruct

    engine, ids = _store_rollouts(args)
    return [reconstruct(engine, rollout_id) for rollout_id in ids]


def _from_stream(args: argparse.Namespace, settings: Settings) -> list[Trajectory]:
    from rollwire.errors import InvalidRequest
    from rollwire.trainer.stream import StreamConfig, TrajectoryStream

    run = args.run or settings.trainer.run
    if not run:
        raise InvalidRequest("give --run (or --input FILE)", param="run")
    key = args.operator_key or settings.trainer.operator_key or settings.proxy.operator_key
    stream = TrajectoryStream(StreamConfig(args.admin_url or settings.trainer.admin_url, key, run, wait_s=0.0))
    out: list[Trajectory] = []
    try:
        while batch := stream.poll():
            out.extend(batch)
            print(f"\rread {len(out)} trajectories", end="", file=sys.stderr, flush=True)
    finally:
        stream.close()
    print(file=sys.stderr)
    return out


def _export_calls(args: argparse.Namespace) -> int:
    from rollwire.errors import InvalidRequest
    from rollwire.reconstruct import call_rows
    from rollwire.trainer.export import write_rows

    if not getattr(args, "db", None):
        raise InvalidRequest("the calls flavor reads a store's model calls: give --db URL", param="flavor")
    engine, ids = _store_rollouts(args)
    rows = call_rows(engine, ids)
    write_rows(rows, args.out, args.format)
    print(f"wrote {len(rows)} rows (calls, {args.format}) from {len(ids)} rollouts to {args.out}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.errors import InvalidRequest
    from rollwire.model_names import resolve_model
    from rollwire.tokenizers import load_tokenizer
    from rollwire.trainer.export import export_rows, write_rows
    from rollwire.trajectory import Trajectory

    sources = (("--db", getattr(args, "db", None)), ("--admin-url", args.admin_url), ("--input", args.input))
    named = [flag for flag, value in sources if value]
    if len(named) > 1:
        raise InvalidRequest(f"give one source, not {' and '.join(named)}")
    if args.flavor == CALLS:
        return _export_calls(args)
    if args.input is not None:
        if not args.input.is_file():
            raise InvalidRequest(f"no such file {args.input}", param="input")
        try:
            lines = [ln for ln in args.input.read_text().splitlines() if ln.strip()]
            trajectories = [Trajectory.from_dict(json.loads(ln)) for ln in lines]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidRequest(f"{args.input} is not a JSONL file of trajectories: {exc}", param="input") from exc
    elif getattr(args, "db", None):
        trajectories = _from_store(args)
    else:
        trajectories = _from_stream(args, settings)
    if args.flavor == TRAJECTORY:
        if args.format != "jsonl":
            raise InvalidRequest("the trajectory flavor is JSONL only", param="format")
        floor = args.min_reward
        rows = [t.to_dict() for t in trajectories if floor is None or (t.reward is not None and t.reward >= floor)]
    else:
        tokenizer = None
        if args.flavor == "verl":
            tokenizer = load_tokenizer(resolve_model(args.tokenizer or settings.trainer.model, settings.home))
        rows = export_rows(trajectories, args.flavor, tokenizer=tokenizer, min_reward=args.min_reward)
    write_rows(rows, args.out, args.format)
    print(
        f"wrote {len(rows)} rows ({args.flavor}, {args.format}) from {len(trajectories)} trajectories to {args.out}",
        file=sys.stderr,
    )
    return 0
