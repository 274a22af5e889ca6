"""On the proxy's admin listener, without the operator key the viewer's pages, assets and JSON answer 401; with
it (Bearer or the cookie that ``/ui/?key=K`` sets) they answer, and the JSON agrees with the admin API."""

from __future__ import annotations

import httpx
import pytest

from tests.proxy.ui.conftest import Recorded

PATHS = [
    "/ui/",
    "/ui/static/app.js",
    "/ui/static/app.css",
    "/ui/api/runs",
    "/ui/api/runs/{run}/rollouts",
    "/ui/api/rollouts/{rollout}",
    "/ui/api/rollouts/{rollout}/tokens",
    "/ui/api/rollouts/{rollout}/trajectory",
]


def _paths(rec: Recorded) -> list[str]:
    return [p.format(run=rec.run, rollout=rec.rollout) for p in PATHS]


def test_no_key_is_401(recorded: Recorded) -> None:
    for path in _paths(recorded):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": "rollwire_operator=wrong"}):
            answer = httpx.get(recorded.proxy.admin_url + path, headers=headers, timeout=30)
            assert answer.status_code == 401, (path, headers, answer.status_code)
    wrong = httpx.get(f"{recorded.proxy.admin_url}/ui/?key=wrong", timeout=30)
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers


@pytest.mark.parametrize("how", ["bearer", "cookie"])
def test_key_opens_everything(recorded: Recorded, how: str) -> None:
    with httpx.Client(base_url=recorded.proxy.admin_url, timeout=30, follow_redirects=True) as client:
        if how == "cookie":
            login = client.get(f"/ui/?key={recorded.key}")  # follows the 303 to /ui/ with the cookie set
            assert login.status_code == 200 and login.url.path == "/ui/" and "key=" not in str(login.url)
            assert "httponly" in login.history[0].headers["set-cookie"].lower()
        else:
            client.headers["Authorization"] = f"Bearer {recorded.key}"
        for path in _paths(recorded):
            assert client.get(path).status_code == 200, path
        runs = {r["id"]: r for r in client.get("/ui/api/runs").json()}
        run = runs[recorded.run]
        assert run["counts"] == {"finished": 1} and run["total"] == 1 and run["mean_reward"] == 0.75
        version = recorded.proxy.admin.get(f"/admin/v1/rollouts/{recorded.rollout}").json()["calls"][0][
            "policy_version"
        ]
        assert run["policy_versions"] == [version]
        assert run["reward_by_version"] == [{"version": version, "mean_reward": 0.75, "n": 1}]
        listed = client.get(f"/ui/api/runs/{recorded.run}/rollouts").json()
        assert [(r["id"], r["num_calls"], r["num_tool_events"]) for r in listed] == [(recorded.rollout, 2, 2)]
        assert all("token_hash" not in r for r in listed)
        view = client.get(f"/ui/api/rollouts/{recorded.rollout}").json()
        assert [e["is_error"] for e in view["tool_events"]] == [False, True] and len(view["calls"]) == 2
        raw = client.get(f"/ui/api/rollouts/{recorded.rollout}/trajectory").json()
        missing = {
            "/ui/api/rollouts/ro-none": "ro-none",
            "/ui/api/runs/run-none/rollouts": "run-none",
            "/ui/static/secrets.py": "secrets.py",
        }
        for path, name in missing.items():
            answer = client.get(path)
            assert answer.status_code == 404 and name in answer.json()["error"]["message"], path
    admin = recorded.proxy.admin.get(f"/admin/v1/rollouts/{recorded.rollout}/trajectory").json()
    assert raw == admin
