"""The policy under training is an adversary of the engine's prefix cache: a prompt the engine has cached answers
faster than one it has not, and a rollout can time its own calls, so a shared cache would let it test guesses at
what its siblings wrote. Through the real proxy and the bundled engine: another rollout's call never reuses a
rollout's cached prompt (the hit counter does not move, so there is nothing to time), while a rollout's own next
turn does; scope ``shared``, the operator's opt-out, shares again. The salt comes from the proxy, keyed by its
secret, so a rollout cannot pick another's; it never reaches the engine itself (the sandbox tests show that)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app as create_engine
from rollwire.proxy.app import create_app as create_proxy
from rollwire.settings import EngineSettings, ProxySettings

KEY = "test-operator-key"
SYSTEM = "You are a careful agent. " * 40
"""Long enough to span several cache blocks once templated."""


@pytest.fixture()
def engine_url(tiny_model_dir: Path, tmp_path: Path) -> Iterator[str]:
    """A private engine: the test reads its cache counters."""
    with ServerThread(create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path)) as server:
        yield server.url


def _hits(engine_url: str) -> int:
    text = httpx.get(f"{engine_url}/metrics", timeout=10).text
    match = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\d+)$", text, re.MULTILINE)
    assert match
    return int(match.group(1))


def _rollouts(proxy_url: str, admin_url: str, count: int) -> list[openai.OpenAI]:
    with httpx.Client(base_url=admin_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as admin:
        run = admin.post("/admin/v1/runs", json={}).json()["id"]
        rows = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": count}).json()
    return [openai.OpenAI(base_url=row["base_url"], api_key="x", max_retries=0) for row in rows]


def _ask(client: openai.OpenAI, messages: list[Any]) -> str:
    reply = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=8, temperature=0, extra_body={"ignore_eos": True}
    )
    return reply.choices[0].message.content or ""


@pytest.mark.parametrize("scope", ["rollout", "shared"])
def test_a_rollout_never_reuses_another_rollouts_cached_prompt(
    scope: str, engine_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = ProxySettings(upstream=engine_url, model=str(tiny_model_dir), prefix_cache_scope=scope)
    app = create_proxy(settings, f"sqlite:///{tmp_path / 'proxy.db'}", tmp_path, operator_key=KEY)
    with ServerThread(app) as proxy:
        victim, attacker = _rollouts(proxy.url, proxy.urls["admin"], 2)
        secret_turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "the hidden plan is X"}]
        answer = _ask(victim, secret_turn)

        before = _hits(engine_url)
        _ask(attacker, secret_turn)
        stolen = _hits(engine_url) - before

        before = _hits(engine_url)
        _ask(victim, secret_turn + [{"role": "assistant", "content": answer}, {"role": "user", "content": "go on"}])
        own = _hits(engine_url) - before

    assert own >= 128, "a rollout's next turn reuses its own prompt"
    if scope == "rollout":
        assert stolen == 0, "another rollout's call reused the victim's cached prompt"
    else:
        assert stolen >= 128, "scope 'shared' lets calls share their common prefix"


def test_an_unknown_scope_fails_at_start(tiny_model_dir: Path, tmp_path: Path) -> None:
    from rollwire.errors import InvalidRequest

    settings = ProxySettings(model=str(tiny_model_dir), prefix_cache_scope="everyone")
    with pytest.raises(InvalidRequest, match="unknown prefix cache scope 'everyone'; known: rollout, shared"):
        create_proxy(settings, f"sqlite:///{tmp_path / 'proxy.db'}", tmp_path, operator_key=KEY)
