"""Env servers refuse traversal, symlink escapes, SQL that leaves its database, bad arguments and oversized
payloads with tool errors (isError) the model can read, never stack traces."""

from __future__ import annotations

import os

import anyio

from rollwire.mcp_servers.tasks.schema import ToolCall
from rollwire.mcp_servers.tasks.solve import play
from tests.mcp_servers.env_stack import ENV_SECRET, EnvServers


def _run(env: EnvServers, rollout: str, server: str, tool: str, **arguments: object) -> dict[str, object]:
    return anyio.run(play, [ToolCall(server=server, tool=tool, arguments=arguments)], env.server_url, rollout, None, ENV_SECRET)[0]


def _refused(result: dict[str, object], needle: str) -> None:
    assert result["is_error"], result
    assert needle.lower() in str(result["text"]).lower(), result
    assert "Traceback" not in str(result["text"])


def test_workspace_refuses_traversal_and_symlink_escape(env_servers: EnvServers, tmp_path: object) -> None:
    _refused(_run(env_servers, "w1", "workspace", "write_file", path="../escape.txt", content="x"), "outside")
    _refused(_run(env_servers, "w1", "workspace", "read_file", path="/etc/passwd"), "relative")
    assert not (env_servers.folder("w1") / "escape.txt").exists()
    outside = env_servers.folder("w1").parent / "secret.txt"
    outside.write_text("secret")
    os.symlink(outside, env_servers.folder("w1") / "workspace" / "link.txt")
    _refused(_run(env_servers, "w1", "workspace", "read_file", path="link.txt"), "outside")
    _refused(_run(env_servers, "w1", "workspace", "write_file", path="link.txt", content="y"), "outside")
    assert outside.read_text() == "secret"


def test_sqldb_refuses_escapes(env_servers: EnvServers) -> None:
    target = env_servers.folder("s1").parent / "stolen.db"
    for sql in (
        f"ATTACH DATABASE '{target}' AS x",
        "DETACH DATABASE main",
        f"VACUUM INTO '{target}'",
        "PRAGMA journal_mode = DELETE",
        "PRAGMA writable_schema = 1",
        "SELECT load_extension('/tmp/evil')",
    ):
        result = _run(env_servers, "s1", "sqldb", "query", sql=sql)
        assert result["is_error"], (sql, result)
        assert "Traceback" not in str(result["text"])
    assert not target.exists()
    _refused(_run(env_servers, "s1", "sqldb", "query", sql="SELEC nonsense"), "SQL error")
    ok = _run(env_servers, "s1", "sqldb", "query", sql="PRAGMA table_info(sqlite_master)")
    assert not ok["is_error"], ok


def test_bad_arguments_and_oversized_payloads(env_servers: EnvServers) -> None:
    _refused(_run(env_servers, "b1", "workspace", "write_file", path="a.txt"), "content")
    _refused(_run(env_servers, "b1", "calendar", "create_event", title="x", start="tomorrow", end="later"), "ISO")
    _refused(
        _run(env_servers, "b1", "mail", "send_message", to=["not-an-address"], subject="s", body="b"), "valid email"
    )
    _refused(_run(env_servers, "b1", "mail", "read_message", message_id="nope"), "no message")
    _refused(_run(env_servers, "b1", "workspace", "write_file", path="big.txt", content="x" * 30_000), "limit")
    _refused(_run(env_servers, "../etc", "workspace", "list_files"), "rollout id")
