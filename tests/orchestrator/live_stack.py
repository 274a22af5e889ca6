"""The whole local stack in this process on 127.0.0.1: bundled engine (tiny model), env servers, gateway, proxy.

Each part is the real app on its own uvicorn thread, so the orchestrator's harness subprocesses talk to
them over loopback exactly as they would to ``rollwire up``'s processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from rollwire.app.serving import ServerThread
from rollwire.app.stack import StackInfo
from rollwire.settings import EngineSettings, GatewaySettings, McpSettings, ProxySettings
from rollwire.store.db import open_engine
from tests.sampling import SAMPLE_SEED

OPERATOR_KEY = "orchestrator-test-key"
ENV_SECRET = "orchestrator-test-env-secret"


@contextmanager
def live_stack(
    folder: Path,
    tiny_model_dir: Path,
    wrap_proxy: Callable[[Any], Any] | None = None,
    wrap_engine: Callable[[Any], Any] | None = None,
) -> Iterator[StackInfo]:
    """``wrap_proxy`` wraps the proxy's main listener (a test's gate in front of the rollouts' calls), and
    ``wrap_engine`` the engine (a test's fault in the platform); the admin listener is ``StackInfo.admin_url``."""
    from rollwire.engine import create_app as create_engine
    from rollwire.mcp_servers.envs.app import SERVERS, build_app, runtime
    from rollwire.mcp_servers.gateway.server import build_gateway_app
    from rollwire.mcp_servers.tasks.loader import task_initial
    from rollwire.proxy.app import create_app as create_proxy

    db_url = f"sqlite:///{folder / 'stack.db'}"
    mcp = McpSettings(state_dir=str(folder / "state"))
    env = runtime(mcp, folder, task_initial)
    with ExitStack() as stack:
        engine_app = create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), folder)
        engine = stack.enter_context(ServerThread(wrap_engine(engine_app) if wrap_engine else engine_app))
        envs = stack.enter_context(ServerThread(build_app(list(SERVERS), env, mcp.allowed_hosts, 1_000_000, secret=ENV_SECRET)))
        gateway = stack.enter_context(ServerThread(build_gateway_app(GatewaySettings(env_url=envs.url, env_secret=ENV_SECRET), open_engine(db_url))))
        model = str(httpx.get(f"{engine.url}/v1/models", timeout=30).json()["data"][0]["id"])
        settings = ProxySettings(
            upstream=engine.url, model=str(tiny_model_dir), gateway_url=gateway.url, model_aliases={"*": model},
            sample_seed=SAMPLE_SEED,
        )  # fmt: skip
        proxy_app = create_proxy(settings, db_url, folder, operator_key=OPERATOR_KEY)
        if wrap_proxy:
            proxy_app.apps["main"] = wrap_proxy(proxy_app.apps["main"])
        proxy = stack.enter_context(ServerThread(proxy_app))
        yield StackInfo(
            proxy.url, gateway.url, envs.url, engine.url, OPERATOR_KEY, db_url, str(env.store.root), model,
            admin_url=proxy.urls["admin"],
        )  # fmt: skip
