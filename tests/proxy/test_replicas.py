"""Several proxy processes on one store splice exactly as one: a rollout's calls land on the replicas in turn
(round-robin), and every call continues the previous one's exact prompt + sampled ids in one segment.

In-process replicas (two apps, each with its own cache) behind a round-robin client, on SQLite and Postgres;
then ``rollwire proxy --workers 2`` (forked processes on one socket) driven by many rollouts at once."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionFunctionToolParam

from rollwire.reconstruct import load_calls
from rollwire.store import decode_ids, open_engine
from rollwire.store.prompts import whole_prompts
from rollwire.store.requests import whole_requests
from rollwire.store.schema import ModelCall
from tests.proxy.cli_workers import cli_workers
from tests.proxy.conftest import Proxy

TURNS = 6
TOOLS: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def _converse(clients: list[openai.OpenAI], model: str, turns: int = TURNS) -> None:
    """One agent conversation whose call i goes to clients[i % len(clients)], carrying each answer back."""
    messages: list[Any] = [{"role": "user", "content": "Fix the build."}]
    for turn in range(turns):
        client = clients[turn % len(clients)]
        out = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=6, seed=turn)
        message = out.choices[0].message.model_dump(exclude_none=True)
        messages += [message, {"role": "user", "content": f"output of step {turn}: ok"}]


def _calls(store_url: str, rollout_id: str) -> list[ModelCall]:
    engine = open_engine(store_url)
    try:
        return load_calls(engine, rollout_id)
    finally:
        engine.dispose()


def exact_calls(store_url: str, rollout_id: str) -> tuple[int, int]:
    """(calls, calls that continue the previous call's exact ids in its segment); equal when all are exact. A
    continuing call's row names the call it continues and keeps only what follows (``rollwire.store.prompts``)."""
    calls = _calls(store_url, rollout_id)
    exact, before, before_prompt = 0, None, b""
    for call, whole in zip(calls, whole_prompts(calls)):
        prompt = decode_ids(whole)
        if before is None:
            exact += call.segment_break is None and call.segment_index == 0
        else:
            reused = decode_ids(before_prompt) + decode_ids(before.completion_ids)
            exact += (
                call.segment_index == 0
                and call.segment_break is None
                and call.reused_prefix_len == len(reused)
                and prompt[: len(reused)] == reused
                and (call.prompt_base, decode_ids(call.prompt_ids)) == (before.id, prompt[len(reused) :])
            )
        before, before_prompt = call, whole
    return len(calls), exact


def requests_read_back(store_url: str, rollout_id: str) -> list[tuple[int | None, int]]:
    """(the position of the call whose request a call's row edits, how many messages its whole request holds),
    call by call."""
    calls = _calls(store_url, rollout_id)
    ids = [c.id for c in calls]
    return [
        (None if call.request_base is None else ids.index(call.request_base), len(json.loads(whole)["messages"]))
        for call, whole in zip(calls, whole_requests(calls))
    ]


def _rollout_id(proxy: Proxy) -> tuple[str, str]:
    rollout = proxy.new_rollout()
    return rollout["id"], rollout["base_url"]


def test_round_robin_replicas_splice_exactly(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str, any_store_url: str
) -> None:
    replicas = [start_proxy(engine_url, store_url=any_store_url) for _ in range(2)]
    for _ in range(2):
        rollout_id, base = _rollout_id(replicas[0])
        bases = [base.replace(replicas[0].url, r.url) for r in replicas]
        clients = [openai.OpenAI(base_url=b, api_key="unused", max_retries=0) for b in bases]
        _converse(clients, served_model)
        assert exact_calls(any_store_url, rollout_id) == (TURNS, TURNS)
        # each call's row keeps its request as an edit of the last one's, written by the other replica
        edits = [(turn - 1, 2 * turn + 1) for turn in range(1, TURNS)]
        assert requests_read_back(any_store_url, rollout_id) == [(None, 1), *edits]


def test_without_a_shared_store_check_round_robin_is_not_exact(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str, store_url: str
) -> None:
    """What the check prevents: a replica that trusts its own cache splices onto a call it saw, not the last."""
    replicas = [start_proxy(engine_url, store_url=store_url, shared_store=False) for _ in range(2)]
    rollout_id, base = _rollout_id(replicas[0])
    clients = [openai.OpenAI(base_url=base.replace(replicas[0].url, r.url), api_key="u") for r in replicas]
    _converse(clients, served_model)
    calls, exact = exact_calls(store_url, rollout_id)
    assert calls == TURNS and exact < TURNS


def test_cli_workers_splice_exactly(engine_url: str, served_model: str, tiny_model_dir: Path, store_url: str) -> None:
    with cli_workers(engine_url, store_url, tiny_model_dir) as workers:
        admin_url = f"http://127.0.0.1:{workers.admin_port}"
        admin = httpx.Client(base_url=admin_url, headers={"Authorization": "Bearer k"}, timeout=60)
        run = admin.post("/admin/v1/runs", json={}).json()["id"]
        rollouts = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 8}).json()
        assert len(workers.pids()) == 2

        def one(rollout: dict[str, Any]) -> tuple[int, int]:
            # a fresh client per call: a new connection each time, so the kernel may hand it to either worker
            clients = []
            for _ in range(TURNS):
                http = httpx.Client(limits=NO_KEEPALIVE)
                # openai takes an httpx.Client as well as an httpx2.Client; its annotation names only the latter
                client = openai.OpenAI(
                    base_url=rollout["base_url"], api_key="u", http_client=http  # type: ignore[arg-type]
                )
                clients.append(client)
            _converse(clients, served_model)
            return exact_calls(store_url, rollout["id"])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, rollouts))
        assert results == [(TURNS, TURNS)] * len(rollouts)
    assert workers.proc.returncode == 0, workers.output
    assert "Traceback" not in workers.output


NO_KEEPALIVE = httpx.Limits(max_keepalive_connections=0)
