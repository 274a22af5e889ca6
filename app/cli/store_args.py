"""Which store a reading command looks at: ``--db URL``, or ``--dir DIR``, a run folder of ``rollwire rl`` or
``rollwire demo`` (its ``store.db``); the settings' store when neither is given."""

from __future__ import annotations

import argparse
from pathlib import Path

from rollwire.errors import InvalidRequest
from rollwire.settings import Settings


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="URL", help="the store's URL (default: the settings' store)")
    where.add_argument("--dir", metavar="DIR", help="a run folder of `rollwire rl` or `rollwire demo` (its store.db)")


def store_url(args: argparse.Namespace, settings: Settings) -> str:
    """The store's URL; ``InvalidRequest`` where ``--dir`` holds none, or a SQLite file named by ``--db`` is missing."""
    if args.dir:
        store = Path(args.dir).expanduser() / "store.db"
        if not store.is_file():
            raise InvalidRequest(f"{args.dir} holds no store.db: give the run's folder, or --db URL")
        return f"sqlite:///{store}"
    url: str = args.db or settings.store_url()
    if url.startswith("sqlite:///") and not url.endswith(":memory:") and not Path(url[10:]).is_file():
        raise InvalidRequest(f"no store at {url}: give --db URL or --dir DIR")
    return url


__all__ = ["add_store_arguments", "store_url"]
