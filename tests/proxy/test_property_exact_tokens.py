"""Must-show 2: random multi-turn tool conversations through proxy + engine; every segment's sampled tokens
are exactly what the engine sampled (with its logprobs) and every other token exactly what it was shown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.reconstruct import reconstruct
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.store import open_engine
from tests.proxy.conftest import ENGINES
from tests.proxy.engine_tap import EngineTap
from tests.proxy.exactness import assert_segments_exact
from tests.proxy.http_forward import HttpForward

OPERATOR = "property-operator"
TOOLS = [
    {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    }
]


@pytest.fixture(scope="module", params=ENGINES)
def stack(
    request: pytest.FixtureRequest, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, EngineTap, str]]:
    """Proxy in front of a tapped engine: the bundled one, then real vLLM (tapped over HTTP)."""
    from rollwire.engine import create_app as create_engine

    home = tmp_path_factory.mktemp("prop")
    if request.param == "vllm":
        tap = EngineTap(HttpForward(request.getfixturevalue("vllm_url")))
    else:
        tap = EngineTap(create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), home))
    store = f"sqlite:///{home / 'store.db'}"
    with ServerThread(tap) as engine:
        proxy_app = create_app(ProxySettings(upstream=engine.url, model=str(tiny_model_dir)), store, home, OPERATOR)
        with ServerThread(proxy_app) as proxy:
            yield proxy.urls["admin"], tap, store  # rollouts' links name the main listener


words = st.text(alphabet='abcdefghij klmnop?!.,{}"', min_size=1, max_size=30)
step = st.tuples(st.sampled_from(["user", "tool", "tool2", "rewrite"]), words)
script = st.tuples(
    words, st.lists(step, min_size=1, max_size=3), st.integers(1, 8), st.sampled_from([0.0, 1.0]), st.integers(0, 99)
)


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message as a harness carries it back."""
    return {k: v for k, v in message.items() if k in ("role", "content", "tool_calls", "reasoning_content")}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=script)
def test_segments_are_exactly_what_the_engine_saw_and_sampled(stack: tuple[str, EngineTap, str], script: Any) -> None:
    admin_url, tap, store = stack
    first, steps, max_tokens, temperature, seed = script
    admin = httpx.Client(base_url=admin_url, headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=60)
    run = admin.post("/admin/v1/runs", json={}).json()["id"]
    rollout = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()[0]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": first}]
    start = len(tap.calls)
    with httpx.Client(base_url=rollout["base_url"], timeout=60) as client:
        for i in range(len(steps) + 1):
            body = {
                "model": "m",
                "messages": messages,
                "tools": TOOLS,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "seed": seed + i,
            }
            response = client.post("/chat/completions", json={**body, "model": _served(client)})
            assert response.status_code == 200, response.text
            if i == len(steps):
                break
            kind, text = steps[i]
            messages = messages + [_answer(response.json()["choices"][0]["message"])]
            if kind == "rewrite":  # the harness edits its history: a new segment, still exact
                messages[1] = {"role": "user", "content": messages[1]["content"] + " (edited)"}
            if kind in ("tool", "tool2"):
                messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": text})
                if kind == "tool2":
                    messages.append({"role": "tool", "tool_call_id": f"call_{i}b", "content": text[::-1]})
            else:
                messages.append({"role": "user", "content": text})
    admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 1.0}).raise_for_status()
    admin.close()
    trajectory = reconstruct(open_engine(store), rollout["id"])
    assert_segments_exact(trajectory, tap.calls[start:], calls=len(steps) + 1)
    rewrites = sum(1 for kind, _ in steps if kind == "rewrite")
    assert len(trajectory.segments) == 1 + rewrites


_SERVED: dict[str, str] = {}


def _served(client: httpx.Client) -> str:
    if "name" not in _SERVED:
        _SERVED["name"] = client.get("/models").json()["data"][0]["id"]
    return _SERVED["name"]
