"""Must-show 3: a rollout driven through proxy (model calls) and gateway (tool calls) on one store: every tool call
is a ToolEvent, and model calls and tool events interleave by started_ns in the order they happened, the same in
``rollwire traces show``, the admin rollout view and the trajectory export (each with timing)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import openai
import pytest
from mcp import Client
from openai.types.chat import ChatCompletionMessageParam
from sqlmodel import select

from rollwire.app.cli.__main__ import main
from rollwire.app.serving import ServerThread
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.store import ModelCall, ToolEvent, session_scope
from tests.mcp_servers.env_stack import EnvServers, gateway_stack

KEY = "operator-test-key"


def test_model_and_tool_calls_interleave(
    env_servers: EnvServers, tiny_model_dir: Path, tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rollwire.engine import create_app as create_engine
    from rollwire.proxy.app import create_app as create_proxy

    engine_app = create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path / "engine")
    gw_server, stack = gateway_stack(env_servers, store_url)
    with ServerThread(engine_app) as engine, gw_server:
        proxy_app = create_proxy(
            ProxySettings(upstream=engine.url, model=str(tiny_model_dir)), store_url, tmp_path, operator_key=KEY
        )
        with ServerThread(proxy_app) as proxy:
            headers = {"Authorization": f"Bearer {KEY}"}
            admin = httpx.Client(base_url=proxy.urls["admin"], headers=headers, timeout=60)
            run = admin.post("/admin/v1/runs", json={}).json()["id"]
            body = {"count": 1, "task_id": "write-key", "meta": {"suite": "tiny"}}
            rollout = admin.post(f"/admin/v1/runs/{run}/rollouts", json=body).json()[0]
            model = httpx.get(f"{engine.url}/v1/models").json()["data"][0]["id"]
            llm = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
            messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write key to answer.txt."}]

            async def agent() -> None:
                async with Client(stack.mcp_url(rollout["token"])) as tools:
                    for word in ("key", "again"):
                        await anyio.to_thread.run_sync(
                            lambda: llm.chat.completions.create(model=model, messages=messages, max_tokens=4, seed=1)
                        )
                        await tools.call_tool("write_file", {"path": "answer.txt", "content": word})

            anyio.run(agent)
            view = admin.get(f"/admin/v1/rollouts/{rollout['id']}").json()
            admin.close()
    with session_scope(stack.engine) as session:
        calls = session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout["id"])).all()
        events = session.exec(select(ToolEvent).where(ToolEvent.rollout_id == rollout["id"])).all()
        timeline = sorted([(c.started_ns, "model") for c in calls] + [(e.started_ns, e.tool) for e in events])
    assert [kind for _, kind in timeline] == ["model", "write_file", "model", "write_file"]
    assert all(e.server == "workspace" and not e.is_error for e in events)

    expected = ["model_call", "tool_event", "model_call", "tool_event"]
    timeline = view["timeline"]
    assert [e["kind"] for e in timeline] == expected and [e["tool"] for e in view["tool_events"]] == ["write_file"] * 2
    assert timeline[0]["offset_ms"] == 0 and all(a["offset_ms"] <= b["offset_ms"] for a, b in zip(timeline, timeline[1:]))
    assert all(e["latency_ms"] > 0 for e in timeline) and timeline[1]["arguments"] == {"path": "answer.txt", "content": "key"}

    capsys.readouterr()
    assert main(["traces", "--db", store_url, "show", rollout["id"], "--ids"]) == 0
    shown = capsys.readouterr().out
    lines = [ln for ln in shown.splitlines() if ln.rstrip().endswith(("-> ok", "-> length", "-> stop"))]
    assert [("tool" if " tool " in ln else "model") for ln in lines] == ["model", "tool", "model", "tool"]
    assert "workspace.write_file" in lines[1] and "ms" in lines[1]

    out = tmp_path / "trajectories.jsonl"
    assert main(["export", "--db", store_url, "--all", "--flavor", "trajectory", "--out", str(out)]) == 0
    exported = json.loads(out.read_text().splitlines()[0])["metadata"]["timeline"]
    assert [e["kind"] for e in exported] == expected and [e["started_ns"] for e in exported] == [e["started_ns"] for e in timeline]
