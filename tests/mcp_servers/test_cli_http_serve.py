"""``rollwire mcp serve all`` and ``rollwire mcp gateway`` start real HTTP servers that answer /health, and the
gateway reaches the env servers for a rollout in its store."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
from mcp import Client

from rollwire.app.serving import listening_socket
from rollwire.store import Rollout, RolloutStatus, Run, session_scope
from rollwire.store.db import open_engine
from tests.polling import wait_until


@contextmanager
def _serving(args: list[str], home: Path) -> Iterator[str]:
    """The CLI serving on a socket this test bound and hands down (``--fd``), as ``rollwire up`` does."""
    env = {
        "ROLLWIRE_HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "ROLLWIRE_MCP__ENV_SECRET": "cli-test-env-secret",
        "ROLLWIRE_MCP__GATEWAY__ENV_SECRET": "cli-test-env-secret",
    }
    with listening_socket("127.0.0.1", 0) as sock:
        port, fd = sock.getsockname()[1], sock.fileno()
        argv = [sys.executable, "-m", "rollwire.app.cli", "mcp", *args, "--port", str(port), "--fd", str(fd)]
        proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, pass_fds=(fd,))
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:  # a separate process: no event to wait on
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                return httpx.get(url + "/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, "the server's /health", timeout_s=60, every_s=0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_and_gateway_processes(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_engine(store)
    with session_scope(engine) as session:
        session.add(Run(id="cli-run"))
        session.flush()
        session.add(
            Rollout(
                id="cli-ro",
                run_id="cli-run",
                token_hash=hashlib.sha256(b"cli-token").hexdigest(),
                task_id="write-fox",
                meta={"suite": "tiny"},
                status=RolloutStatus.RUNNING,
            )
        )
    with _serving(["serve", "all"], tmp_path) as env_url:
        assert httpx.get(env_url + "/health").json()["servers"] == ["workspace", "sqldb", "calendar", "mail"]
        gw_args = ["gateway", "--env-url", env_url, "--db", store]
        with _serving(gw_args, tmp_path) as gw_url:

            async def call() -> bool:
                async with Client(f"{gw_url}/r/cli-token/mcp") as client:
                    result = await client.call_tool("write_file", {"path": "answer.txt", "content": "fox"})
                    return bool(result.is_error)

            assert anyio.run(call) is False
    assert (tmp_path / "mcp_state" / "cli-ro" / "workspace" / "answer.txt").read_text() == "fox"
