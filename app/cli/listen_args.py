"""``--fd``: how the servers a stack starts (engine, env servers, gateway, proxy) receive their listening socket.

``rollwire up``, the demo and the test stacks bind each part's socket themselves and pass it down, so the
URL they print is served by that part and no other process can take the port while the part starts.
"""

from __future__ import annotations

import argparse


def add_fd_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fd", type=int, default=None, metavar="N",
        help="serve on the listening socket inherited as file descriptor N (bound by the parent process) instead "
        "of binding --host/--port; --host/--port then only name it in printed URLs",
    )  # fmt: skip


__all__ = ["add_fd_argument"]
