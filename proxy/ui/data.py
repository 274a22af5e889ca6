"""JSON the trace viewer needs beyond the admin API (runs with counts, a run's rollouts, a rollout's tool
events, token pieces), built from the same store queries as ``admin`` and ``reconstruct``.

Routes (mounted under ``/ui/api``; operator key as ``Authorization: Bearer``/``x-api-key`` or the
``rollwire_operator`` cookie that ``/ui/?key=K`` sets):

- ``GET runs`` -> list of {id, name, kind, created_ns, counts{status: n}, total, mean_reward,
  policy_versions[], reward_by_version[{version, mean_reward, n}]}
- ``GET runs/{run}/rollouts`` -> list of rollout rows (no token hash) with num_calls, num_tool_events
- ``GET runs/{run}/versions`` -> an RL run's curves across policy versions (``run_figures``): {train[{version,
  mean_reward, n}], held_out[{version, pass@1, ..., n}]}
- ``GET rollouts/{id}`` -> the admin rollout view with each call's error/ended_ns, plus ``tool_events``
- ``GET rollouts/{id}/trajectory`` -> the admin trajectory JSON (the page's raw link)
- ``GET rollouts/{id}/tokens`` -> the trajectory plus ``pieces`` {token id: decoded text}
"""

from __future__ import annotations

import hmac
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import col, select
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollwire.errors import NotFound, Unauthorized
from rollwire.proxy.admin import rollout_view
from rollwire.proxy.auth import request_token
from rollwire.proxy.render import Renderer
from rollwire.reconstruct import load_calls, reconstruct
from rollwire.store import ModelCall, Rollout, Run, ToolEvent, session_scope

COOKIE = "rollwire_operator"


@dataclass(frozen=True, slots=True)
class ViewerState:
    """What the viewer reads (``app.state.viewer``): the proxy's own store and tokenizer behind its admin
    listener, or any store opened read-only (``rollwire traces ui``)."""

    operator_key: str
    engine: Engine
    renderer: Renderer


def viewer_state(request: Request) -> ViewerState:
    state: ViewerState = request.app.state.viewer
    return state


def check_operator(request: Request) -> None:
    """The operator key as ``Authorization: Bearer``/``x-api-key``, or the viewer's cookie holding it."""
    key = viewer_state(request).operator_key.encode()
    for given in (request.cookies.get(COOKIE), request_token(request)):
        if given and hmac.compare_digest(given.encode(), key):
            return
    raise Unauthorized("the viewer needs the operator key: open /ui/?key=<operator key>")


def _status(value: Any) -> str:
    return str(value.value if hasattr(value, "value") else value)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def list_runs(engine: Engine) -> list[dict[str, Any]]:
    """Every run with rollout counts by status, mean reward and reward by the newest policy that sampled."""
    with session_scope(engine) as session:
        runs = list(session.exec(select(Run).order_by(Run.created_ns.desc())).all())  # type: ignore[attr-defined]
        rollouts = list(session.exec(select(Rollout.id, Rollout.run_id, Rollout.status, Rollout.reward)).all())
        query = select(ModelCall.rollout_id, func.max(ModelCall.policy_version)).group_by(ModelCall.rollout_id)
        version_of = dict(session.exec(query).all())
        query = select(Rollout.run_id, ModelCall.policy_version).join(Rollout).distinct()
        versions = list(session.exec(query).all())
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rewards: dict[str, list[float]] = defaultdict(list)
    by_version: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rollout_id, run_id, status, reward in rollouts:
        counts[run_id][_status(status)] += 1
        if reward is not None:
            rewards[run_id].append(reward)
            if rollout_id in version_of:
                by_version[run_id][int(version_of[rollout_id])].append(reward)
    run_versions: dict[str, set[int]] = defaultdict(set)
    for run_id, version in versions:
        run_versions[run_id].add(int(version))
    return [
        {
            **run.model_dump(exclude={"config"}),
            "counts": dict(counts[run.id]),
            "total": sum(counts[run.id].values()),
            "mean_reward": _mean(rewards[run.id]),
            "policy_versions": sorted(run_versions[run.id]),
            "reward_by_version": [
                {"version": v, "mean_reward": _mean(r), "n": len(r)} for v, r in sorted(by_version[run.id].items())
            ],
        }
        for run in runs
    ]


def list_rollouts(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    with session_scope(engine) as session:
        if session.get(Run, run_id) is None:
            raise NotFound(f"no run {run_id!r}")
        rows = list(session.exec(select(Rollout).where(Rollout.run_id == run_id).order_by(col(Rollout.created_ns))).all())
        calls = dict(session.exec(select(ModelCall.rollout_id, func.count()).group_by(ModelCall.rollout_id)).all())
        tools = dict(session.exec(select(ToolEvent.rollout_id, func.count()).group_by(ToolEvent.rollout_id)).all())
    return [
        {
            **r.model_dump(exclude={"token_hash", "log_tail"}),
            "num_calls": int(calls.get(r.id, 0)),
            "num_tool_events": int(tools.get(r.id, 0)),
        }
        for r in rows
    ]


def rollout_detail(engine: Engine, rollout_id: str) -> dict[str, Any]:
    """The admin rollout view, each call's error and end time, and the rollout's tool events."""
    view = rollout_view(engine, rollout_id)
    extra = {c.id: {"error": c.error, "ended_ns": c.ended_ns} for c in load_calls(engine, rollout_id)}
    view["calls"] = [{**c, **extra.get(c["id"], {})} for c in view["calls"]]
    return view


def token_view(engine: Engine, renderer: Any, rollout_id: str) -> dict[str, Any]:
    """The trajectory with each distinct token decoded once (a 50k-token page needs few distinct ids)."""
    data = reconstruct(engine, rollout_id).to_dict()
    distinct = sorted({t for s in data["segments"] for t in s["token_ids"]})
    data["pieces"] = {str(t): renderer.decode([t]) for t in distinct}
    return data


def _engine(request: Request) -> Engine:
    return viewer_state(request).engine


async def runs_route(request: Request) -> Response:
    check_operator(request)
    return JSONResponse(await anyio.to_thread.run_sync(list_runs, _engine(request)))


async def run_rollouts_route(request: Request) -> Response:
    check_operator(request)
    rows = await anyio.to_thread.run_sync(list_rollouts, _engine(request), request.path_params["run"])
    return JSONResponse(rows)


def run_versions(engine: Engine, run_id: str) -> dict[str, Any]:
    """Train reward by the version a group was drawn at, held-out pass rates by the version evaluated."""
    from rollwire.rollouts import RolloutBook
    from rollwire.run_figures import figures

    found = figures(RolloutBook(engine), run_id)
    return {
        "train": [{"version": v, "mean_reward": _mean(r), "n": len(r)} for v, r in sorted(found.train_by_version.items())],
        "held_out": [{"version": v, **rates, "n": sum(len(r) for r in found.evals[v].values())}
                     for v, rates in found.eval_rates().items()],  # fmt: skip
    }


async def run_versions_route(request: Request) -> Response:
    check_operator(request)
    return JSONResponse(await anyio.to_thread.run_sync(run_versions, _engine(request), request.path_params["run"]))


async def rollout_route(request: Request) -> Response:
    check_operator(request)
    view = await anyio.to_thread.run_sync(rollout_detail, _engine(request), request.path_params["id"])
    return JSONResponse(view)


async def trajectory_route(request: Request) -> Response:
    check_operator(request)
    trajectory = await anyio.to_thread.run_sync(reconstruct, _engine(request), request.path_params["id"])
    return JSONResponse(trajectory.to_dict())


async def tokens_route(request: Request) -> Response:
    check_operator(request)
    renderer = viewer_state(request).renderer
    data = await anyio.to_thread.run_sync(token_view, _engine(request), renderer, request.path_params["id"])
    return JSONResponse(data)


def api_routes() -> list[Route]:
    return [
        Route("/runs", runs_route, methods=["GET"]),
        Route("/runs/{run}/rollouts", run_rollouts_route, methods=["GET"]),
        Route("/runs/{run}/versions", run_versions_route, methods=["GET"]),
        Route("/rollouts/{id}", rollout_route, methods=["GET"]),
        Route("/rollouts/{id}/trajectory", trajectory_route, methods=["GET"]),
        Route("/rollouts/{id}/tokens", tokens_route, methods=["GET"]),
    ]


__all__ = ["COOKIE", "ViewerState", "api_routes", "check_operator", "viewer_state", "list_rollouts", "list_runs", "rollout_detail", "run_versions", "token_view"]
