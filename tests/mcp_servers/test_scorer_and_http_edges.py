"""The suite scorer fits the orchestrator's Scorer protocol; env servers and gateway answer /health, refuse
Host headers outside the allow-list (421) and oversized bodies (413)."""

from __future__ import annotations

import anyio
import httpx

from rollwire.mcp_servers.state import SECRET_HEADER
from rollwire.mcp_servers.tasks.solve import play
from rollwire.orchestrator.scoring import Scorer, ScoringInput
from rollwire.orchestrator.suite_scorer import SuiteScorer
from tests.mcp_servers.env_stack import ENV_SECRET, EnvServers, gateway_stack


def _item(rollout: str, task: str, answer: str | None) -> ScoringInput:
    return ScoringInput("run", rollout, task, "tok", answer, 0, "")


def test_suite_scorer(env_servers: EnvServers) -> None:
    scorer = SuiteScorer("ops", env_servers.env.store.root)
    assert isinstance(scorer, Scorer)
    task = scorer.suite.task("customer-total-0")
    anyio.run(play, task.reference_solution, env_servers.server_url, "scored", "ops:customer-total-0", ENV_SECRET)
    full = anyio.run(scorer.score, _item("scored", "customer-total-0", task.reference_answer))
    assert full.reward == 1.0
    partial = anyio.run(scorer.score, _item("scored", "customer-total-0", "no idea"))
    assert 0 < partial.reward < 1 and partial.breakdown["1:answer_contains"] == {"passed": False, "weight": 1.0}
    assert anyio.run(scorer.score, _item("never-ran", "customer-total-0", None)).reward == 0.0


def test_health_hosts_and_body_limit(env_servers: EnvServers, store_url: str) -> None:
    assert httpx.get(env_servers.url + "/health").json() == {
        "status": "ok",
        "servers": ["workspace", "sqldb", "calendar", "mail"],
    }
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    secret = {SECRET_HEADER: ENV_SECRET}
    evil = httpx.post(env_servers.server_url("workspace"), json=ping, headers={"Host": "evil.example", **secret})
    assert evil.status_code == 421
    big = httpx.post(
        env_servers.server_url("workspace"),
        content=b"x" * 1_100_000,
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **secret},
    )
    assert big.status_code == 413
    server, stack = gateway_stack(env_servers, store_url)
    with server:
        assert httpx.get(stack.url + "/health").json()["status"] == "ok"
        token = stack.add_rollout("hosty", "tiny:write-cat")
        assert httpx.post(stack.mcp_url(token), json=ping, headers={"Host": "evil.example"}).status_code == 421
