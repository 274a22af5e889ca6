"""A whole (non-streamed) answer is still streamed from the engine, in chunks of many tokens where the engine
takes a per-request ``stream_interval`` (vLLM and the bundled engine list it in their OpenAPI schema): the proxy
then wakes a few times a call, not once a token, and records every token as the engine sampled it. A streamed
answer keeps one token a chunk, and an engine that does not list the field never gets it (older vLLM logs every
request that does)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import openai
import pytest
from sqlmodel import Session, select

from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.proxy.call.prepare import WHOLE_ANSWER_STREAM_INTERVAL
from rollwire.proxy.upstream import make_client, takes_stream_interval
from rollwire.settings import ProxySettings
from rollwire.store import ModelCall, decode_floats, decode_ids, open_engine
from tests.proxy.conftest import OPERATOR_KEY, Proxy
from tests.proxy.engine_tap import EngineTap
from tests.proxy.http_forward import HttpForward
from tests.proxy.upstream_shim import shimmed_engine

USER = [{"role": "user", "content": "Write a long story about a lighthouse."}]


def _takes(url: str) -> bool:
    async def ask() -> bool:
        client = make_client(url, 30.0)
        try:
            return await takes_stream_interval(client)
        finally:
            await client.close()

    return anyio.run(ask)


@pytest.mark.parametrize("listed", [None, True, False], ids=["bundled", "listed", "no-schema"])
def test_only_whole_answers_ask_for_chunks_and_only_of_an_engine_that_lists_the_field(
    start_proxy: Callable[..., Proxy], tiny_model_dir: Path, tmp_path: Path, served_model: str, listed: bool | None
) -> None:
    with shimmed_engine(tiny_model_dir, tmp_path / "engine", stream_interval=listed) as (upstream, shim):
        client = openai.OpenAI(base_url=start_proxy(upstream).new_rollout()["base_url"], api_key="x", max_retries=0)
        whole = client.chat.completions.create(model=served_model, messages=USER, max_tokens=40)  # type: ignore[arg-type]
        streamed = client.chat.completions.create(model=served_model, messages=USER, max_tokens=6, stream=True)  # type: ignore[arg-type]
        assert whole.choices[0].finish_reason and [c for c in streamed]
    assert shim.intervals == ([None, None] if listed is False else [WHOLE_ANSWER_STREAM_INTERVAL, None])


def test_vllm_and_the_bundled_engine_list_the_field(vllm_url: str, engine_url: str) -> None:
    assert _takes(vllm_url) is True
    assert _takes(engine_url) is True
    assert _takes("http://127.0.0.1:9") is False  # nothing listening: no field, no error here


def test_a_whole_answer_comes_in_chunks_and_every_token_is_recorded(
    any_engine_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The bundled engine, then real vLLM: the proxy asks for chunks of WHOLE_ANSWER_STREAM_INTERVAL tokens, the
    engine sends them so, and the call is recorded with exactly the ids and logprobs it sampled (``EngineTap``
    keeps them apart)."""
    tap = EngineTap(HttpForward(any_engine_url))
    store = f"sqlite:///{tmp_path / 'store.db'}"
    with ServerThread(tap) as engine:
        app = create_app(ProxySettings(upstream=engine.url, model=str(tiny_model_dir)), store, tmp_path, OPERATOR_KEY)
        with ServerThread(app) as proxy:
            headers = {"Authorization": f"Bearer {OPERATOR_KEY}"}
            with httpx.Client(base_url=proxy.urls["admin"], headers=headers, timeout=60) as admin:
                run = admin.post("/admin/v1/runs", json={}).json()["id"]
                (rollout,) = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()
            client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
            model = client.models.list().data[0].id
            client.chat.completions.create(model=model, messages=USER, max_tokens=80, temperature=1.0, seed=3)  # type: ignore[arg-type]
    ((request, answer),) = tap.calls
    assert request["stream_interval"] == WHOLE_ANSWER_STREAM_INTERVAL and request["stream"] is True
    sampled = answer["choices"][0]
    with Session(open_engine(store)) as session:
        (row,) = session.exec(select(ModelCall)).all()
    assert len(sampled["token_ids"]) >= 2  # the first token comes alone, the rest in chunks of many
    assert decode_ids(row.completion_ids) == sampled["token_ids"]
    assert decode_floats(row.completion_logprobs) == pytest.approx(sampled["logprobs"]["token_logprobs"], abs=1e-6)
    # straight to the engine, the same request made to run its full length (the tiny model often ends sooner),
    # so the count of chunks is known: not what the proxy sends, only what the engine does with the interval
    unstopped = {**request, "max_tokens": 70, "ignore_eos": True, "stop_token_ids": []}
    with httpx.stream("POST", f"{any_engine_url}/v1/completions", json=unstopped, timeout=60) as sse:
        events = [line for line in sse.iter_lines() if line.startswith("data: {")]
    assert len(events) == 1 + -(-69 // WHOLE_ANSWER_STREAM_INTERVAL)  # honoured: 1 + 69 tokens in 3 chunks
