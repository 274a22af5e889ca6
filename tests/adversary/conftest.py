"""Fixtures for the red-team tests: the MCP tests' env servers (``tests.mcp_servers.env_stack``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mcp_servers.env_stack import EnvServers, running_env_servers


@pytest.fixture(scope="module")
def env_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvServers]:
    with running_env_servers(tmp_path_factory.mktemp("mcp-home")) as servers:
        yield servers
