"""The proxy's per-rollout cache of earlier calls is bounded (rollouts, token ids), and a rollout it dropped is
read back from the store when it calls again: its calls stay exact."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from sqlmodel import col, select

from rollwire.app.serving import ServerThread
from rollwire.compact_json import json_bytes
from rollwire.proxy.app import create_app
from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.splice.priors import PriorCache
from rollwire.rollouts import RolloutBook
from rollwire.settings import ProxySettings
from rollwire.store import ModelCall, encode_ids, open_engine, session_scope
from rollwire.store.prompts import stored_prompt
from rollwire.store.requests import SentRequest, stored_request
from tests.proxy.conftest import OPERATOR_KEY, admin_client
from tests.proxy.test_replicas import TOOLS, exact_calls

ROLLOUTS, TURNS = 4, 3


def _steps(client: openai.OpenAI, model: str) -> Iterator[None]:
    """One tool conversation, a call per step (so several rollouts' calls can interleave)."""
    messages: list[Any] = [{"role": "user", "content": "Fix the build."}]
    for turn in range(TURNS):
        out = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=6, seed=turn)
        messages += [out.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": f"ok {turn}"}]
        yield


@pytest.mark.parametrize(("bound", "kept"), [({"cache_rollouts": 2}, 2), ({"cache_tokens": 1}, 1)])
def test_cache_stays_bounded_and_evicted_rollouts_splice_exactly(
    engine_url: str, served_model: str, tiny_model_dir: Path, store_url: str, bound: dict[str, int], kept: int
) -> None:
    settings = ProxySettings(upstream=engine_url, model=str(tiny_model_dir), **bound)
    app = create_app(settings, store_url, tiny_model_dir.parent, operator_key=OPERATOR_KEY)
    with ServerThread(app) as server:
        admin = admin_client(server.urls["admin"])
        run = admin.post("/admin/v1/runs", json={}).json()["id"]
        rollouts = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": ROLLOUTS}).json()
        clients = [openai.OpenAI(base_url=r["base_url"], api_key="u", max_retries=0) for r in rollouts]
        conversations = [_steps(c, served_model) for c in clients]
        calls = app.state.proxy.calls
        cache, settled = calls.splice, threading.Semaphore(0)
        calls.recorder.late_listeners.append(lambda _rollout, _rows: settled.release())  # the cache has learnt the call
        sizes = []
        for _ in range(TURNS):  # round-robin over the rollouts: each call finds its rollout dropped meanwhile
            for conversation in conversations:
                next(conversation)
                assert settled.acquire(timeout=30)
                sizes.append(len(cache))
        assert max(sizes) == kept
        held = [p for known in cache._known.values() for p in known.priors]
        assert cache.tokens == sum(len(p.prompt_ids) + len(p.sampled_ids) for p in held) > 0  # counted, not leaked
    assert [exact_calls(store_url, r["id"]) for r in rollouts] == [(TURNS, TURNS)] * ROLLOUTS


def test_only_each_segments_latest_call_holds_its_ids_as_json(
    engine_url: str, served_model: str, tiny_model_dir: Path, store_url: str
) -> None:
    """The next call splices onto a segment's latest call by appending to its prompt as sent (``prompt_json``); an
    earlier call lets go of it, so a rollout holds one such copy per segment, and its splices stay exact."""
    settings = ProxySettings(upstream=engine_url, model=str(tiny_model_dir))
    app = create_app(settings, store_url, tiny_model_dir.parent, operator_key=OPERATOR_KEY)
    with ServerThread(app) as server:
        admin = admin_client(server.urls["admin"])
        run = admin.post("/admin/v1/runs", json={}).json()["id"]
        (rollout,) = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()
        for _ in _steps(openai.OpenAI(base_url=rollout["base_url"], api_key="u", max_retries=0), served_model):
            pass
        *earlier, latest = app.state.proxy.calls.splice._known[rollout["id"]].priors
    assert len(earlier) == TURNS - 1 and all(p.continued and p.prompt_json is None for p in earlier)
    assert not latest.continued and latest.prompt_json == json_bytes(list(latest.prompt_ids))
    # the same for its request, which the next call's row keeps as an edit of
    assert all(p.request_sent is None for p in earlier) and latest.request_sent is not None
    assert len(json.loads(latest.request_sent.data)["messages"]) == 2 * TURNS - 1
    assert exact_calls(store_url, rollout["id"]) == (TURNS, TURNS)


def test_a_call_another_process_wrote_reads_back_whole(store_url: str) -> None:
    """Another process's call continues one held here (its ids come from the cache), or one held as no prior (no
    dialect here reads it back: the rollout is then read whole). Either way the prior holds the whole prompt."""
    engine = open_engine(store_url)
    book = RolloutBook(engine)
    book.create_run("run")
    ((rollout, _token),) = book.create("run", 1, {})
    conv, answer = Conversation("m", (Message("user", "hi"),)), Message("assistant", "ok")
    dialects = {"chat": (lambda _body: conv, lambda _body, _index: answer)}
    cache = PriorCache(engine, dialects, shared=True)

    def write(dialect: str, whole: list[int], sampled: list[int], base: int | None = None, reused: int = 0) -> None:
        row = ModelCall(
            rollout_id=rollout.id, dialect=dialect, request_json="{}", response_json="{}", prompt_base=base,
            prompt_ids=stored_prompt(encode_ids(whole), base, reused), reused_prefix_len=reused,
            completion_ids=encode_ids(sampled),
        )  # fmt: skip
        with session_scope(engine) as session:
            session.add(row)

    async def main() -> None:
        write("another", [1, 2], [3])  # call 1: no dialect here reads it back
        assert await cache.priors(rollout.id) == []
        write("chat", [1, 2, 3, 4], [5], base=1, reused=3)  # call 2, continuing call 1
        (second,) = await cache.priors(rollout.id)
        assert (second.call_id, second.prompt_ids, second.sampled_ids) == (2, [1, 2, 3, 4], [5])
        write("chat", [1, 2, 3, 4, 5, 6], [7], base=2, reused=5)  # call 3, continuing call 2 (held)
        third = (await cache.priors(rollout.id))[-1]
        assert (third.call_id, third.prompt_ids, third.ids_blob()) == (
            3,
            [1, 2, 3, 4, 5, 6],
            encode_ids(list(range(1, 8))),
        )

    anyio.run(main)
    engine.dispose()


def test_a_request_another_process_edited_reads_back_whole(store_url: str) -> None:
    """Another process's call edits the request of a call held here (its text comes from the cache), or of one
    this process holds without its request (a branch of a continued call: the rollout is then read whole)."""
    engine = open_engine(store_url)
    book = RolloutBook(engine)
    book.create_run("run")
    ((rollout, _token),) = book.create("run", 1, {})
    answer = Message("assistant", "ok")
    dialects = {"chat": (lambda body: Conversation("m", (Message("user", body["q"]),)), lambda _body, _i: answer)}
    cache = PriorCache(engine, dialects, shared=True)
    tools = "t" * 1000  # what every request repeats

    def body(question: str) -> str:
        return json.dumps({"q": question, "tools": tools})

    def write(whole: str, segment: int = 0, base: int | None = None, base_text: str | None = None) -> None:
        kept = stored_request(whole.encode(), base, SentRequest.of_text(base_text) if base_text else None)
        row = ModelCall(
            rollout_id=rollout.id, request_json=kept.text, request_base=kept.base, request_head=kept.head,
            request_tail=kept.tail, response_json="{}", prompt_ids=encode_ids([1]), completion_ids=encode_ids([2]),
            segment_index=segment,
        )  # fmt: skip
        with session_scope(engine) as session:
            session.add(row)

    async def main() -> None:
        write(body("a"))  # call 1
        assert [p.request_sent for p in await cache.priors(rollout.id)] == [SentRequest.of_text(body("a"))]
        write(body("ab"), base=1, base_text=body("a"))  # call 2 edits call 1 (held with its request)
        first, second = await cache.priors(rollout.id)
        assert (first.request_sent, second.request_sent) == (None, SentRequest.of_text(body("ab")))  # 1 continued
        write(body("ac"), segment=1, base=1, base_text=body("a"))  # call 3, a branch: edits call 1 (not held)
        priors = await cache.priors(rollout.id)
        held = [(p.call_id, p.request_sent and p.request_sent.data.decode()) for p in priors]
        assert held == [(1, None), (2, body("ab")), (3, body("ac"))]

    anyio.run(main)
    with session_scope(engine) as session:
        stored = [c.request_base for c in session.exec(select(ModelCall).order_by(col(ModelCall.id))).all()]
    engine.dispose()
    assert stored == [None, 1, 1]  # written as edits, read back whole
