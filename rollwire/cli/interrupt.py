"""`kill` (SIGTERM) stops a long command the way Ctrl-C does, so its `with` blocks stop what it started."""

from __future__ import annotations

import signal


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """From now on SIGTERM raises KeyboardInterrupt in the main thread (the CLI then exits 130): a stack's
    engine, env servers, gateway and proxy are stopped by its context manager instead of left running."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)


__all__ = ["stop_on_sigterm"]
