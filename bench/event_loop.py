"""The event loop the bench's own processes (stub, load generator) run on: uvloop where it is installed (uvicorn
serves the proxy on it too), else asyncio's. At 256 concurrent connections asyncio's loop held the direct row
to ~10x the proxy's rate, the floor that shows the stub and load generator are not what a row measures."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
