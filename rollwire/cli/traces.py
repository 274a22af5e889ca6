"""Look at the proxy's trace store: ``ls`` lists rollouts, ``show`` prints one trajectory with sampled tokens
(the ones training learns from) marked apart from prompt tokens, ``export`` writes trajectories as JSONL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

HELP = "list, show and export recorded trajectories from the trace store"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="SQLAlchemy URL of the trace store (default SQLite in the home folder)",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("ls", help="list rollouts (newest first) with their call and segment counts")
    ls.add_argument("--run", default=None, help="only this run")
    ls.add_argument("--limit", type=int, default=50, help="most rollouts listed (default 50)")
    show = sub.add_parser("show", help="print a rollout's trajectory: [prompt] tokens plain, <<sampled>> tokens marked")
    show.add_argument("rollout", help="rollout id")
    show.add_argument(
        "--model", default=None, metavar="PATH", help="tokenizer folder for decoding (default: the tiny model)"
    )
    show.add_argument("--ids", action="store_true", help="print token ids instead of decoded text")
    export = sub.add_parser("export", help="write trajectories as JSONL (one Trajectory per line)")
    export.add_argument("--run", default=None, help="only this run")
    export.add_argument("--all", action="store_true", help="include rollouts that have not finished")
    export.add_argument("--out", default="-", help="output file (default stdout)")


def _ls(engine: Any, args: argparse.Namespace) -> int:
    from sqlmodel import func, select

    from rollwire.store import ModelCall, Rollout, session_scope

    with session_scope(engine) as session:
        query = select(Rollout).order_by(Rollout.created_ns.desc()).limit(args.limit)  # type: ignore[attr-defined]
        if args.run:
            query = query.where(Rollout.run_id == args.run)
        rollouts = list(session.exec(query).all())
        print(f"{'rollout':<22} {'run':<16} {'status':<10} {'reward':>7} {'calls':>5} {'segments':>8}")
        for r in rollouts:
            calls = session.exec(select(func.count()).where(ModelCall.rollout_id == r.id)).one()
            segs = session.exec(
                select(func.count(func.distinct(ModelCall.segment_index))).where(ModelCall.rollout_id == r.id)
            ).one()
            reward = "-" if r.reward is None else f"{r.reward:.3f}"
            print(f"{r.id:<22} {r.run_id:<16} {r.status!s:<10} {reward:>7} {calls:>5} {segs:>8}")
    return 0


def _show(engine: Any, args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.reconstruct import reconstruct

    trajectory = reconstruct(engine, args.rollout)
    decode = (lambda ids: " ".join(map(str, ids))) if args.ids else _decoder(args, settings)
    print(
        f"rollout {trajectory.rollout_id}  run {trajectory.run_id}  status {trajectory.status}  reward {trajectory.reward}"
    )
    for n, segment in enumerate(trajectory.segments):
        why = f"  (new segment: {segment.break_reason})" if segment.break_reason else ""
        print(
            f"\n── segment {n}: {len(segment.token_ids)} tokens, {segment.num_sampled} sampled, calls {segment.call_ids}{why}"
        )
        spans: list[tuple[int, list[int]]] = []
        for token, mask in zip(segment.token_ids, segment.loss_mask):
            if spans and spans[-1][0] == mask:
                spans[-1][1].append(token)
            else:
                spans.append((mask, [token]))
        for mask, ids in spans:
            text = decode(ids)
            sys.stdout.write(f"<<{text}>>" if mask else text)
        print()
    return 0


def _decoder(args: argparse.Namespace, settings: Settings) -> Any:
    from rollwire.tiny_model import ensure_tiny_model
    from rollwire.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(args.model or ensure_tiny_model(settings.home))
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def _export(engine: Any, args: argparse.Namespace) -> int:
    from sqlmodel import select

    from rollwire.reconstruct import reconstruct
    from rollwire.store import Rollout, session_scope

    with session_scope(engine) as session:
        query = select(Rollout).order_by(Rollout.created_ns)  # type: ignore[arg-type]
        if args.run:
            query = query.where(Rollout.run_id == args.run)
        if not args.all:
            query = query.where(Rollout.finished_seq != None)
        ids = [r.id for r in session.exec(query).all()]
    with contextlib.ExitStack() as stack:
        out = sys.stdout if args.out == "-" else stack.enter_context(open(args.out, "w", encoding="utf-8"))
        for rollout_id in ids:
            out.write(json.dumps(reconstruct(engine, rollout_id).to_dict()) + "\n")
    print(f"exported {len(ids)} trajectories", file=sys.stderr)
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.store import open_engine

    url = args.db or settings.store_url()
    if url.startswith("sqlite:///") and not url.endswith(":memory:"):
        from pathlib import Path

        if not Path(url.split("///", 1)[1]).is_file():
            raise InvalidRequest(f"no trace store at {url}")
    engine = open_engine(url)
    if args.action == "ls":
        return _ls(engine, args)
    if args.action == "show":
        return _show(engine, args, settings)
    return _export(engine, args)
