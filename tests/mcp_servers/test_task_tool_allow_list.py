"""A task's ``tools`` list is what its harness sees through the gateway; other tools of its servers are refused."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from mcp import Client

from tests.mcp_servers.conftest import EnvServers, gateway_stack


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
    seen: dict[str, object] = {}

    async def drive(token: str, key: str) -> None:
        async with Client(stack.mcp_url(token)) as client:
            seen[key] = sorted(t.name for t in (await client.list_tools()).tools)
            seen[key + ":read"] = await client.call_tool("read_file", {"path": "answer.txt"})
            seen[key + ":write"] = await client.call_tool("write_file", {"path": "answer.txt", "content": "cat"})

    with server:
        anyio.run(drive, stack.add_rollout("narrow", f"{suite}:only-write"), "narrow")
        anyio.run(drive, stack.add_rollout("wide", f"{suite}:all-tools"), "wide")
    assert seen["narrow"] == ["write_file"]
    assert {"write_file", "read_file", "list_files"} <= set(seen["wide"])  # type: ignore[arg-type]
    refused = seen["narrow:read"]
    assert refused.is_error and "read_file" in refused.content[0].text  # type: ignore[attr-defined]
    assert not seen["narrow:write"].is_error  # type: ignore[attr-defined]
    assert (env_servers.folder("narrow") / "workspace" / "answer.txt").read_text() == "cat"
    assert [e.tool for e in stack.events("narrow")][-1] == "write_file"
