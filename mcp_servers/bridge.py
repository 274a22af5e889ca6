"""A third-party stdio MCP server served to the gateway over streamable HTTP: as a sidecar in one rollout's pod,
or (``shared``) as one Deployment that the gateway calls for every rollout.

The harness shares a rollout pod's loopback, so every request at the MCP path must carry ``Authorization: Bearer
<key>`` (the rollout's key; a shared bridge's is derived from the deployment's secret and the server's name), or is
answered 401 before the server sees a byte; a keyed request's nonce is answered with a proof of the key
(``bridge_auth``). ``/ready`` needs no key: it says only whether the server answered ``initialize`` and still runs.

The server runs as the bridge's uid, so the key must stay out of its reach (``seal``): the key's variable leaves the
environment the server is given and the bridge's own, and the bridge is made non-dumpable before the server starts,
so that no unprivileged process of its uid reads the environment it started with (``/proc/<pid>/environ``) or its
memory.

The bridge initializes the server once and answers each client session's ``initialize`` from that result (dropping
its ``notifications/initialized``): every session, one after another or at once, reaches the same process and
state. Client request ids and progress tokens become the bridge's own toward the server and are restored on the
way back. What the server sends on its own goes:

- a response, or ``notifications/progress``: to the session, and the request stream, of the request it belongs to;
- a request (sampling, roots/list, elicitation): to the session of the newest client request still in flight, on
  that request's stream, else to the newest open session's GET stream; with no session open it is answered with
  an error. The session's answer goes back under the server's own id;
- any other notification (logging, list_changed, resources/updated): to every open session's GET stream.

A shared bridge serves many rollouts, and none may reach another: it tells the server it has no client capabilities
(no sampling, elicitation or roots), answers every request the server sends with an error, and relays no
notification but ``notifications/progress`` (to the request's own session); the rest are dropped.

A server that does not start, or exits later (its state is gone), stops the bridge with a non-zero status.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import shlex
import signal
import socket
import sys
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from uuid import uuid4

import anyio
import mcp_types as types
import uvicorn
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from rollwire import __version__
from rollwire.mcp_servers.bridge_auth import KeyRequired

LINE_BYTES = 4096
"""The longest piece of the server's stderr kept as one line."""
SESSION_IDLE_S = 30 * 60
"""A client session with no request in flight for this long is closed (the SDK's session manager's default)."""
CAPABILITIES = types.ClientCapabilities(
    sampling=types.SamplingCapability(), elicitation=types.ElicitationCapability(), roots=types.RootsCapability()
)
"""What a rollout's bridge tells the server: it relays these requests to a client session (which errs if it cannot).
A shared bridge declares none."""
PR_SET_DUMPABLE = 4
_Closed = (anyio.ClosedResourceError, anyio.BrokenResourceError)
JSON = "application/json"


def seal(key_env: str) -> None:
    """Keep the key from the server, which runs as this process's uid: drop ``key_env`` from the environment, and
    make this process non-dumpable, so that a process of its uid can neither read its ``/proc/<pid>/environ``
    (which keeps the variables the process started with, whatever ``os.environ`` says now) or ``mem``, nor trace
    it. That holds for a process without capabilities, as in the pod (CAP_SYS_PTRACE, CAP_SYS_ADMIN or CAP_PERFMON
    read it anyway). The server, started later, is dumpable again (``execve`` resets the flag). Linux only:
    elsewhere only the variable goes (no ``/proc``, no ``prctl``). Raises ``OSError`` where ``prctl`` fails."""
    os.environ.pop(key_env, None)
    if not sys.platform.startswith("linux"):
        return
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(errno)}")


def server_parameters(argv: list[str], cwd: str | None, hidden_env: str) -> StdioServerParameters:
    """How to start the server: this process's environment minus ``hidden_env`` (the key stays with the bridge)."""
    env = {name: value for name, value in os.environ.items() if name != hidden_env}
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=Path(cwd) if cwd else None)


def _rpc(method: str, params: dict[str, Any] | None, id: types.RequestId | None = None) -> types.JSONRPCMessage:
    """A request (with ``id``) or a notification; no ``params`` member at all when there are none."""
    fields: dict[str, Any] = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}
    return types.JSONRPCRequest(id=id, **fields) if id is not None else types.JSONRPCNotification(**fields)


def _error(id: types.RequestId | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=id, error=types.ErrorData(code=code, message=message))


@dataclass(eq=False)
class _Session:
    """One client session: its transport, what waits to be written to it, its requests in flight."""

    id: str
    transport: StreamableHTTPServerTransport
    outbox: MemoryObjectSendStream[SessionMessage]
    inbox: MemoryObjectReceiveStream[SessionMessage]
    inflight: dict[types.RequestId, int] = field(default_factory=dict)
    """Client request id -> the bridge's id for it toward the server."""

    def deliver(self, message: types.JSONRPCMessage, related: types.RequestId | None = None) -> None:
        """Queue ``message`` (never waits: one slow client must not hold up the others)."""
        meta = ServerMessageMetadata(related_request_id=related) if related is not None else None
        with contextlib.suppress(*_Closed):
            self.outbox.send_nowait(SessionMessage(message, metadata=meta))

    async def drain(self, write: WriteStream[SessionMessage]) -> None:
        with contextlib.suppress(*_Closed):
            async for message in self.inbox:
                await write.send(message)


class _Relay:
    """The client sessions and the one stdio connection between them (the routing the module docstring names)."""

    def __init__(self, to_server: WriteStream[SessionMessage], initialized: dict[str, Any], shared: bool) -> None:
        self._to_server = to_server
        self._initialized = initialized
        self._shared = shared
        self._next_id = 1  # 0 was the bridge's own initialize
        self._pending: dict[int, tuple[_Session, types.RequestId, Any]] = {}
        """Bridge id -> the session, its request id, and its progress token (or None)."""
        self._asked: dict[types.RequestId, _Session] = {}
        self.sessions: dict[str, _Session] = {}

    def open(self) -> _Session:
        sid = uuid4().hex
        outbox, inbox = anyio.create_memory_object_stream[SessionMessage](math.inf)
        session = _Session(sid, StreamableHTTPServerTransport(sid, idle_timeout=SESSION_IDLE_S), outbox, inbox)
        self.sessions[sid] = session
        return session

    async def _send(self, message: types.JSONRPCMessage) -> None:
        with contextlib.suppress(*_Closed):  # the server is gone: the bridge is stopping
            await self._to_server.send(SessionMessage(message))

    async def from_client(self, session: _Session, message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCRequest):
            if message.method == "initialize":
                session.deliver(types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result=self._initialized))
                return
            bridge_id, self._next_id = self._next_id, self._next_id + 1
            params, meta = dict(message.params or {}), (message.params or {}).get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            if isinstance(meta, dict) and token is not None:  # progress comes back under the bridge's unique id
                params["_meta"] = {**meta, "progressToken": bridge_id}
            self._pending[bridge_id] = (session, message.id, token)
            session.inflight[message.id] = bridge_id
            await self._send(_rpc(message.method, params, bridge_id))
        elif isinstance(message, types.JSONRPCNotification):
            params = message.params or {}
            if message.method == "notifications/initialized":
                return
            if message.method == "notifications/cancelled":
                client_id = params.get("requestId")
                if not isinstance(client_id, int | str) or client_id not in session.inflight:
                    return
                params = {**params, "requestId": session.inflight[client_id]}
            await self._send(_rpc(message.method, params))
        elif message.id is not None and self._asked.get(message.id) is session:  # its answer to the server
            del self._asked[message.id]
            await self._send(message)

    async def from_server(self, message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            entry = self._pending.pop(message.id, None) if isinstance(message.id, int) else None
            if entry is not None:  # None: its session closed (the server was told to cancel)
                session, client_id, _token = entry
                session.inflight.pop(client_id, None)
                session.deliver(message.model_copy(update={"id": client_id}))
        elif isinstance(message, types.JSONRPCRequest):
            if self._shared:
                await self._send(_error(message.id, types.METHOD_NOT_FOUND, "a shared bridge relays no requests"))
                return
            newest = next(reversed(self._pending.values()), None)
            target, related = (newest[0], newest[1]) if newest else (next(reversed(self.sessions.values()), None), None)
            if target is None:
                await self._send(_error(message.id, types.INTERNAL_ERROR, "no client session is open at the bridge"))
                return
            self._asked[message.id] = target
            target.deliver(message, related)
        elif message.method == "notifications/progress":
            token = (message.params or {}).get("progressToken")
            entry = self._pending.get(token) if isinstance(token, int) else None
            if entry is not None and entry[2] is not None:
                params = {**(message.params or {}), "progressToken": entry[2]}
                entry[0].deliver(_rpc(message.method, params), entry[1])
        elif not self._shared:  # shared: every session is another rollout's
            for session in self.sessions.values():
                session.deliver(message)

    async def close(self, session: _Session) -> None:
        """Forget the session; the server is told to cancel its requests, and its own requests get an error."""
        self.sessions.pop(session.id, None)
        session.outbox.close()
        for bridge_id in session.inflight.values():
            self._pending.pop(bridge_id, None)
            params = {"requestId": bridge_id, "reason": "the client session closed"}
            await self._send(_rpc("notifications/cancelled", params))
        session.inflight.clear()
        for server_id in [server_id for server_id, asked in self._asked.items() if asked is session]:
            del self._asked[server_id]
            await self._send(_error(server_id, types.INTERNAL_ERROR, "the client session closed"))


class _NoStart(Exception):
    """The server did not complete the handshake: the message says how."""


async def _initialize(
    read: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage], shared: bool
) -> dict[str, Any]:
    """The bridge's own handshake with the server; its InitializeResult (as sent)."""
    params = types.InitializeRequestParams(
        protocol_version=LATEST_HANDSHAKE_VERSION,
        capabilities=types.ClientCapabilities() if shared else CAPABILITIES,
        client_info=types.Implementation(name="rollwire-mcp-bridge", version=__version__),
    )
    try:
        await write.send(
            SessionMessage(_rpc("initialize", params.model_dump(mode="json", by_alias=True, exclude_none=True), 0))
        )
        async for item in read:
            message = item.message if isinstance(item, SessionMessage) else None
            if isinstance(message, types.JSONRPCRequest):  # no client to ask yet
                await write.send(SessionMessage(_error(message.id, types.INTERNAL_ERROR, "not initialized yet")))
            if isinstance(message, types.JSONRPCError) and message.id == 0:
                raise _NoStart(f"refused initialize: {message.error.message}")
            if isinstance(message, types.JSONRPCResponse) and message.id == 0:
                types.InitializeResult.model_validate(message.result)
                await write.send(SessionMessage(_rpc("notifications/initialized", None)))
                return message.result
    except ValidationError as exc:
        raise _NoStart(f"answered initialize with no InitializeResult ({exc.error_count()} errors)") from None
    except _Closed:
        pass
    raise _NoStart("exited before answering initialize")


class _StderrTail:
    """The server's stderr, passed on to the bridge's line by line, its last lines kept to say why it failed."""

    def __init__(self, keep: int = 20) -> None:
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = open(write_fd, "w", closefd=True)  # closed once the server has its own copy
        self._lines: deque[str] = deque(maxlen=keep)
        self._thread = threading.Thread(target=self._copy, args=(read_fd,), name="bridge-stderr", daemon=True)
        self._thread.start()

    def _copy(self, fd: int) -> None:
        """Copied in pieces of at most ``LINE_BYTES``: a line the server never ends cannot grow without bound."""
        with open(fd, "rb") as source:
            for raw in iter(lambda: source.readline(LINE_BYTES), b""):
                line = raw.decode(errors="replace")
                sys.stderr.write(line)
                sys.stderr.flush()
                self._lines.append(line.strip())

    def tail(self, wait_s: float = 2.0) -> str:
        """The last lines (once the server's end is closed, or after ``wait_s``), joined on one line."""
        self.writer.close()
        self._thread.join(wait_s)
        return " | ".join(line for line in self._lines if line)


class _Uvicorn(uvicorn.Server):
    """uvicorn leaving signals to the bridge (which stops the server too), and saying when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.listening.set()


class Bridge:
    """``app`` serves ``/ready`` and the keyed MCP path; ``run`` starts the server and serves until a signal.
    ``shared``: the server is shared by every rollout (what that changes is in the module docstring)."""

    def __init__(
        self, params: StdioServerParameters, key: str, path: str = "/mcp", startup_timeout_s: float = 60.0,
        shared: bool = False,
    ) -> None:  # fmt: skip
        if not key.strip():
            raise ValueError("the bridge needs a non-empty key")
        self.params, self.path, self._timeout, self.shared = params, path, startup_timeout_s, shared
        self._relay: _Relay | None = None
        self._alive = False
        self._sessions: TaskGroup | None = None
        mcp = KeyRequired(key.strip(), RequestBodyLimitMiddleware(self._mcp, DEFAULT_MAX_REQUEST_BODY_SIZE))
        self.app = Starlette(routes=[Route("/ready", self._ready), Route(path, mcp)])

    async def _ready(self, request: Request) -> Response:
        ready = self._relay is not None and self._alive
        return JSONResponse({"ready": ready}, 200 if ready else 503)

    async def _mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A keyed request: to its session's transport; without a session id, to a new session's (an initialize)."""
        relay, sessions, sid = self._relay, self._sessions, Request(scope).headers.get(MCP_SESSION_ID_HEADER)
        if relay is None or sessions is None or not self._alive:
            return await JSONResponse({"error": "the MCP server is not ready"}, 503)(scope, receive, send)
        if sid is not None:
            if (session := relay.sessions.get(sid)) is None:
                error = _error(None, types.INVALID_REQUEST, "Session not found")
                return await Response(error.model_dump_json(by_alias=True), 404, media_type=JSON)(scope, receive, send)
            await session.transport.handle_request(scope, receive, send)
            if session.transport.is_terminated:
                relay.sessions.pop(sid, None)
            return
        session = relay.open()
        await sessions.start(self._run_session, relay, session)
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        await session.transport.handle_request(scope, receive, watch)
        if not status or status[0] >= 400:  # nothing was opened: only an initialize opens a session
            await session.transport.terminate()

    async def _run_session(self, relay: _Relay, session: _Session, *, task_status: TaskStatus[None]) -> None:
        try:
            async with session.transport.connect() as (read, write), anyio.create_task_group() as tg:
                task_status.started()
                tg.start_soon(session.drain, write)
                with session.transport.idle_scope or anyio.CancelScope(), contextlib.suppress(*_Closed):
                    async for item in read:
                        if isinstance(item, SessionMessage):
                            await relay.from_client(session, item.message)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await relay.close(session)
                if not session.transport.is_terminated:
                    await session.transport.terminate()

    def run(self, sock: socket.socket, config: uvicorn.Config) -> str | None:
        """Serve on ``sock`` until SIGINT/SIGTERM (None) or until the server fails to start or exits (why)."""
        return anyio.run(self._run, sock, config)

    async def _run(self, sock: socket.socket, config: uvicorn.Config) -> str | None:
        server = _Uvicorn(config)
        host, port = sock.getsockname()[:2]
        failure: str | None = None
        async with anyio.create_task_group() as tg:
            self._sessions = tg

            async def serve() -> None:
                await server.serve(sockets=[sock])
                tg.cancel_scope.cancel()

            tg.start_soon(serve)
            tg.start_soon(self._on_signal, server)
            await server.listening.wait()
            if server.started:
                print(f"bridge listening on http://{host}:{port}", flush=True)
                failure = await self._run_server(f"http://{host}:{port}{self.path}")
            server.should_exit = True
            await self._end_sessions()
        return failure if server.started else "could not serve HTTP"

    async def _on_signal(self, server: uvicorn.Server) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _signum in signals:
                server.should_exit = True
                await self._end_sessions()
                return

    async def _end_sessions(self) -> None:
        for session in list(self._relay.sessions.values() if self._relay else ()):
            await session.transport.terminate()

    async def _run_server(self, url: str) -> str:
        """Start and initialize the server, then relay until it exits; why it stopped."""
        stderr = _StderrTail()
        what = shlex.join([self.params.command, *self.params.args])
        try:
            async with stdio_client(self.params, errlog=stderr.writer) as (read, write):
                stderr.writer.close()  # the server has its own copy: the pipe ends when the server does
                try:
                    with anyio.fail_after(self._timeout):
                        result = await _initialize(read, write, self.shared)
                except TimeoutError:
                    reason = f"did not answer initialize within {self._timeout:g} s"
                except _NoStart as exc:
                    reason = str(exc)
                else:
                    self._relay, self._alive = _Relay(write, result, self.shared), True
                    print(f"bridge ready on {url}", flush=True)
                    with contextlib.suppress(*_Closed):
                        async for item in read:
                            if isinstance(item, SessionMessage):
                                await self._relay.from_server(item.message)
                    self._alive = False
                    reason = "exited"
        except OSError as exc:
            reason = f"could not start: {exc.strerror or exc}"
        tail = stderr.tail()
        return f"MCP server `{what}` {reason}" + (f" (its stderr: {tail})" if tail else "")


__all__ = ["CAPABILITIES", "SESSION_IDLE_S", "Bridge", "seal", "server_parameters"]
