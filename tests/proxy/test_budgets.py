"""Per-rollout budgets in the proxy: model calls, sampled tokens, requests at once and a total deadline per call.
Each refusal is a clear 4xx (or the dialect's timeout) in the dialect's shape with a recorded reason, and the
counts survive a restart (they are re-read from the store)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio.to_thread
import httpx
import openai
import pytest
from sqlmodel import select

from rollwire.app.serving import ServerThread
from rollwire.settings import EngineSettings
from rollwire.store import ModelCall, Refusal, decode_ids, open_engine, session_scope
from tests.proxy.conftest import Proxy


class Gate:
    """Wraps the engine: each completion request signals ``arrived`` and waits for ``release`` (a signal, never a
    sleep), so a test holds a call in flight for as long as it needs."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.arrived = threading.Event()
        self.release = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/completions":
            self.arrived.set()
            await anyio.to_thread.run_sync(self.release.wait)
        await self.app(scope, receive, send)


@pytest.fixture()
def gate(tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[Gate, str]]:
    from rollwire.engine import create_app as create_engine

    wrapped = Gate(create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path / "gated"))
    with ServerThread(wrapped) as server:
        yield wrapped, server.url
        wrapped.release.set()


def _refusals(store_url: str, rollout_id: str) -> list[tuple[str, str]]:
    with session_scope(open_engine(store_url)) as session:
        rows = session.exec(select(Refusal).where(Refusal.rollout_id == rollout_id).order_by(Refusal.id))  # type: ignore[arg-type]
        return [(r.kind, r.reason) for r in rows]


def _ask(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "seed": 1, **extra}


def test_model_call_budget_holds_across_a_restart(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'budget.db'}"
    proxy = start_proxy(engine_url, store)
    run = proxy.admin.post("/admin/v1/runs", json={"budgets": {"model_calls": 2}}).json()["id"]
    rollout = proxy.admin.post(f"/admin/v1/runs/{run}/rollouts", json={}).json()[0]
    llm = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
    llm.chat.completions.create(**_ask(served_model))
    llm.chat.completions.create(**_ask(served_model))
    with pytest.raises(openai.PermissionDeniedError, match="used its 2 model calls"):
        llm.chat.completions.create(**_ask(served_model))
    restarted = start_proxy(engine_url, store)  # a new process state on the same store
    claude = anthropic.Anthropic(base_url=rollout["anthropic_base_url"].replace(proxy.url, restarted.url), api_key="x", max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError) as denied:
        claude.messages.create(model=served_model, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert denied.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
    assert [kind for kind, _ in _refusals(store, rollout["id"])] == ["model_calls", "model_calls"]
    bad = proxy.admin.post(f"/admin/v1/runs/{run}/rollouts", json={"budgets": {"model_calls": 0}})
    assert bad.status_code == 400 and "budgets.model_calls" in bad.text
    unknown = proxy.admin.post("/admin/v1/runs", json={"budgets": {"gpu_hours": 1}})
    assert unknown.status_code == 400 and "unknown budget 'gpu_hours'" in unknown.text


def test_sampled_tokens_are_capped_then_refused(proxy: Proxy, served_model: str) -> None:
    rollout = proxy.new_rollout(budgets={"sampled_tokens": 3})
    llm = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
    refused = None
    for _ in range(4):
        try:
            llm.chat.completions.create(**_ask(served_model, max_tokens=50))
        except openai.PermissionDeniedError as exc:
            refused = exc
            break
    assert refused is not None and "sampled tokens" in str(refused)
    with session_scope(open_engine(proxy.store_url)) as session:
        calls = session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout["id"])).all()
    assert sum(len(decode_ids(c.completion_ids)) for c in calls) <= 3  # each call cut to what was left
    assert _refusals(proxy.store_url, rollout["id"])[0][0] == "sampled_tokens"


def test_one_request_at_a_time_on_a_token(
    start_proxy: Callable[..., Proxy], gate: tuple[Gate, str], served_model: str
) -> None:
    held, upstream = gate
    proxy = start_proxy(upstream)
    rollout = proxy.new_rollout(budgets={"concurrent_requests": 1})
    answers: list[int] = []
    first = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{rollout['base_url']}/chat/completions", json=_ask(served_model), timeout=60).status_code
        )
    )
    first.start()
    assert held.arrived.wait(30)  # the first call is in flight at the engine
    second = httpx.post(f"{rollout['base_url']}/chat/completions", json=_ask(served_model), timeout=60)
    assert second.status_code == 429 and second.json()["error"]["type"] == "rate_limit_error"
    assert "in flight" in second.json()["error"]["message"]
    held.release.set()
    first.join(60)
    assert answers == [200]
    third = httpx.post(f"{rollout['base_url']}/chat/completions", json=_ask(served_model), timeout=60)
    assert third.status_code == 200  # the slot came back
    assert [kind for kind, _ in _refusals(proxy.store_url, rollout["id"])] == ["concurrent_requests"]


def test_a_call_deadline_is_total_not_per_read(
    start_proxy: Callable[..., Proxy], gate: tuple[Gate, str], served_model: str
) -> None:
    _held, upstream = gate  # never released: the engine never answers
    proxy = start_proxy(upstream, upstream_timeout_s=600.0)
    rollout = proxy.new_rollout(budgets={"call_deadline_s": 1.0})
    answer = httpx.post(f"{rollout['base_url']}/chat/completions", json=_ask(served_model), timeout=60)
    message = answer.json()["error"]["message"]  # a spent budget: a 4xx like the others, not the upstream's 504
    assert answer.status_code == 403 and "call deadline of 1.0 s" in message and "timed out" in message
    assert [kind for kind, _ in _refusals(proxy.store_url, rollout["id"])] == ["deadline"]


def test_usage_is_kept_for_the_newest_rollouts_and_those_with_calls_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running proxy sees rollouts without end: what it keeps of their usage stays bounded."""
    import asyncio

    from rollwire.rollouts import budgets as budgets_module
    from rollwire.rollouts.budgets import Budgets
    from rollwire.rollouts.tokens import Identity
    from rollwire.store.schema import RolloutStatus

    monkeypatch.setattr(budgets_module, "KEEP", 3)
    keeper = Budgets(open_engine(f"sqlite:///{tmp_path / 'store.db'}"), "proxy")

    async def scenario() -> list[str]:
        busy = await keeper.model_call(Identity("r0", "run", RolloutStatus.RUNNING), "model")  # stays in flight
        for i in range(1, 7):
            await keeper.usage(f"r{i}")
        kept = list(keeper._usage)
        busy.release()
        return kept

    assert asyncio.run(scenario()) == ["r0", "r4", "r5", "r6"]


def test_usage_is_read_back_from_either_store(any_store_url: str) -> None:
    """A restarted (or another) process counts a rollout's use from its rows: model calls (first choices only),
    sampled tokens (every choice) and tool calls, that rollout's alone, in one statement."""
    from rollwire.rollouts import RolloutBook
    from rollwire.rollouts.budgets import _UsageQuery
    from rollwire.store import ToolEvent

    engine = open_engine(any_store_url)
    book = RolloutBook(engine)
    book.create_run("r")
    (mine, _), (other, _) = book.create("r", 2, {})

    def ids(n: int) -> bytes:
        return b"\x01\x00\x00\x00" * n  # int32 ids, as the codec stores them

    with session_scope(engine) as session:
        for rollout, choice, sampled in [(mine, 0, 3), (mine, 1, 4), (mine, 0, 5), (other, 0, 7)]:
            session.add(ModelCall(rollout_id=rollout.id, choice_index=choice, completion_ids=ids(sampled)))
        session.add_all([ToolEvent(rollout_id=mine.id), ToolEvent(rollout_id=other.id), ToolEvent(rollout_id=other.id)])
    read = _UsageQuery(engine)
    assert vars(read(mine.id)) == {"model_calls": 2, "sampled_tokens": 12, "tool_calls": 1, "in_flight": 0}
    assert vars(read(other.id)) == {"model_calls": 1, "sampled_tokens": 7, "tool_calls": 2, "in_flight": 0}
    assert vars(read("ro-none")) == {"model_calls": 0, "sampled_tokens": 0, "tool_calls": 0, "in_flight": 0}
