"""The trajectory stream as the trainer consumes it: finished rollouts in cursor order, resumable after a
cursor with nothing missed or repeated, and a long-poll that returns as soon as a rollout finishes."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from rollwire.trajectory import Trajectory
from tests.proxy.conftest import Proxy
from trainer.stream import StreamConfig, TrajectoryStream


@pytest.fixture()
def proxy(start_proxy: Callable[..., Proxy], engine_url: str, any_store_url: str) -> Proxy:
    """The proxy on SQLite and on PostgreSQL."""
    return start_proxy(engine_url, any_store_url)


def _rollouts(proxy: Proxy, served: str, count: int) -> tuple[str, list[dict[str, str]]]:
    run = proxy.admin.post("/admin/v1/runs", json={"name": "s"}).json()["id"]
    made = proxy.admin.post(
        f"/admin/v1/runs/{run}/rollouts", json={"count": count, "task_id": "t", "group_id": "g"}
    ).json()
    for r in made:
        answer = httpx.post(
            f"{r['base_url']}/chat/completions",
            json={"model": served, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3},
            timeout=60,
        )
        assert answer.status_code == 200
    return run, made


def test_cursor_resume_without_gaps_or_duplicates(proxy: Proxy, served_model: str) -> None:
    run, made = _rollouts(proxy, served_model, 4)
    for r, reward in zip(made[:3], (0.0, 1.0, 0.5)):
        assert proxy.admin.post(f"/admin/v1/rollouts/{r['id']}/finish", json={"reward": reward}).status_code == 200
    stream = TrajectoryStream(StreamConfig(proxy.admin_url, "test-operator-key", run, wait_s=0))
    first = stream.poll()
    assert [t.rollout_id for t in first] == [r["id"] for r in made[:3]]
    assert [t.reward for t in first] == [0.0, 1.0, 0.5]
    assert all(t.segments[0].num_sampled >= 1 and t.group_id == "g" for t in first)
    cursor = stream.cursor
    stream.close()
    assert (
        proxy.admin.post(
            f"/admin/v1/rollouts/{made[3]['id']}/finish", json={"status": "failed", "error": "x"}
        ).status_code
        == 200
    )
    resumed = TrajectoryStream(StreamConfig(proxy.admin_url, "test-operator-key", run, wait_s=0))
    resumed.cursor = cursor
    again = resumed.poll()
    resumed.close()
    assert [t.rollout_id for t in again] == [made[3]["id"]] and again[0].status == "failed"
    again_finish = proxy.admin.post(f"/admin/v1/rollouts/{made[3]['id']}/finish", json={"reward": 1})
    assert again_finish.status_code == 409


def test_long_poll_returns_when_a_rollout_finishes(proxy: Proxy, served_model: str) -> None:
    run, made = _rollouts(proxy, served_model, 1)
    got: list[Trajectory] = []
    started = threading.Event()

    def consume() -> None:
        stream = TrajectoryStream(StreamConfig(proxy.admin_url, "test-operator-key", run, wait_s=30))
        started.set()
        got.extend(stream.poll())
        stream.close()

    thread = threading.Thread(target=consume)
    thread.start()
    started.wait(10)
    proxy.admin.post(f"/admin/v1/rollouts/{made[0]['id']}/finish", json={"reward": 2.0}).raise_for_status()
    thread.join(15)  # far below the 30 s wait: the finish wakes the poll
    assert not thread.is_alive() and [t.reward for t in got] == [2.0]


def test_stream_errors(proxy: Proxy) -> None:
    assert proxy.admin.get("/admin/v1/trajectories/stream", params={"run": "nope"}).status_code == 404
    assert proxy.admin.get("/admin/v1/trajectories/stream").status_code == 400
    assert httpx.get(f"{proxy.admin_url}/admin/v1/trajectories/stream", params={"run": "x"}).status_code == 401


def test_infrastructure_failures_are_not_streamed_policy_failures_are(proxy: Proxy, served_model: str) -> None:
    run, made = _rollouts(proxy, served_model, 3)
    errors = ["infrastructure: pod evicted", "harness exited with status 1", "infrastructure (no retry left): node lost"]
    for rollout, error in zip(made, errors):
        finish = {"status": "failed", "error": error}
        assert proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json=finish).status_code == 200
    stream = TrajectoryStream(StreamConfig(proxy.admin_url, "test-operator-key", run, wait_s=0))
    got = stream.poll()
    stream.close()
    # the retried one is replaced by its retry (a fresh row); the last attempt fills its group, cause recorded
    assert [t.rollout_id for t in got] == [made[1]["id"], made[2]["id"]]
    assert [t.failure_cause for t in got] == ["policy", "infrastructure"]
    assert got[0].metadata["failure_cause"] == "policy"
