"""A recorded run for the viewer: two real chat calls through the proxy to the bundled engine, two tool
events as the MCP gateway records them (one failing), and a finish with a reward breakdown and log tail."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import pytest

from rollwire.store import ToolEvent, now_ns, open_engine, session_scope
from tests.proxy.conftest import OPERATOR_KEY, Proxy


@dataclass
class Recorded:
    proxy: Proxy
    run: str
    rollout: str
    key: str = OPERATOR_KEY


def _tool_events(store_url: str, rollout_id: str) -> None:
    engine = open_engine(store_url)
    start = now_ns()
    with session_scope(engine) as session:
        session.add(
            ToolEvent(
                rollout_id=rollout_id,
                server="files",
                tool="read_file",
                latency_ms=3.5,
                arguments_json=json.dumps({"path": "a.txt"}),
                result_json='{"text": "hi"}',
                started_ns=start,
                ended_ns=start + 3_500_000,
            )
        )
        session.add(
            ToolEvent(
                rollout_id=rollout_id,
                server="shell",
                tool="run",
                latency_ms=12.0,
                is_error=True,
                error="exit status 2",
                arguments_json='{"cmd": "false"}',
                started_ns=start + 5_000_000,
                ended_ns=start + 17_000_000,
            )
        )
    engine.dispose()


@pytest.fixture()
def recorded(proxy: Proxy, served_model: str) -> Recorded:
    rollout = proxy.new_rollout(task_id="task-1", group_id="g-1")
    messages = [{"role": "user", "content": "hello"}]
    for turn in range(2):
        body = {"model": served_model, "messages": messages, "max_tokens": 6}
        answer = httpx.post(f"{rollout['base_url']}/chat/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        messages += [answer.json()["choices"][0]["message"], {"role": "user", "content": f"again {turn}"}]
    _tool_events(proxy.store_url, rollout["id"])
    finish = {
        "reward": 0.75,
        "reward_breakdown": {"tests_pass": 1.0, "style": 0.5},
        "exit_code": 0,
        "log_tail": "harness: done\n",
        "final_answer": "42",
    }
    proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json=finish).raise_for_status()
    return Recorded(proxy, rollout["run"], rollout["id"])
