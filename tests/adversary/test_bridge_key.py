"""Red team: the harness shares the pod's loopback with the MCP sidecar bridge (``rollwire mcp bridge``).

On Kubernetes a stateful stdio MCP server runs as a sidecar in each rollout's pod, and the policy under training
runs in that same pod: it can open the sidecar's port on localhost and speak MCP to it directly, past the
gateway that records every tool call, to read or rewrite the server's state (plant answers, erase evidence)
unseen. The bridge must refuse every request that does not carry the rollout's own key. Here, with a keyed
session open (so its session id is known, as a leaked id would be), requests with no Authorization header, a
wrong key, another rollout's key, an empty bearer token, a prefix of the right key, the right key with more after
it, the key without its scheme, or another scheme, are all answered 401 (with a small JSON body) for POST
initialize, POST tools/call, GET and DELETE; nothing reaches the server (a keyed session then reads an empty
graph, and the keyed session still works); and the official SDK client fails to connect without the key.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.mcp_servers.npm_servers import npm_server
from tests.mcp_servers.test_bridge import KEY, keyed_client, running_bridge

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

        for what, authorization in BAD_AUTHORIZATION.items():
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
