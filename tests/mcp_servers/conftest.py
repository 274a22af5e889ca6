"""Fixtures for the MCP tests: the four env servers hosted in one real app on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcp_servers.envs.app import SERVERS, build_app, runtime
from mcp_servers.envs.rollout import EnvRuntime
from mcp_servers.tasks.loader import task_initial
from rollwire.serving import ServerThread
from rollwire.settings import McpSettings


@dataclass
class EnvServers:
    url: str
    env: EnvRuntime

    def server_url(self, name: str) -> str:
        return f"{self.url}/{name}/mcp"

    def folder(self, rollout_id: str) -> Path:
        return self.env.store.folder(rollout_id)


@pytest.fixture(scope="module")
def env_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvServers]:
    home = tmp_path_factory.mktemp("mcp-home")
    settings = McpSettings(max_payload_bytes=20_000)
    env = runtime(settings, home, task_initial)
    with ServerThread(build_app(list(SERVERS), env, settings.allowed_hosts, 1_000_000)) as server:
        yield EnvServers(server.url, env)
