"""``GET /admin/v1/trajectories/stream``: a run's finished rollouts as NDJSON in cursor order, after a cursor,
long-polling up to ``wait`` seconds, so a restarted consumer misses nothing and sees nothing twice."""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy import or_
from sqlalchemy.engine import Engine
from sqlmodel import col, select
from starlette.requests import Request
from starlette.responses import Response

from rollwire.errors import InvalidRequest, NotFound
from rollwire.reconstruct import build_trajectory, load_calls
from rollwire.store import Rollout, Run, session_scope
from rollwire.timeline import load_tool_events
from rollwire.trajectory import INFRASTRUCTURE

MAX_WAIT_S = 60.0
BATCH = 64
RECHECK_S = 0.5
"""Re-read the store this often while waiting (another process may finish rollouts)."""


def _params(request: Request) -> tuple[str, int, float]:
    run = request.query_params.get("run", "")
    if not run:
        raise InvalidRequest("run is required", param="run")
    try:
        after = int(request.query_params.get("after", "0"))
        wait = float(request.query_params.get("wait", "0"))
    except ValueError:
        raise InvalidRequest("after must be an integer and wait a number of seconds", param="after") from None
    return run, after, min(max(wait, 0.0), MAX_WAIT_S)


def finished_after(engine: Engine, run: str, after: int) -> list[str]:
    with session_scope(engine) as session:
        if session.get(Run, run) is None:
            raise NotFound(f"no run {run!r}")
        query = (
            select(Rollout)
            .where(Rollout.run_id == run, col(Rollout.finished_seq).is_not(None), col(Rollout.finished_seq) > after)
            # an infrastructure failure being retried: its retry, a fresh row of the same group, is streamed instead
            .where(or_(col(Rollout.error).is_(None), col(Rollout.error).not_like(f"{INFRASTRUCTURE}:%")))
            .order_by(col(Rollout.finished_seq))
            .limit(BATCH)
        )
        rollouts = list(session.exec(query).all())
    return [
        json.dumps(build_trajectory(r, load_calls(engine, r.id), load_tool_events(engine, r.id)).to_dict())
        for r in rollouts
    ]


async def stream_route(request: Request) -> Response:
    state: Any = request.app.state.proxy
    run, after, wait = _params(request)
    lines = await anyio.to_thread.run_sync(finished_after, state.engine, run, after)
    with anyio.move_on_after(wait):
        while not lines:
            with anyio.move_on_after(RECHECK_S):
                await state.finished_event().wait()
            lines = await anyio.to_thread.run_sync(finished_after, state.engine, run, after)
    body = "".join(line + "\n" for line in lines)
    return Response(body, media_type="application/x-ndjson")


__all__ = ["stream_route"]
