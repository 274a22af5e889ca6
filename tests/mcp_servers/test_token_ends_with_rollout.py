"""A rollout's token stops working when the rollout ends: the proxy (every dialect, official SDKs) and the
gateway answer a clear 4xx and record nothing, and the trajectory streamed to the trainer never changes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import openai
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import func, select

from rollwire.app.serving import ServerThread
from rollwire.errors import Forbidden
from rollwire.rollouts import TAKES_RECORDS, RolloutBook, guard_active
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.store import ModelCall, RolloutStatus, ToolEvent, open_engine, session_scope
from rollwire.store.direct import DirectInsert
from rollwire.store.writer import RowWriter
from tests.mcp_servers.env_stack import EnvServers, gateway_stack
from tests.polling import wait_until
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
            base_url=proxy.urls["admin"], headers={"Authorization": f"Bearer {KEY}"}, timeout=60
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
            stream = TrajectoryStream(StreamConfig(proxy.urls["admin"], KEY, run, wait_s=0))
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


def _full_call(rollout_id: str) -> dict[str, Any]:
    """Every column given, as the proxy writes a call: the insert runs on the driver's cursor."""
    return {
        "rollout_id": rollout_id, "dialect": "chat", "requested_model": "m", "served_model": "m",
        "request_json": "{}", "request_base": None, "request_head": 0, "request_tail": 0, "response_json": "{}",
        "prompt_ids": b"\x01\x00\x00\x00", "prompt_base": None, "completion_ids": b"",
        "completion_logprobs": b"", "choice_index": 0, "finish_reason": "stop", "sampling": {"temperature": 1.0},
        "policy_version": 0, "segment_index": 0, "segment_break": None, "reused_prefix_len": 0, "line": "main",
        "max_tokens_requested": None, "max_tokens_granted": None, "status": "complete", "error": None,
        "latency_ms": 1.0, "started_ns": time.time_ns(), "ended_ns": time.time_ns(),
    }  # fmt: skip


@pytest.mark.parametrize("only_if", [None, TAKES_RECORDS], ids=["guard-first", "checked-by-the-insert"])
@pytest.mark.parametrize("full", [False, True], ids=["columns-with-defaults", "every-column"])
def test_the_store_refuses_records_for_an_ended_rollout(any_store_url: str, only_if: Any, full: bool) -> None:
    """The guard behind the caches: a model-call insert that races a finish (another process) writes nothing.
    The proxy's writer checks inside the insert itself (``only_if``); the guard then says why."""
    engine = open_engine(any_store_url)
    book = RolloutBook(engine)
    book.create_run("r")
    (row, _token), = book.create("r", 1, {})
    writer = RowWriter(engine, ModelCall.__table__, guard=guard_active, only_if=only_if)  # type: ignore[attr-defined]
    call = _full_call(row.id) if full else {
        "rollout_id": row.id, "prompt_ids": b"", "completion_ids": b"", "completion_logprobs": b""
    }  # fmt: skip
    assert len(anyio.run(writer.insert, [call])) == 1
    book.set_status(row.id, RolloutStatus.FINISHED)
    with pytest.raises(Forbidden, match="finished"):
        anyio.run(writer.insert, [call])
    with pytest.raises(Forbidden, match="no rollout ro-none"):
        anyio.run(writer.insert, [{**call, "rollout_id": "ro-none"}])
    writer.close()
    assert _counts(engine, row.id) == (1, 0)


def _wait_for_a_lock_wait(engine: Engine) -> None:
    """Until another session of this database waits for a lock (Postgres says so in ``pg_stat_activity``)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    with engine.connect() as conn:

        def waiting() -> int:
            found = conn.execute(query).scalar_one()
            conn.rollback()  # a fresh snapshot of the activity view next time
            return int(found)

        wait_until(waiting, "the move to wait for the insert's lock", every_s=0.01)


@pytest.mark.parametrize("target", [RolloutStatus.SCORING, RolloutStatus.FINISHED])
def test_a_move_out_of_recording_waits_for_an_insert_in_flight(postgres_url: str, target: RolloutStatus) -> None:
    """Postgres: the insert share-locks its rollout's row, so a move that ends recording waits for the insert's
    commit (and a finish's cursor covers the call). The reference to the rollout alone would not make a move to
    scoring wait: that update changes no key. (On SQLite the insert's transaction holds the write lock.)"""
    engine = open_engine(postgres_url)
    book = RolloutBook(engine)
    book.create_run("r")
    (row, _token), = book.create("r", 1, {})
    insert = DirectInsert(ModelCall.__table__, engine.dialect, TAKES_RECORDS)  # type: ignore[attr-defined]
    finished: list[Any] = []
    with engine.connect() as conn, conn.begin():
        assert insert.insert(conn, _full_call(row.id)) is not None
        finisher = threading.Thread(
            target=lambda: finished.append(book.set_status(row.id, target)), daemon=True
        )
        finisher.start()
        _wait_for_a_lock_wait(engine)
        assert not finished
    finisher.join(30)
    assert finished and finished[0].status == target
    assert _counts(engine, row.id) == (1, 0)
    engine.dispose()
