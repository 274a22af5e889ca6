"""Must-show 2: mcp-server-git (from PyPI, written by others) behind the gateway over stdio; its calls are recorded.
It runs in its sandbox, which shows it the rollout's own folder and nothing else of the host's: the repository it
serves is one in that folder (``{rollout_dir}/repo``), as a rollout's copy of a project would be."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from rollwire.mcp_servers.server_config import UpstreamSpec
from tests.mcp_servers.env_stack import EnvServers, gateway_stack

GIT_SERVER = Path(sys.executable).with_name("mcp-server-git")


@pytest.mark.skipif(not GIT_SERVER.exists(), reason="mcp-server-git is not installed (pip install -e '.[dev]')")
@pytest.mark.skipif(shutil.which("git") is None, reason="the git binary is not installed")
def test_git_server_behind_the_gateway(env_servers: EnvServers, store_url: str, tmp_path: Path) -> None:
    repo = tmp_path / "rollouts" / "gitty" / "git" / "repo"  # <rollouts_dir>/<rollout>/<server>: the server's folder
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README.md").write_text("hello\n")
    spec = UpstreamSpec.from_dict("git", {"command": str(GIT_SERVER), "args": ["--repository", "{rollout_dir}/repo"]})
    server, stack = gateway_stack(
        env_servers, store_url, {"git": spec}, call_timeout_s=30.0, rollouts_dir=str(tmp_path / "rollouts")
    )
    with server:
        token = stack.add_rollout("gitty", servers=["git", "workspace"])

        async def scenario() -> tuple[set[str], str, bool]:
            async with Client(stack.mcp_url(token)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                status = await client.call_tool("git_status", {"repo_path": str(repo)})
                return names, "".join(getattr(b, "text", "") for b in status.content), bool(status.is_error)

        names, status, is_error = anyio.run(scenario)
        assert {"git_status", "git_log", "write_file"} <= names
        assert not is_error and "README.md" in status
        events = stack.events("gitty")
        assert [(e.server, e.tool, e.is_error) for e in events] == [("git", "git_status", False)]
        assert "README.md" in events[0].result_json and str(repo) in events[0].arguments_json
