"""The admin API follows the one transition table (it once accepted running -> pending and pending -> scoring),
and a revoked token stops working at once while the rollout keeps its state."""

from __future__ import annotations

import httpx

from tests.proxy.conftest import Proxy


def _chat(rollout: dict[str, str], model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(f"{rollout['base_url']}/chat/completions", json=body, timeout=60)


def test_the_admin_api_holds_the_transition_table(proxy: Proxy) -> None:
    rollout = proxy.new_rollout()
    status = f"/admin/v1/rollouts/{rollout['id']}/status"
    back = proxy.admin.post(status, json={"status": "pending"})
    assert back.status_code == 409 and "cannot become pending" in back.json()["error"]["message"]
    assert proxy.admin.post(status, json={"status": "nonsense"}).status_code == 400
    assert proxy.admin.post(status, json={"status": "scoring"}).status_code == 200
    assert proxy.admin.post(status, json={"status": "running"}).status_code == 409
    done = proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 0.5, "exit_code": "x"})
    assert done.status_code == 400 and "exit_code must be int" in done.text
    done = proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 0.5})
    assert done.status_code == 200 and done.json()["cursor"] == 1
    again = proxy.admin.post(status, json={"status": "cancelled"})
    assert again.status_code == 409 and "final" in again.json()["error"]["message"]


def test_a_revoked_token_stops_at_once(proxy: Proxy, served_model: str) -> None:
    rollout = proxy.new_rollout()
    assert _chat(rollout, served_model).status_code == 200  # cached in the proxy's token index now
    assert proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/revoke").status_code == 200
    refused = _chat(rollout, served_model)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    view = proxy.admin.get(f"/admin/v1/rollouts/{rollout['id']}").json()
    assert view["status"] == "running" and len(view["calls"]) == 1
    assert proxy.admin.post("/admin/v1/rollouts/nope/revoke").status_code == 404
