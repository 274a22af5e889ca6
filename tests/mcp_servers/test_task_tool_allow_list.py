"""A task's ``tools`` list is what its harness sees through the gateway; other tools of its servers are refused."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from mcp import Client
from mcp.types import CallToolResult

from tests.mcp_servers.env_stack import EnvServers, first_text, gateway_stack


def _suite(tmp_path: Path) -> Path:
    task = {
        "id": "only-write",
        "instruction": "Write cat to answer.txt.",
        "servers": ["workspace"],
        "tools": ["write_file"],
        "checker": [{"kind": "file_equals", "args": {"path": "answer.txt", "value": "cat"}}],
    }
    path = tmp_path / "narrow.json"
    path.write_text(json.dumps({"name": "narrow", "tasks": [task, {**task, "id": "all-tools", "tools": None}]}))
    return path


def test_task_tools_narrow_what_the_harness_sees(env_servers: EnvServers, store_url: str, tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    server, stack = gateway_stack(env_servers, store_url)
    listed: dict[str, list[str]] = {}
    called: dict[str, CallToolResult] = {}

    async def drive(token: str, key: str) -> None:
        async with Client(stack.mcp_url(token)) as client:
            listed[key] = sorted(t.name for t in (await client.list_tools()).tools)
            called[key + ":read"] = await client.call_tool("read_file", {"path": "answer.txt"})
            called[key + ":write"] = await client.call_tool("write_file", {"path": "answer.txt", "content": "cat"})

    with server:
        anyio.run(drive, stack.add_rollout("narrow", f"{suite}:only-write"), "narrow")
        anyio.run(drive, stack.add_rollout("wide", f"{suite}:all-tools"), "wide")
    assert listed["narrow"] == ["write_file"]
    assert {"write_file", "read_file", "list_files"} <= set(listed["wide"])
    refused = called["narrow:read"]
    assert refused.is_error and "read_file" in first_text(refused)
    assert not called["narrow:write"].is_error
    assert (env_servers.folder("narrow") / "workspace" / "answer.txt").read_text() == "cat"
    assert [e.tool for e in stack.events("narrow")][-1] == "write_file"
