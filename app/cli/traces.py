"""Look at the proxy's trace store: ``ls`` lists rollouts, ``show`` prints one trajectory with sampled tokens
(the ones training learns from) marked apart from prompt tokens, ``ui`` serves the trace viewer over it,
``export`` is ``rollwire export`` on this store. Looking changes nothing: the store is opened read-only (no
schema created or migrated, no run recorded), so a demo's store, or a running proxy's, stays as it was.

``--db URL`` goes before or after the action. Each ``rollwire demo`` run records into its own store
(``<home>/demo/<time>/store.db``); ``rollwire traces ls`` without a store lists those it finds. Examples:

  rollwire traces ls --db sqlite:///path/to/store.db
  rollwire traces show ROLLOUT --db sqlite:///path/to/store.db
  rollwire traces ui --db sqlite:///path/to/store.db       (then open the URL it prints)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

HELP = "list, show and export recorded trajectories from the trace store"


DB_HELP = "SQLAlchemy URL of the trace store (default: SQLite in the home folder)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rollwire.app.cli import export

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--db", default=None, metavar="URL", help=DB_HELP)
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
    ui = sub.add_parser("ui", help="serve the trace viewer over this store, read-only, until Ctrl-C")
    ui.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=8002, help="port to listen on (default 8002; 0: any free one)")
    ui.add_argument(
        "--model", default=None, metavar="PATH", help="tokenizer folder for the token view (default: the tiny model)"
    )
    exporter = sub.add_parser(
        "export", help="the same as `rollwire export --db URL` (this store's trajectories)", description=export.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    export.add_arguments(exporter, with_db=False)
    for action in (ls, show, ui, exporter):  # `traces ls --db URL` as well as `traces --db URL ls`
        action.add_argument("--db", default=argparse.SUPPRESS, metavar="URL", help=DB_HELP)


def demo_stores(home: Path) -> list[Path]:
    """The stores of the demo runs under ``home`` (each run records into its own), newest first."""
    return sorted((home / "demo").glob("*/store.db"), reverse=True)


def _no_store(url: str, settings: Settings, action: str) -> int:
    stores = demo_stores(settings.home)
    if not stores:
        raise InvalidRequest(f"no trace store at {url} (`rollwire up` or `rollwire demo` make one; or give --db URL)")
    if action != "ls":
        raise InvalidRequest(
            f"no trace store at {url}; give --db URL (the newest demo run's: --db sqlite:///{stores[0]})"
        )
    print(f"no trace store at {url}; each demo run recorded into its own store (newest first):")
    for store in stores:
        print(f"  rollwire traces ls --db sqlite:///{store}")
    return 0


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
    from rollwire.timeline import format_entry

    trajectory = reconstruct(engine, args.rollout)
    decode = (lambda ids: " ".join(map(str, ids))) if args.ids else _decoder(args, settings)
    print(
        f"rollout {trajectory.rollout_id}  run {trajectory.run_id}  status {trajectory.status}  reward {trajectory.reward}"
    )
    timeline = trajectory.metadata.get("timeline") or []
    kinds = [e["kind"] for e in timeline]
    print(
        f"\n── timeline: {kinds.count('model_call')} model call(s) and {kinds.count('tool_event')} tool call(s) in the "
        "order they started (start, duration)"
    )
    for entry in timeline:
        print(format_entry(entry))
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
    from rollwire.model_names import resolve_model
    from rollwire.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(resolve_model(args.model, settings.home))
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.store import open_engine

    if args.action == "export":  # `rollwire export`, on this store unless a proxy's admin URL or a file is named
        from rollwire.app.cli import export

        if not (args.admin_url or args.input):
            args.db = args.db or settings.store_url()
        return export.run(args, settings)
    url = args.db or settings.store_url()
    missing = url.startswith("sqlite:///") and not url.endswith(":memory:") and not Path(url[10:]).is_file()
    if missing and args.db:
        raise InvalidRequest(f"no trace store at {url}")
    if missing:
        return _no_store(url, settings, args.action)
    engine = open_engine(url, read_only=True)
    if args.action == "ls":
        return _ls(engine, args)
    if args.action == "ui":
        return _ui(engine, url, args, settings)
    return _show(engine, args, settings)


def _ui(engine: Any, url: str, args: argparse.Namespace, settings: Settings) -> int:
    import secrets

    from rollwire.app.serving import listening_socket, serve
    from rollwire.model_names import resolve_model
    from rollwire.proxy.render import Renderer
    from rollwire.proxy.ui.app import create_viewer_app
    from rollwire.store.db import redact

    renderer = Renderer.from_folder(resolve_model(args.model, settings.home))
    key = settings.proxy.operator_key or secrets.token_urlsafe(24)
    sock = listening_socket(args.host, args.port)
    port = sock.getsockname()[1]
    print(f"rollwire traces ui: the trace viewer over {redact(url)} (read-only), until Ctrl-C", flush=True)
    if settings.proxy.operator_key:  # a key given in the environment is not echoed
        print(f"  open http://{args.host}:{port}/ui/?key=<operator key>", flush=True)
    else:
        print(f"  open http://{args.host}:{port}/ui/?key={key}", flush=True)
    try:
        return serve(create_viewer_app(engine, renderer, key), sock)
    finally:
        engine.dispose()
