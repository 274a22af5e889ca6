"""Must-show 3 end to end: ``rollwire up --mcp-config FILE`` (the common ``mcpServers`` format) serves the file's
servers to the ready rollout through the gateway, each rollout's stdio process in its own folder, and stopping the
stack leaves none of them running. A bad file is one readable line before anything starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.core.test_up_cli import _wait_for
from tests.mcp_servers.npm_servers import npm_server, processes_mentioning


@pytest.mark.slow
def test_up_with_mcp_config_serves_the_files_servers(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    memory = {"command": npm_server("mcp-server-memory"), "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}}
    config.write_text(json.dumps({"mcpServers": {"memory": memory}}))
    home = tmp_path / "home"
    env = {**os.environ, "ROLLWIRE_HOME": str(home), "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1",
           "ROLLWIRE_MCP__GATEWAY__ROLLOUTS_DIR": str(tmp_path / "rollouts")}  # fmt: skip
    ports = [f"--{part}-port=0" for part in ("proxy", "engine", "env", "gateway")]
    process = subprocess.Popen(
        [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "up", *ports, "--mcp-config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        lines = _wait_for(process, "then: rollwire traces", timeout=240)
        assert any("third-party MCP servers: memory" in line for line in lines), lines
        mcp_url = next(line.split()[-1] for line in lines if line.strip().startswith("MCP URL"))
        rollout = next(line.split()[2] for line in lines if line.startswith("ready rollout "))

        async def scenario() -> tuple[set[str], str]:
            async with Client(mcp_url) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                entity = {"name": "from-up", "entityType": "t", "observations": []}
                await client.call_tool("create_entities", {"entities": [entity]})
                graph = await client.call_tool("read_graph", {})
                return names, "".join(getattr(b, "text", "") for b in graph.content)

        names, graph = anyio.run(scenario)
        assert {"create_entities", "write_file"} <= names and "from-up" in graph  # the task's tools and the file's
        assert "from-up" in (tmp_path / "rollouts" / rollout / "memory" / "graph.jsonl").read_text()
        assert processes_mentioning(str(tmp_path / "rollouts" / rollout / "memory"))  # the rollout's own server
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, rest[-2000:]
    assert not processes_mentioning(str(tmp_path / "rollouts")), "the stack stopped: its MCP servers too"
    assert not (tmp_path / "home" / "stack.json").exists()


def test_up_bad_mcp_config_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"x": {"args": ["no command"]}}}))
    env = {**os.environ, "ROLLWIRE_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-m", "rollwire.app.cli", "up", "--mcp-config", str(tmp_path / "mcp.json")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and "MCP server 'x' needs exactly one of 'url' or 'command'" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "home" / "stack.json").exists()
