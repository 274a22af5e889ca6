"""Env servers accept only the gateway: each attack that worked before is tried and must fail. Without the shared
secret no call gets through (reading another rollout's file by naming it in a header); with it, a rollout id
cannot leave the state folder and a task reference cannot name an arbitrary JSON file; and a harness talking to
the gateway cannot pick another rollout's identity."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from rollwire.errors import InvalidRequest
from rollwire.mcp_servers.envs.app import SERVERS, build_app
from rollwire.mcp_servers.state import ROLLOUT_HEADER, SECRET_HEADER, TASK_HEADER
from rollwire.mcp_servers.tasks.schema import ToolCall
from rollwire.mcp_servers.tasks.solve import env_client, play
from tests.mcp_servers.env_stack import ENV_SECRET, EnvServers, gateway_stack

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
HEADERS = {"Accept": "application/json, text/event-stream"}


def _write(env: EnvServers, rollout: str, text: str, secret: str = ENV_SECRET, task: str | None = None) -> dict[str, object]:
    call = ToolCall(server="workspace", tool="write_file", arguments={"path": "secret.txt", "content": text})
    return anyio.run(play, [call], env.server_url, rollout, task, secret)[0]


def _read(env: EnvServers, rollout: str, secret: str) -> dict[str, object]:
    call = ToolCall(server="workspace", tool="read_file", arguments={"path": "secret.txt"})
    return anyio.run(play, [call], env.server_url, rollout, None, secret)[0]


def test_a_caller_without_the_secret_reads_nothing(env_servers: EnvServers) -> None:
    assert _write(env_servers, "victim-1", "the victim's data")["is_error"] is False
    for secret in ("", "wrong-secret-of-some-length"):
        with pytest.raises(BaseException) as refused:  # the official client cannot even initialize
            _read(env_servers, "victim-1", secret)
        assert isinstance(refused.value, MCPError) or refused.group_contains(MCPError, depth=None)
        raw = httpx.post(
            env_servers.server_url("workspace"), json=PING, headers={**HEADERS, ROLLOUT_HEADER: "victim-1", SECRET_HEADER: secret}
        )
        assert raw.status_code == 401 and "only from the gateway" in raw.json()["error"]["message"]
        assert "victim's data" not in raw.text
    assert httpx.get(env_servers.url + "/health").status_code == 200  # health needs no secret


def test_dot_dot_and_dotted_rollout_ids_stay_inside_the_state_folder(env_servers: EnvServers) -> None:
    root = env_servers.env.store.root
    before = {p.name for p in root.parent.iterdir()}
    for rollout in ("..", ".", ".hidden", "a/../..", "../escape"):
        result = _write(env_servers, rollout, "escaped")
        assert result["is_error"] and "rollout id" in str(result["text"]), (rollout, result)
    assert {p.name for p in root.parent.iterdir()} == before
    assert all(root in p.parents for p in root.parent.rglob("secret.txt"))  # only inside rollouts' own folders


def test_a_task_reference_cannot_name_a_json_file(env_servers: EnvServers, tmp_path: Path) -> None:
    evil = tmp_path / "evil.json"
    suite = {
        "name": "evil",
        "tasks": [
            {
                "id": "t",
                "instruction": "x",
                "servers": ["sqldb"],
                "initial_state": {"sqldb": {"sql": "CREATE TABLE pwned (x INTEGER);"}},
                "checker": [{"kind": "file_exists", "args": {"path": "x"}}],
            }
        ],
    }
    evil.write_text(json.dumps(suite))
    for ref in (f"{evil}:t", f"{tmp_path}/../{tmp_path.name}/evil.json:t", "../suites/tiny:write-cat"):
        call = ToolCall(server="sqldb", tool="list_tables", arguments={})
        result = anyio.run(play, [call], env_servers.server_url, "task-attack", ref, ENV_SECRET)[0]
        assert result["is_error"] and "has not loaded" in str(result["text"]), (ref, result)
    db = env_servers.folder("task-attack") / "sqldb.sqlite"
    assert not db.exists() or b"pwned" not in db.read_bytes()


def test_env_servers_refuse_to_start_without_a_secret(env_servers: EnvServers) -> None:
    with pytest.raises(InvalidRequest, match="shared secret"):
        build_app(list(SERVERS), env_servers.env, ["127.0.0.1:*"], 1_000_000, secret="")


def test_a_harness_cannot_choose_its_identity_at_the_gateway(env_servers: EnvServers, store_url: str) -> None:
    server, stack = gateway_stack(env_servers, store_url)
    with server:
        stack.add_rollout("owner-1", "tiny:write-cat")
        token = stack.add_rollout("intruder-1", "tiny:write-cat")
        forged = {ROLLOUT_HEADER: "owner-1", TASK_HEADER: "ops:customer-total-0"}

        async def write() -> None:
            client, http = env_client(stack.mcp_url(token), "ignored", headers=forged)
            async with http, client:
                await client.call_tool("write_file", {"path": "answer.txt", "content": "intruder"})

        anyio.run(write)
    assert (env_servers.folder("intruder-1") / "workspace" / "answer.txt").read_text() == "intruder"
    assert not (env_servers.folder("owner-1") / "workspace" / "answer.txt").exists()
