"""``rollwire mcp serve NAME --transport stdio`` speaks MCP to the official client and keeps state per rollout;
``rollwire mcp suites`` lists the suites and rejects unknown names with one line."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from rollwire.app.cli.__main__ import main
from rollwire.mcp_servers.tasks.checkers import score
from rollwire.mcp_servers.tasks.loader import resolve_task


def test_stdio_workspace_server(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "rollwire.app.cli",
            "mcp",
            "serve",
            "workspace",
            "--transport",
            "stdio",
            "--state-dir",
            str(tmp_path),
            "--rollout",
            "r1",
            "--task",
            "tiny:write-owl",
        ],
    )

    async def scenario() -> set[str]:
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            await client.call_tool("write_file", {"path": "answer.txt", "content": "owl"})
            return names

    assert {"write_file", "read_file", "list_files", "delete_file"} <= anyio.run(scenario)
    assert score(resolve_task("tiny:write-owl"), tmp_path / "r1").reward == 1.0


def test_suites_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mcp", "suites"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "office" in out and "ops" in out
    assert main(["mcp", "suites", "office"]) == 0
    assert "mail-to-event-0" in capsys.readouterr().out
    assert main(["mcp", "suites", "missing"]) == 1
    assert "no suite 'missing'" in capsys.readouterr().err
