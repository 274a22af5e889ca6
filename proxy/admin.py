"""Operator API under ``/admin/v1``, served on the proxy's admin listener only: runs, rollouts (token + ready base
URLs on the main listener), finishing with a reward, traces, and the policy version for engines that cannot report
one. Store work runs off the event loop."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rollwire.errors import InvalidRequest, NotFound
from rollwire.reconstruct import load_calls, reconstruct
from rollwire.rollouts import RolloutBook, parse_status
from rollwire.rollouts.budgets import parse_budgets
from rollwire.side_calls import rules_from
from rollwire.store import Rollout, Run, decode_ids, session_scope
from rollwire.store.prompts import prompt_length
from rollwire.timeline import build_timeline, load_tool_events


def _state(request: Request) -> Any:
    return request.app.state.proxy


def _field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """``body[name]`` if it is of ``kind`` (absent or null: ``default``); a 400 naming the field otherwise."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise InvalidRequest(f"{name} must be {names} or null, got {type(value).__name__}", param=name)
    return value


def create_run(engine: Engine, body: dict[str, Any]) -> Run:
    config = dict(_field(body, "config", dict, {}))
    if "budgets" in body:
        config["budgets"] = parse_budgets(body["budgets"])
    elif "budgets" in config:
        config["budgets"] = parse_budgets(config["budgets"])
    name, kind = _field(body, "name", str, ""), _field(body, "kind", str, "adhoc")
    return RolloutBook(engine).create_run(_field(body, "id", str) or None, name, kind, config)


def rollout_links(base: str, token: str, gateway: str = "") -> dict[str, str]:
    """The URLs a harness of this rollout is pointed at; the MCP one at the gateway when it has its own address."""
    root = f"{base.rstrip('/')}/r/{token}"
    mcp_root = f"{gateway.rstrip('/')}/r/{token}" if gateway else root
    return {"base_url": root + "/v1", "anthropic_base_url": root, "mcp_url": mcp_root + "/mcp"}


def create_rollouts(
    engine: Engine, run_id: str, body: dict[str, Any], base: str, gateway: str = ""
) -> list[dict[str, Any]]:
    """Running rollouts with their tokens; ``budgets`` override the run's (see ``rollwire.rollouts.budgets``)."""
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 10_000:
        raise InvalidRequest("count must be an integer in [1, 10000]", param="count")
    for name in ("sample_index_start", "attempt"):
        value = body.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRequest(f"{name} must be an integer", param=name)
    meta = _field(body, "meta", dict, {})
    _field(body, "task_id", str), _field(body, "group_id", str)
    if "side_call_rules" in meta:
        rules_from(meta["side_call_rules"], "meta.side_call_rules")
    budgets = parse_budgets(body.get("budgets") or {})
    made = RolloutBook(engine).create(run_id, count, body, budgets)
    return [{"id": row.id, "token": token, **rollout_links(base, token, gateway)} for row, token in made]


def set_status(engine: Engine, rollout_id: str, body: dict[str, Any]) -> Rollout:
    """Move a rollout to a status the transition table allows from its current one; a final one gets the next
    stream cursor, once, and its token stops working."""
    status = parse_status(body.get("status", "finished"))
    kinds = {"reward_breakdown": dict, "final_answer": str, "exit_code": int, "log_tail": str, "error": str}
    fields: dict[str, Any] = {name: _field(body, name, kind) for name, kind in kinds.items() if name in body}
    if "reward_breakdown" in fields:
        fields["reward_breakdown"] = dict(fields["reward_breakdown"] or {})
    reward = _field(body, "reward", (int, float))
    if reward is not None:
        fields["reward"] = float(reward)
    return RolloutBook(engine).set_status(rollout_id, status, **fields)


def rollout_view(engine: Engine, rollout_id: str) -> dict[str, Any]:
    with session_scope(engine) as session:
        rollout = session.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFound(f"no rollout {rollout_id!r}")
    model_calls = load_calls(engine, rollout_id)
    calls = [
        {
            "id": c.id,
            "segment_index": c.segment_index,
            "segment_break": c.segment_break,
            "finish_reason": c.finish_reason,
            "sampling": c.sampling,
            "prompt_tokens": prompt_length(c.prompt_ids, c.prompt_base, c.reused_prefix_len),
            "completion_tokens": len(decode_ids(c.completion_ids)),
            "reused_prefix_len": c.reused_prefix_len,
            "policy_version": c.policy_version,
            "latency_ms": c.latency_ms,
            "started_ns": c.started_ns,
            "status": c.status,
        }
        for c in model_calls
    ]
    data = rollout.model_dump(exclude={"token_hash"})
    events = load_tool_events(engine, rollout_id)
    return {
        **data,
        "calls": calls,
        "tool_events": [e.model_dump() for e in events],
        "timeline": build_timeline(model_calls, events),
    }


async def _json(request: Request) -> dict[str, Any]:
    body = await request.app.state.proxy.read_json(request)
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


async def runs_route(request: Request) -> Response:
    run = await anyio.to_thread.run_sync(create_run, _state(request).engine, await _json(request))
    return JSONResponse(run.model_dump(), status_code=201)


async def rollouts_route(request: Request) -> Response:
    state = _state(request)
    body = await _json(request)
    base = state.rollout_base(request)
    gateway = state.settings.gateway_url
    out = await anyio.to_thread.run_sync(create_rollouts, state.engine, request.path_params["run"], body, base, gateway)
    return JSONResponse(out, status_code=201)


async def finish_route(request: Request) -> Response:
    state = _state(request)
    body = await _json(request)
    body.setdefault("status", "finished")
    rollout = await anyio.to_thread.run_sync(set_status, state.engine, request.path_params["id"], body)
    if rollout.finished_seq is not None:
        state.notify_finished()
    return JSONResponse({"id": rollout.id, "status": rollout.status, "cursor": rollout.finished_seq})


async def status_route(request: Request) -> Response:
    return await finish_route(request)


async def revoke_route(request: Request) -> Response:
    """The rollout's token stops working now (its state is kept)."""
    rollout_id = request.path_params["id"]
    await anyio.to_thread.run_sync(RolloutBook(_state(request).engine).revoke, rollout_id)
    return JSONResponse({"id": rollout_id, "revoked": True})


async def rollout_route(request: Request) -> Response:
    view = await anyio.to_thread.run_sync(rollout_view, _state(request).engine, request.path_params["id"])
    return JSONResponse(view)


async def trajectory_route(request: Request) -> Response:
    trajectory = await anyio.to_thread.run_sync(reconstruct, _state(request).engine, request.path_params["id"])
    return JSONResponse(trajectory.to_dict())


async def policy_version_route(request: Request) -> Response:
    """GET: the version published last (null: none since the proxy started). POST ``{"version": N}``: publish N."""
    served = _state(request).calls.served
    if request.method == "GET":
        return JSONResponse({"version": served.published_version})
    body = await _json(request)
    version = body.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidRequest("version must be an integer", param="version")
    served.publish(version)
    return JSONResponse({"version": version})


__all__ = ["create_rollouts", "create_run", "rollout_links", "set_status"]
