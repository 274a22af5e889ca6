"""Red team: the harness shares the pod's loopback with the MCP sidecar bridge (``rollwire mcp bridge``).

On Kubernetes a stateful stdio MCP server runs as a sidecar in each rollout's pod, and the policy under training
runs in that same pod: it can open the sidecar's port on localhost and speak MCP to it directly, past the
gateway that records every tool call, to read or rewrite the server's state (plant answers, erase evidence)
unseen. The bridge must refuse every request that does not carry the rollout's own key. Here, with a keyed
session open (so its session id is known, as a leaked id would be), requests with no Authorization header, a
wrong key, another rollout's key, an empty bearer token, a prefix of the right key, the right key with more after
it, the key without its scheme, or another scheme, are all answered 401 (with a small JSON body) for POST
initialize, POST tools/call, GET and DELETE; nothing reaches the server (a keyed session then reads an empty
graph, and the keyed session still works); and the official SDK client fails to connect without the key. None of
those 401s carries an ``X-Rollwire-Proof`` for the nonce the request sent (it would be an oracle for the proof
that tells the gateway it reached the bridge, not a process that took its port).

The server the bridge runs is third-party code with the bridge's uid, and some offer a file or exec tool the policy
can call: it must not find the key in the bridge's ``/proc/<pid>/environ`` (which keeps the variables the bridge
started with), ``mem`` or ``cmdline``, nor in its own environment. A probe server (``probe_server.py``) reads
them and is refused, though it reads a sleeping process of the same uid and capabilities. A shared bridge
(``--shared NAME``) holds the deployment's secret, from which every rollout's key derives: it answers only the
key derived for NAME (not the secret, another server's, or a rollout's), and its server reads neither.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from rollwire.mcp_servers.bridge_auth import NONCE_HEADER, PROOF_HEADER
from rollwire.mcp_servers.placement import sidecar_key
from tests.mcp_servers.npm_servers import npm_server
from tests.mcp_servers.test_bridge import KEY, PROBE, SECRET, keyed_client, running_bridge

OTHER_ROLLOUT_KEY = "rollout-9c2d-key-0e7a4b6f1d3c5a92"
BAD_AUTHORIZATION: dict[str, dict[str, str]] = {
    "no Authorization": {},
    "a wrong key": {"Authorization": "Bearer not-the-key"},
    "another rollout's key": {"Authorization": f"Bearer {OTHER_ROLLOUT_KEY}"},
    "an empty bearer token": {"Authorization": "Bearer "},
    "a bare Bearer": {"Authorization": "Bearer"},
    "a prefix of the key": {"Authorization": f"Bearer {KEY[:-1]}"},
    "the key and more": {"Authorization": f"Bearer {KEY}0"},
    "the key without its scheme": {"Authorization": KEY},
    "the key under another scheme": {"Authorization": f"Basic {KEY}"},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PR_CAPBSET_DROP = 24


def _rpc(id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


INITIALIZE = _rpc(
    1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}
)
PLANT = _rpc(
    2,
    "tools/call",
    {
        "name": "create_entities",
        "arguments": {"entities": [{"name": "planted", "entityType": "x", "observations": []}]},
    },
)
READ_GRAPH = _rpc(3, "tools/call", {"name": "read_graph", "arguments": {}})


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in an SSE response body."""
    (data,) = [line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ") and line[6:]]
    answer: dict[str, Any] = json.loads(data)
    return answer


def _raw(url: str, method: str, headers: dict[str, str], body: Any = None) -> tuple[int, dict[str, str], bytes]:
    """One request written byte for byte as given (an HTTP client library would refuse ``Bearer `` as a value,
    the harness need not): its status, headers and body."""
    where = urlsplit(url)
    payload = json.dumps(body).encode() if body is not None else b""
    lines = [f"{method} {where.path} HTTP/1.1", f"Host: {where.netloc}", "Connection: close"]
    lines += [f"Content-Length: {len(payload)}", *(f"{name}: {value}" for name, value in headers.items())]
    assert where.hostname is not None and where.port is not None
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + payload)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, content = received.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    named = {name.strip().lower(): value.strip() for name, _, value in (field.partition(":") for field in fields)}
    return int(status_line.split()[1]), named, content


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def test_only_the_rollout_key_reaches_the_server(tmp_path: Path) -> None:
    env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    with running_bridge(tmp_path, [npm_server("mcp-server-memory")], env=env) as bridge, httpx.Client() as http:
        keyed = {**MCP_HEADERS, "Authorization": f"Bearer {KEY}"}
        opened = http.post(bridge.url, json=INITIALIZE, headers=keyed)
        assert opened.status_code == 200 and "result" in _answer(opened)
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        assert http.get(bridge.base + "/ready").json() == {"ready": True}  # no key needed, nothing revealed

        for what, bad in BAD_AUTHORIZATION.items():
            authorization = {**bad, NONCE_HEADER: "a-nonce-of-the-harness"}
            attempts = {
                "POST initialize": _raw(bridge.url, "POST", {**MCP_HEADERS, **authorization}, INITIALIZE),
                "POST tools/call": _raw(bridge.url, "POST", {**MCP_HEADERS, **session, **authorization}, PLANT),
                "GET": _raw(bridge.url, "GET", {"Accept": "text/event-stream", **session, **authorization}),
                "DELETE": _raw(bridge.url, "DELETE", {**session, **authorization}),
            }
            for request, (status, headers, content) in attempts.items():
                assert status == 401, (what, request, status, content)
                assert headers["content-type"] == "application/json", (what, request)
                assert set(json.loads(content)) == {"error"}, (what, request)
                assert "mcp-session-id" not in headers, (what, request)
                assert PROOF_HEADER.lower() not in headers, (what, request)

        still_open = http.post(bridge.url, json=READ_GRAPH, headers={**keyed, **session})
        assert still_open.status_code == 200
        graph = json.loads(_answer(still_open)["result"]["content"][0]["text"])
        assert graph == {"entities": [], "relations": []}

        async def fresh_session_reads() -> str:
            with anyio.fail_after(30):
                async with keyed_client(bridge.url) as client:
                    return str((await client.call_tool("read_graph", {})).content[0].text)  # type: ignore[union-attr]

        assert json.loads(anyio.run(fresh_session_reads)) == {"entities": [], "relations": []}
        assert http.delete(bridge.url, headers={**keyed, **session}).status_code == 200


def test_the_sdk_client_cannot_connect_without_the_key(tmp_path: Path) -> None:
    env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    with running_bridge(tmp_path, [npm_server("mcp-server-memory")], env=env) as bridge:

        async def connect(headers: dict[str, str]) -> list[BaseException]:
            http = create_mcp_http_client(headers=headers)
            try:
                with anyio.fail_after(30):
                    async with http, Client(streamable_http_client(bridge.url, http_client=http)):
                        return []
            except Exception as exc:  # noqa: BLE001 - what the client raised is the finding
                return _leaves(exc)

        for headers in ({}, {"Authorization": f"Bearer {OTHER_ROLLOUT_KEY}"}, {"Authorization": f"Bearer {KEY[:8]}"}):
            errors = anyio.run(connect, headers)
            assert errors and all(isinstance(error, MCPError) for error in errors), (headers, errors)


def _as_in_the_pod() -> dict[str, Any]:
    """``subprocess.Popen`` arguments that leave a process no capability, as the pod's uid has none. Root (as tests
    often run) reads any process's ``/proc`` files with CAP_SYS_PTRACE, CAP_SYS_ADMIN or CAP_PERFMON, non-dumpable
    or not; so under root the whole bounding set is dropped (the bridge's server, its child, cannot get any back),
    and only the bridge's dumpable flag stands between the server and the bridge, as between two uid-10001
    processes in the pod."""
    if os.geteuid() != 0:
        return {}
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child, between fork and exec, only calls

    def drop_all() -> None:
        for cap in range(last + 1):
            if prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")

    return {"preexec_fn": drop_all}


def _read_proc(url: str, key: str, pids: list[int]) -> list[str]:
    """What the probe server's ``read_proc`` tool returned for each pid (0: the bridge), as the policy would see it."""

    async def calls() -> list[str]:
        with anyio.fail_after(30):
            async with keyed_client(url, key) as client:
                results = [await client.call_tool("read_proc", {"pid": pid}) for pid in pids]
        assert not any(result.is_error for result in results), results
        return [str(result.content[0].text) for result in results]  # type: ignore[union-attr]

    return anyio.run(calls)


def _refused(read: str) -> bool:
    return read.startswith("PermissionError:")


def test_the_server_cannot_read_the_key_from_the_bridge(tmp_path: Path) -> None:
    decoy_env = {"DECOY": "the-probe-reads-a-process-of-its-uid"}
    decoy = subprocess.Popen(["sleep", "300"], env=decoy_env, **_as_in_the_pod())
    try:
        with running_bridge(tmp_path, PROBE, **_as_in_the_pod()) as bridge:
            (server,) = bridge.server_pids()
            assert KEY.encode() not in Path(f"/proc/{server}/environ").read_bytes(), "the key reached the server"
            from_bridge, from_decoy = _read_proc(bridge.url, KEY, [0, decoy.pid])
    finally:
        decoy.kill()
        decoy.wait(10)
    assert KEY not in from_bridge
    bridge_files, decoy_files = json.loads(from_bridge), json.loads(from_decoy)
    assert _refused(bridge_files["environ"]) and _refused(bridge_files["mem"]), bridge_files
    assert "rollwire.app.cli" in bridge_files["cmdline"]  # world-readable, and the key is never on it
    assert "DECOY=the-probe-reads-a-process-of-its-uid" in decoy_files["environ"].split("\0"), decoy_files


def test_a_shared_bridge_answers_only_the_key_derived_for_it(tmp_path: Path) -> None:
    key = sidecar_key(SECRET, "shared", "probe")
    refused = {
        "the deployment's secret": SECRET,
        "another shared server's key": sidecar_key(SECRET, "shared", "memory"),
        "a rollout's key for it": sidecar_key(SECRET, "rollout", "ro-1", "probe"),
        "another deployment's key for it": sidecar_key("another-deployment-secret", "shared", "probe"),
    }
    options = ("--shared", "probe")
    with running_bridge(tmp_path, PROBE, key=SECRET, options=options, **_as_in_the_pod()) as bridge:
        for what, wrong in refused.items():
            headers = {**MCP_HEADERS, "Authorization": f"Bearer {wrong}"}
            assert _raw(bridge.url, "POST", headers, INITIALIZE)[0] == 401, what
        (server,) = bridge.server_pids()
        assert SECRET.encode() not in Path(f"/proc/{server}/environ").read_bytes(), "the secret reached the server"
        (from_bridge,) = _read_proc(bridge.url, key, [0])
    assert SECRET not in from_bridge and key not in from_bridge
    assert _refused(json.loads(from_bridge)["environ"])
