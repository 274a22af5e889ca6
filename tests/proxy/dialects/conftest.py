"""Dialect fixtures: the engine behind a tap that keeps each completion (independently of the proxy), a
proxy in front, and the exactness check every dialect's trajectory must pass."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.settings import EngineSettings, ProxySettings
from tests.proxy.conftest import ENGINES, admin_client
from tests.proxy.engine_tap import EngineTap
from tests.proxy.http_forward import HttpForward
from tests.sampling import SAMPLE_SEED

OPERATOR = "dialects-operator"
MAX_MODEL_LEN = 32768
"""Above the tiny model's own 8192: real harness prompts (Codex's instructions and tools) are ~15k tokens."""


class StatusTap:
    """ASGI wrapper around the proxy's main listener recording (method, path, status) of every answered request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.answers: list[tuple[str, str, int]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def tap_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.answers.append((scope["method"], scope["path"], int(message["status"])))
            await send(message)

        await self.app(scope, receive, tap_send)


@dataclass
class Stack:
    url: str
    tap: EngineTap
    admin: httpx.Client
    served: str
    statuses: StatusTap
    store_url: str

    def new_rollout(self) -> dict[str, Any]:
        run = self.admin.post("/admin/v1/runs", json={}).json()["id"]
        response = self.admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1})
        response.raise_for_status()
        return dict(response.json()[0])

    def check_exact(self, rollout_id: str, first_call: int) -> dict[str, Any]:
        """Every engine call of this rollout sits unchanged in its segment: prompt masked 0, sample masked 1."""
        self.admin.post(f"/admin/v1/rollouts/{rollout_id}/finish", json={"reward": 0.0}).raise_for_status()
        trajectory = self.admin.get(f"/admin/v1/rollouts/{rollout_id}/trajectory").json()
        seen = self.tap.calls[first_call:]
        assert sum(len(s["call_ids"]) for s in trajectory["segments"]) == len(seen) >= 1
        index = 0
        for segment in trajectory["segments"]:
            mask: list[int] = []
            for _ in segment["call_ids"]:
                request, answer = seen[index]
                index += 1
                prompt, sampled = request["prompt"], answer["choices"][0]["token_ids"]
                assert segment["token_ids"][: len(prompt)] == prompt
                assert segment["token_ids"][len(prompt) : len(prompt) + len(sampled)] == sampled
                mask += [0] * (len(prompt) - len(mask)) + [1] * len(sampled)
            assert segment["loss_mask"] == mask
        return dict(trajectory)


def _serve_stack(engine_app: Any, tiny_model_dir: Path, home: Path) -> Iterator[Stack]:
    tap = EngineTap(engine_app)
    with ServerThread(tap) as engine:
        served = str(httpx.get(f"{engine.url}/v1/models", timeout=10).json()["data"][0]["id"])
        # harnesses insist on their own model names: every name maps to the served model
        # and Codex sends no output cap: without one a random model samples up to the rest of the context
        settings = ProxySettings(
            upstream=engine.url, model=str(tiny_model_dir), model_aliases={"*": served}, default_max_output_tokens=48,
            sample_seed=SAMPLE_SEED,
        )  # fmt: skip
        store_url = f"sqlite:///{home / 'store.db'}"
        app = create_app(settings, store_url, home, OPERATOR)
        statuses = app.apps["main"] = StatusTap(app.apps["main"])
        with ServerThread(app) as proxy:
            admin = admin_client(proxy.urls["admin"], OPERATOR)
            yield Stack(proxy.url, tap, admin, served, statuses, store_url)
            admin.close()


@pytest.fixture(scope="session")
def bundled_dialect_stack(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from rollwire.engine import create_app as create_engine

    home = tmp_path_factory.mktemp("dialects")
    engine = create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu", max_model_len=MAX_MODEL_LEN), home)
    yield from _serve_stack(engine, tiny_model_dir, home)


@pytest.fixture(scope="session")
def dialect_stack(bundled_dialect_stack: Stack) -> Stack:
    """The dialect stack in front of the bundled engine (modules that also run against vLLM override this)."""
    return bundled_dialect_stack


@pytest.fixture(scope="session", params=ENGINES)
def conformance_stack(
    request: pytest.FixtureRequest, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The dialect stack in front of the bundled engine, then in front of real vLLM (tapped over HTTP)."""
    if request.param == "bundled":
        yield request.getfixturevalue("bundled_dialect_stack")
        return
    vllm_url = request.getfixturevalue("vllm_url")
    yield from _serve_stack(HttpForward(vllm_url), tiny_model_dir, tmp_path_factory.mktemp("dialects-vllm"))
