"""``rollwire mcp bridge``: a real stdio MCP server (npm's memory and everything servers, and ``probe_server.py``)
served over streamable HTTP by the bridge process, reached by the official SDK client with the rollout's key. One
server process keeps its state across client sessions and never sees the key; concurrent sessions get their own
answers and progress; the server's sampling and roots requests reach the calling session and its answers come
back; a keyed request's nonce is answered with the key's proof on every response; a shared bridge (``--shared``)
tells the server it has no client capabilities, answers the server's requests with an error and relays no
notification but a request's progress; a server that does not start, or exits, stops the bridge with a line
naming it; the bridge refuses to run without a key."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from rollwire.mcp_servers.bridge_auth import NONCE_HEADER, PROOF_HEADER
from rollwire.mcp_servers.gateway.cluster_routes import proving
from rollwire.mcp_servers.placement import proof, sidecar_key
from tests.mcp_servers.npm_servers import npm_server
from tests.polling import wait_until

KEY_ENV = "ROLLWIRE_MCP_SIDECAR_KEY"
KEY = "rollout-7f3a-key-5b1e9c0d2a4f6e81"
BRIDGE = [sys.executable, "-m", "rollwire.app.cli", "mcp", "bridge"]
PROBE = [sys.executable, str(Path(__file__).with_name("probe_server.py"))]
SECRET = "deployment-sidecar-secret-4d81e0b7"
"""A deployment's sidecar secret, from which a shared bridge derives its key."""
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
}  # fmt: skip
QUIET_S = 1.0
"""How long a test waits for a notification that must not come, once the server has sent it (its call has
answered) and the other session has made a round trip of its own: a relayed one arrives in milliseconds."""


@dataclass
class RunningBridge:
    proc: subprocess.Popen[str]
    url: str
    """The MCP endpoint (``http://127.0.0.1:PORT/mcp``)."""

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    def server_pids(self) -> list[int]:
        """The bridge's child processes (the stdio server)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [int(pid) for pid in children]


def _env(tmp_path: Path, key: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ROLLWIRE_HOME": str(tmp_path / "home"), **(extra or {})}
    return env | ({KEY_ENV: key} if key is not None else {})


def read_line(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """The bridge's next stdout line ('' once it has exited), read on a thread so that a hang fails the test."""
    assert proc.stdout is not None
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert got, f"no line from the bridge within {timeout_s:g} s"
    return got[0]


@contextmanager
def running_bridge(
    tmp_path: Path, command: list[str], key: str = KEY, env: dict[str, str] | None = None,
    options: tuple[str, ...] = (), **popen: Any,
) -> Iterator[RunningBridge]:  # fmt: skip
    """The bridge (with ``options``, e.g. ``--shared NAME``; ``key`` in its key variable) serving ``command`` on a free
    port of 127.0.0.1, once it has printed its ready line; stopped with SIGTERM after the block, which must end it
    with status 0. ``popen``: more ``subprocess.Popen`` arguments."""
    argv = [*BRIDGE, "--host", "127.0.0.1", "--port", "0", *options, "--", *command]
    proc = subprocess.Popen(
        argv, env=_env(tmp_path, key, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )  # fmt: skip
    try:
        assert read_line(proc).startswith("bridge listening on http://127.0.0.1:")
        ready = read_line(proc)
        assert ready.startswith("bridge ready on http://127.0.0.1:"), ready + (
            proc.stderr.read() if proc.stderr else ""
        )
        yield RunningBridge(proc, ready.split()[-1])
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(30)
    assert status == 0, proc.stderr.read() if proc.stderr else status


@asynccontextmanager
async def keyed_client(url: str, key: str = KEY, **options: Any) -> AsyncIterator[Client]:
    """The official SDK client, as the gateway opens one, sending ``Authorization: Bearer <key>``."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with http, Client(streamable_http_client(url, http_client=http), **options) as client:
        yield client


def _text(result: Any) -> str:
    assert not result.is_error, result
    return str(result.content[0].text)


def _entity(name: str) -> dict[str, Any]:
    return {"entities": [{"name": name, "entityType": "animal", "observations": [f"{name} was here"]}]}


def test_sessions_share_one_server_process(tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.jsonl"
    env = {"MEMORY_FILE_PATH": str(memory_file)}
    with running_bridge(tmp_path, [npm_server("mcp-server-memory")], env=env) as bridge:
        assert httpx.get(bridge.base + "/ready").status_code == 200
        (server,) = bridge.server_pids()
        environ = Path(f"/proc/{server}/environ").read_bytes().split(b"\0")
        assert f"MEMORY_FILE_PATH={memory_file}".encode() in environ
        assert not any(item.startswith(KEY_ENV.encode() + b"=") for item in environ), "the key reached the server"

        async def two_sessions() -> str:
            with anyio.fail_after(30):
                async with keyed_client(bridge.url) as client:
                    assert "create_entities" in {tool.name for tool in (await client.list_tools()).tools}
                    assert "fox" in _text(await client.call_tool("create_entities", _entity("fox")))
                async with keyed_client(bridge.url) as client:
                    return _text(await client.call_tool("read_graph", {}))

        graph = json.loads(anyio.run(two_sessions))
        assert [entity["name"] for entity in graph["entities"]] == ["fox"]
        assert bridge.server_pids() == [server]


def test_concurrent_sessions_get_their_own_answers(tmp_path: Path) -> None:
    env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    with running_bridge(tmp_path, [npm_server("mcp-server-memory")], env=env) as bridge:

        async def session(name: str, answers: dict[str, list[str]]) -> None:
            async with keyed_client(bridge.url) as client:  # both clients number their requests 1, 2, 3, ...
                async with anyio.create_task_group() as tg:
                    for i in range(6):
                        tg.start_soon(create, client, f"{name}-{i}", answers[name])

        async def create(client: Client, name: str, into: list[str]) -> None:
            created = json.loads(_text(await client.call_tool("create_entities", _entity(name))))
            into.extend(entity["name"] for entity in created)

        async def both() -> dict[str, list[str]]:
            answers: dict[str, list[str]] = {"fox": [], "owl": []}
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(session, "fox", answers)
                    tg.start_soon(session, "owl", answers)
            return answers

        answers = anyio.run(both)
    assert sorted(answers["fox"]) == [f"fox-{i}" for i in range(6)]
    assert sorted(answers["owl"]) == [f"owl-{i}" for i in range(6)]


async def _sampled(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="sampled"), model="m"
    )


async def _roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///harness/project", name="harness-root")])


def test_progress_and_server_requests_reach_the_calling_session(tmp_path: Path) -> None:
    with running_bridge(tmp_path, [npm_server("mcp-server-everything"), "stdio"]) as bridge:

        async def call(seen: list[float]) -> None:
            async def progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(progress)

            async with keyed_client(bridge.url) as client:  # both sessions' progress tokens are their request ids
                long = "trigger-long-running-operation"
                _text(await client.call_tool(long, {"duration": 0.3, "steps": 3}, progress_callback=progress))

        async def scenario() -> tuple[list[float], list[float], str, str]:
            first: list[float] = []
            second: list[float] = []
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call, first)
                    tg.start_soon(call, second)
                async with keyed_client(bridge.url, sampling_callback=_sampled, list_roots_callback=_roots) as client:
                    sampling = await client.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5})
                    roots = await client.call_tool("get-roots-list", {})
            return first, second, _text(sampling), _text(roots)

        first, second, sampling, roots = anyio.run(scenario)
    assert first == [1, 2, 3] and second == [1, 2, 3]
    assert '"text": "sampled"' in sampling and "file:///harness/project" in roots


def test_a_nonce_is_answered_with_the_keys_proof(tmp_path: Path) -> None:
    """What tells the gateway it reached the bridge, not a process that took the port after the bridge stopped:
    every response to a keyed request with a nonce proves the key, whatever it is (an SSE stream, a 202, an error
    after the key was checked); without a nonce there is no proof, and a malformed nonce is refused."""
    env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    with running_bridge(tmp_path, [npm_server("mcp-server-memory")], env=env) as bridge, httpx.Client() as http:
        keyed = {**MCP_HEADERS, "Authorization": f"Bearer {KEY}"}
        opened = http.post(bridge.url, json=INITIALIZE, headers={**keyed, NONCE_HEADER: "n-1"})
        assert opened.status_code == 200 and opened.headers["content-type"].startswith("text/event-stream")
        assert opened.headers[PROOF_HEADER] == proof(KEY, "n-1")
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        noted = http.post(bridge.url, json=initialized, headers={**keyed, **session, NONCE_HEADER: "n-2"})
        assert noted.status_code == 202 and noted.headers[PROOF_HEADER] == proof(KEY, "n-2")
        tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        listed = http.post(bridge.url, json=tools_list, headers={**keyed, **session})
        assert listed.status_code == 200 and PROOF_HEADER not in listed.headers
        with http.stream("GET", bridge.url, headers={**keyed, **session, NONCE_HEADER: "n-3"}) as stream:
            assert stream.status_code == 200 and stream.headers[PROOF_HEADER] == proof(KEY, "n-3")
        lost = http.post(bridge.url, json=INITIALIZE, headers={**keyed, "mcp-session-id": "gone", NONCE_HEADER: "n-4"})
        assert lost.status_code == 404 and lost.headers[PROOF_HEADER] == proof(KEY, "n-4")
        for malformed in ("n" * 129, "two words", ""):
            refused = http.post(bridge.url, json=INITIALIZE, headers={**keyed, NONCE_HEADER: malformed})
            assert refused.status_code == 400 and PROOF_HEADER not in refused.headers, malformed
        closed = http.delete(bridge.url, headers={**keyed, **session, NONCE_HEADER: "n-" + "5" * 126})
        assert closed.status_code == 200 and closed.headers[PROOF_HEADER] == proof(KEY, "n-" + "5" * 126)

        async def through_the_gateways_check() -> str:  # it refuses any response without the proof of its nonce
            http = proving(create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"}), KEY)
            with anyio.fail_after(30):
                async with http, Client(streamable_http_client(bridge.url, http_client=http)) as client:
                    return _text(await client.call_tool("read_graph", {}))

        assert json.loads(anyio.run(through_the_gateways_check)) == {"entities": [], "relations": []}


async def _two_rollouts(url: str, key: str, relayed: bool) -> tuple[dict[str, str], list[str], list[str]]:
    """Rollout A's session has the probe server ask A for roots and a sampling, then announce (a log message,
    tools/list_changed, resources/updated) while rollout B's session is open: what the server got back, and the
    notifications A and B saw (waited for when ``relayed``; else for ``QUIET_S`` after B's own round trip)."""
    seen: dict[str, list[str]] = {"a": [], "b": []}
    all_came = anyio.Event()

    def record(who: str) -> Any:
        async def handler(message: Any) -> None:
            if not isinstance(message, Exception):
                seen[who].append(message.method)
                if all(len(methods) == 3 for methods in seen.values()):
                    all_came.set()

        return handler

    with anyio.fail_after(30):
        options: dict[str, Any] = {"sampling_callback": _sampled, "list_roots_callback": _roots}
        async with (
            keyed_client(url, key, message_handler=record("a"), **options) as a,
            keyed_client(url, key, message_handler=record("b")) as b,
        ):
            asked = json.loads(_text(await a.call_tool("ask_client", {})))
            assert _text(await a.call_tool("announce", {})) == "announced"
            await b.list_tools()
            with anyio.move_on_after(25 if relayed else QUIET_S):
                await all_came.wait()
    return asked, seen["a"], seen["b"]


ANNOUNCED = ["notifications/message", "notifications/resources/updated", "notifications/tools/list_changed"]


def test_a_shared_bridge_relays_nothing_from_one_rollout_to_another(tmp_path: Path) -> None:
    """A rollout's own bridge passes the server's requests and notifications on (the check can see them); a shared
    one, serving every rollout, answers the requests with an error itself and drops the notifications."""
    with running_bridge(tmp_path, PROBE) as bridge:
        asked, a, b = anyio.run(_two_rollouts, bridge.url, KEY, True)
    assert asked["roots"].startswith("answered:") and "file:///harness/project" in asked["roots"]
    assert asked["sampling"].startswith("answered:") and "sampled" in asked["sampling"]
    assert sorted(a) == sorted(b) == ANNOUNCED

    with running_bridge(tmp_path, PROBE, key=SECRET, options=("--shared", "probe")) as bridge:
        asked, a, b = anyio.run(_two_rollouts, bridge.url, sidecar_key(SECRET, "shared", "probe"), False)
    refused = "error: a shared bridge relays no requests"
    assert asked == {"roots": refused, "sampling": refused}
    assert a == b == []


def test_a_shared_bridge_declares_no_client_capabilities(tmp_path: Path) -> None:
    """npm's everything server registers its sampling, roots and elicitation tools only for a client that declares
    them: behind a shared bridge it has none; a call's progress still reaches its caller, and the log lines that
    its simulated logging sends (one at once) reach no session."""
    command = [npm_server("mcp-server-everything"), "stdio"]
    with running_bridge(tmp_path, command, key=SECRET, options=("--shared", "everything")) as bridge:
        key = sidecar_key(SECRET, "shared", "everything")

        async def scenario() -> tuple[set[str], list[float], list[str]]:
            progressed: list[float] = []
            seen: list[str] = []
            logged = anyio.Event()

            async def progress(progress: float, total: float | None, message: str | None) -> None:
                progressed.append(progress)

            async def record(message: Any) -> None:
                if not isinstance(message, Exception) and message.method != "notifications/progress":
                    seen.append(message.method)
                    logged.set()

            options: dict[str, Any] = {"sampling_callback": _sampled, "list_roots_callback": _roots}
            with anyio.fail_after(30):
                async with (
                    keyed_client(bridge.url, key, message_handler=record, **options) as a,
                    keyed_client(bridge.url, key, message_handler=record) as b,
                ):
                    tools = {tool.name for tool in (await a.list_tools()).tools}
                    long = "trigger-long-running-operation"
                    _text(await a.call_tool(long, {"duration": 0.3, "steps": 3}, progress_callback=progress))
                    assert "Started" in _text(await a.call_tool("toggle-simulated-logging", {}))
                    await b.list_tools()
                    with anyio.move_on_after(QUIET_S):
                        await logged.wait()
                    assert "Stopped" in _text(await a.call_tool("toggle-simulated-logging", {}))
            return tools, progressed, seen

        tools, progressed, seen = anyio.run(scenario)
    assert "echo" in tools and not tools & {"trigger-sampling-request", "get-roots-list", "trigger-elicitation-request"}
    assert progressed == [1, 2, 3] and seen == []


def test_a_server_that_exits_stops_the_bridge(tmp_path: Path) -> None:
    """Its state is gone with it: the bridge exits 1 (the pod's restart policy decides what follows)."""
    answer = {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {},
              "serverInfo": {"name": "brief", "version": "1"}}}  # fmt: skip
    brief = (
        f"import sys; sys.stdin.readline(); print({json.dumps(json.dumps(answer))}, flush=True); sys.stdin.readline()"
    )
    argv = [*BRIDGE, "--host", "127.0.0.1", "--port", "0", "--", sys.executable, "-c", brief]
    proc = subprocess.Popen(
        argv, env=_env(tmp_path, KEY, None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert read_line(proc).startswith("bridge listening on")
    assert read_line(proc).startswith("bridge ready on")
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1
    (line,) = [line for line in stderr.splitlines() if line.startswith("rollwire mcp bridge:")]
    assert line.endswith("` exited"), line


def test_a_server_that_fails_to_start_stops_the_bridge(tmp_path: Path) -> None:
    failing = [sys.executable, "-c", "import sys; print('no config here', file=sys.stderr); sys.exit(3)"]
    argv = [*BRIDGE, "--host", "127.0.0.1", "--port", "0", "--startup-timeout", "30", "--", *failing]
    proc = subprocess.Popen(
        argv, env=_env(tmp_path, KEY, None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    listening = read_line(proc)
    assert listening.startswith("bridge listening on http://127.0.0.1:"), listening
    ready_url = listening.split()[-1] + "/ready"

    statuses: list[int | None] = []

    def exited() -> bool:  # asks /ready until the bridge process ends: no event to wait on in another process
        try:
            statuses.append(httpx.get(ready_url, timeout=2).status_code)
        except httpx.TransportError:
            statuses.append(None)
        return proc.poll() is not None

    wait_until(exited, "the bridge to exit")
    stdout, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 1
    assert 200 not in statuses and "bridge ready" not in stdout
    (line,) = [line for line in stderr.splitlines() if line.startswith("rollwire mcp bridge:")]
    assert "import sys" in line and "exited before answering initialize" in line and "no config here" in line


def test_no_key_no_bridge(tmp_path: Path) -> None:
    for key in (None, "", "   "):
        done = subprocess.run(
            [*BRIDGE, "--", sys.executable, "-c", "pass"], env=_env(tmp_path, key, None), capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2 and done.stdout == ""
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("rollwire mcp bridge:") and KEY_ENV in line
    done = subprocess.run([*BRIDGE], env=_env(tmp_path, KEY, None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "after --" in done.stderr
    shared = [*BRIDGE, "--shared", "probe", "--", *PROBE]
    done = subprocess.run(shared, env=_env(tmp_path, None, None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"rollwire mcp bridge: the key is missing: set {KEY_ENV} to the deployment's sidecar secret (the bridge "
        "never serves without one)"
    ]
    unnamed = [*BRIDGE, "--shared", " ", "--", *PROBE]
    done = subprocess.run(unnamed, env=_env(tmp_path, SECRET, None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == "rollwire mcp bridge: --shared needs the server's name"


def test_help_says_what_it_is_for(tmp_path: Path) -> None:
    done = subprocess.run(
        [*BRIDGE, "--help"], env=_env(tmp_path, None, None), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for words in (
        "stdio MCP server",
        "streamable HTTP",
        "Authorization: Bearer <key>",
        "--key-env",
        "/ready",
        "-- COMMAND",
        "--shared NAME",
        "X-Rollwire-Nonce",
        "X-Rollwire-Proof",
        "non-dumpable",
    ):
        assert words in text, words
