"""Proxy fixtures: the bundled engine over the tiny model, a proxy in front of it, and rollouts to call with."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.settings import EngineSettings, ProxySettings
from tests.sampling import SAMPLE_SEED

OPERATOR_KEY = "test-operator-key"
BENCH = Path(__file__).resolve().parents[2] / "bench"
"""Bench modules the tests share (the viewer's Chromium driver, /proc connections), imported as the scripts do."""
if str(BENCH) not in sys.path:
    sys.path.append(str(BENCH))


@pytest.fixture(scope="session")
def engine_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One engine serving the tiny model for the whole proxy suite."""
    from rollwire.engine import create_app as create_engine

    app = create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path_factory.mktemp("engine"))
    with ServerThread(app) as server:
        yield server.url


ENGINES = ["bundled", "vllm"]
"""The engines the conformance tests run against: the bundled one and real vLLM (CPU build)."""


@pytest.fixture(scope="session", params=ENGINES)
def any_engine_url(request: pytest.FixtureRequest) -> str:
    """The bundled engine, then real vLLM (one per session): the proxy's conformance tests run against both."""
    return str(request.getfixturevalue("engine_url" if request.param == "bundled" else "vllm_url"))


@pytest.fixture(scope="session")
def served_model(engine_url: str) -> str:
    return str(httpx.get(f"{engine_url}/v1/models", timeout=10).json()["data"][0]["id"])


@dataclass
class Proxy:
    url: str
    """The main listener: what rollouts call."""
    store_url: str
    admin: httpx.Client
    """A client of the admin listener, with the operator key."""

    @property
    def admin_url(self) -> str:
        return str(self.admin.base_url).rstrip("/")

    def new_rollout(self, **fields: Any) -> dict[str, Any]:
        run = self.admin.post("/admin/v1/runs", json={}).json()["id"]
        rollout = self.admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1, **fields})
        rollout.raise_for_status()
        return {"run": run, **rollout.json()[0]}


def admin_client(admin_url: str, key: str = OPERATOR_KEY) -> httpx.Client:
    """A client of a proxy's admin listener (``ServerThread(...).urls["admin"]``) with the operator key."""
    return httpx.Client(base_url=admin_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture()
def start_proxy(tiny_model_dir: Path, tmp_path: Path) -> Iterator[Callable[..., Proxy]]:
    """Start a proxy (settings overridable) in front of any upstream; stopped after the test."""
    servers: list[ServerThread] = []
    clients: list[httpx.Client] = []

    def start(upstream: str, store_url: str | None = None, **overrides: Any) -> Proxy:
        overrides = {"sample_seed": SAMPLE_SEED, **overrides}
        settings = ProxySettings(upstream=upstream, model=str(tiny_model_dir), **overrides)
        url = store_url or f"sqlite:///{tmp_path / f'proxy{len(servers)}.db'}"
        server = ServerThread(create_app(settings, url, tmp_path, operator_key=OPERATOR_KEY)).start()
        servers.append(server)
        client = admin_client(server.urls["admin"])
        clients.append(client)
        return Proxy(server.url, url, client)

    yield start
    for client in clients:
        client.close()
    for server in servers:
        server.stop()


OpenAIRollout = Callable[[str], tuple[Proxy, openai.OpenAI, dict[str, Any]]]
"""``openai_rollout(upstream)``: a proxy in front of ``upstream``, one new rollout on it, and the official OpenAI
client pointed at that rollout."""


@pytest.fixture()
def openai_rollout(start_proxy: Callable[..., Proxy]) -> OpenAIRollout:
    def start(upstream: str) -> tuple[Proxy, openai.OpenAI, dict[str, Any]]:
        proxy = start_proxy(upstream)
        rollout = proxy.new_rollout()
        return proxy, openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0), rollout

    return start


@pytest.fixture()
def proxy(start_proxy: Callable[..., Proxy], engine_url: str) -> Proxy:
    return start_proxy(engine_url)
