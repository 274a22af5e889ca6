"""``previous_response_id`` for the Responses dialect: the rollout's stored call with that response id is
expanded into a full ``input`` (its input, then its output items, then the new input), so the recorded
request is self-contained and splices like any other."""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine

from rollwire.errors import InvalidRequest
from rollwire.reconstruct import load_calls
from rollwire.store.requests import whole_requests


def _items(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def _stored(engine: Engine, rollout_id: str, response_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The request and response of the rollout's call that answered ``response_id``. Every call of the rollout
    is read: a call's request may be stored as an edit of an earlier call's (``rollwire.store.requests``)."""
    rows = load_calls(engine, rollout_id)
    requests = whole_requests(rows)
    for row, request in zip(reversed(rows), reversed(requests)):
        if row.dialect != "responses":
            continue
        try:
            response = json.loads(row.response_json)
            if response.get("id") == response_id:
                return json.loads(request), response
        except (ValueError, AttributeError):
            continue
    return None


async def expand_previous(engine: Engine, rollout_id: str, raw: Any) -> Any:
    """``raw`` with ``previous_response_id`` replaced by the history it names (unchanged when absent)."""
    if not isinstance(raw, dict) or raw.get("previous_response_id") is None:
        return raw
    response_id = raw["previous_response_id"]
    if not isinstance(response_id, str):
        raise InvalidRequest("previous_response_id must be a string", param="previous_response_id")
    found = await anyio.to_thread.run_sync(_stored, engine, rollout_id, response_id)
    if found is None:
        raise InvalidRequest(
            f"previous_response_id {response_id!r} is not stored for this rollout", param="previous_response_id"
        )
    request, response = found
    history = _items(request.get("input")) + list(response.get("output") or [])
    expanded = {k: v for k, v in raw.items() if k != "previous_response_id"}
    expanded["input"] = history + _items(raw.get("input"))
    return expanded


__all__ = ["expand_previous"]
