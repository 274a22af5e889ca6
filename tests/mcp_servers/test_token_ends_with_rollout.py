"""A rollout's token stops working when the rollout ends: the proxy (every dialect, official SDKs) and the
gateway answer a clear 4xx and record nothing, and the trajectory streamed to the trainer never changes."""

from __future__ import annotations

from pathlib import Path

import anthropic
import anyio
import httpx
import openai
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from sqlmodel import func, select

from rollwire.errors import Forbidden
from rollwire.rollouts import RolloutBook, guard_active
from rollwire.serving import ServerThread
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.store import ModelCall, RolloutStatus, ToolEvent, open_engine, session_scope
from rollwire.store.writer import RowWriter
from tests.mcp_servers.conftest import EnvServers, gateway_stack
from trainer.stream import StreamConfig, TrajectoryStream

KEY = "operator-test-key"


def _counts(engine: object, rollout_id: str) -> tuple[int, int]:
    with session_scope(engine) as session:  # type: ignore[arg-type]
        calls = session.exec(select(func.count()).where(ModelCall.rollout_id == rollout_id)).one()
        events = session.exec(select(func.count()).where(ToolEvent.rollout_id == rollout_id)).one()
    return int(calls), int(events)


def test_ended_rollouts_tokens_are_refused_everywhere(
    env_servers: EnvServers, tiny_model_dir: Path, tmp_path: Path, store_url: str
) -> None:
    from rollwire.engine import create_app as create_engine
    from rollwire.proxy.app import create_app as create_proxy

    engine_app = create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path / "engine")
    gw_server, stack = gateway_stack(env_servers, store_url)
    with ServerThread(engine_app) as engine, gw_server:
        proxy_app = create_proxy(
            ProxySettings(upstream=engine.url, model=str(tiny_model_dir)), store_url, tmp_path, operator_key=KEY
        )
        with ServerThread(proxy_app) as proxy, httpx.Client(
            base_url=proxy.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
        ) as admin:
            run = admin.post("/admin/v1/runs", json={}).json()["id"]
            body = {"count": 4, "task_id": "write-key", "meta": {"suite": "tiny"}}
            made = admin.post(f"/admin/v1/runs/{run}/rollouts", json=body).json()
            model = httpx.get(f"{engine.url}/v1/models").json()["data"][0]["id"]
            first = made[0]
            llm = openai.OpenAI(base_url=first["base_url"], api_key="unused", max_retries=0)
            ask = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1}

            async def before_and_after() -> None:
                async with Client(stack.mcp_url(first["token"])) as tools:
                    await anyio.to_thread.run_sync(lambda: llm.chat.completions.create(**ask))
                    await tools.call_tool("write_file", {"path": "answer.txt", "content": "key"})
                    done = admin.post(f"/admin/v1/rollouts/{first['id']}/finish", json={"reward": 1.0})
                    assert done.status_code == 200 and done.json()["status"] == "finished"
                    with pytest.raises(MCPError):  # the open session's next call gets the 403 (the SDK's error)
                        await tools.call_tool("write_file", {"path": "answer.txt", "content": "changed"})

            anyio.run(before_and_after)
            stream = TrajectoryStream(StreamConfig(proxy.url, KEY, run, wait_s=0))
            (streamed,) = stream.poll()
            stream.close()
            recorded = _counts(stack.engine, first["id"])
            assert recorded == (1, 1)

            # the proxy: 403 in each dialect's own shape, through the official SDKs
            with pytest.raises(openai.PermissionDeniedError, match="finished: its token no longer works"):
                llm.chat.completions.create(**ask)
            with pytest.raises(openai.PermissionDeniedError, match="no longer works"):
                llm.responses.create(model=model, input="hi", max_output_tokens=4)
            claude = anthropic.Anthropic(base_url=first["anthropic_base_url"], api_key="unused", max_retries=0)
            with pytest.raises(anthropic.PermissionDeniedError) as denied:
                claude.messages.create(model=model, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
            assert denied.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
            # the gateway: a clear 403 on a new session too
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            gone = httpx.post(stack.mcp_url(first["token"]), json=ping)
            assert gone.status_code == 403 and "finished" in gone.json()["error"]["message"]

            # every other way a rollout ends stops its token as well
            for rollout, status in zip(made[1:], ("failed", "timed_out", "cancelled")):
                other = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
                other.chat.completions.create(**ask)
                moved = admin.post(f"/admin/v1/rollouts/{rollout['id']}/status", json={"status": status})
                assert moved.status_code == 200, moved.text
                with pytest.raises(openai.PermissionDeniedError, match=status):
                    other.chat.completions.create(**ask)
                assert _counts(stack.engine, rollout["id"]) == (1, 0)

            # nothing was recorded after the end, and the trajectory is the one the trainer got
            assert _counts(stack.engine, first["id"]) == recorded
            again = admin.get(f"/admin/v1/rollouts/{first['id']}/trajectory").json()
            assert again == streamed.to_dict()
    folder = env_servers.folder(first["id"]) / "workspace" / "answer.txt"
    assert folder.read_text() == "key"


def test_the_store_refuses_records_for_an_ended_rollout(any_store_url: str) -> None:
    """The guard behind the caches: a model-call insert that races a finish (another process) writes nothing."""
    engine = open_engine(any_store_url)
    book = RolloutBook(engine)
    book.create_run("r")
    (row, _token), = book.create("r", 1, {})
    writer = RowWriter(engine, ModelCall.__table__, guard=guard_active)  # type: ignore[attr-defined]
    call = {"rollout_id": row.id, "prompt_ids": b"", "completion_ids": b"", "completion_logprobs": b""}
    assert len(anyio.run(writer.insert, [call])) == 1
    book.set_status(row.id, RolloutStatus.FINISHED)
    with pytest.raises(Forbidden, match="finished"):
        anyio.run(writer.insert, [call])
    writer.close()
    assert _counts(engine, row.id) == (1, 0)
