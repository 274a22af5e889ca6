"""The orchestrator's side of the warm pool: starts the fork server on first use and turns its reports into processes.

The local runtime asks ``spawn`` for launches of the form ``sys.executable -m MODULE ...``; the result,
a ``PooledProcess``, has the part of anyio's ``Process`` the runtime uses (``pid``, ``returncode``,
``wait``), so deadlines, group kills, log tails and cleanup stay the runtime's, unchanged. When the pool
cannot serve (the server would fork with threads running, or it died) ``spawn`` raises
``PoolUnavailable`` and the runtime starts a plain subprocess instead.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
import anyio.streams.stapled
from anyio.streams.buffered import BufferedByteReceiveStream

from rollwire.orchestrator.runtimes.local.relay import listen_unix

logger = logging.getLogger(__name__)

SERVER_MODULE = "rollwire.orchestrator.runtimes.local.fork_server"
START_TIMEOUT_S = 120.0  # the preloads import on a possibly busy machine
REPLY_TIMEOUT_S = 30.0
MAX_LINE = 1 << 20


class PoolUnavailable(Exception):
    """The warm pool cannot start this launch; run it as a plain subprocess."""


@dataclass(slots=True)
class PooledProcess:
    """A rollout forked by the fork server; ``lost`` says why its end could not be observed (the platform's
    failure), ``ended_by`` why it ended with its sandbox (the rollout's own doing: see ``WarmPool``)."""

    pid: int
    returncode: int | None = None
    lost: str | None = None
    ended_by: str | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)

    async def wait(self) -> int | None:
        await self.ended.wait()
        return self.returncode


def poolable(argv: Sequence[str]) -> bool:
    """Only ``<this interpreter> -m MODULE ...`` can be forked from this interpreter's warm imports."""
    return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and bool(argv[2])


@dataclass(frozen=True, slots=True)
class Enclosure:
    """How a server runs inside a rollout sandbox (``sandbox_pool``): ``wrap`` turns its command line into the one
    to run and names the descriptors that command reads (closed here once it started); the server speaks over
    the one-use unix socket ``control`` (the host's path) that it finds at ``inside``."""

    wrap: Callable[[list[str]], tuple[list[str], list[int]]]
    control: Path
    inside: str


class WarmPool:
    """``async with WarmPool(preload, env, cwd) as pool: await pool.spawn(...)``; the server starts on first spawn.

    With an ``enclosure`` the server runs in a rollout sandbox of its own (``sandbox_pool``). It lives in its
    own pid namespace, so its children are reported with the outer process's pid, the one the runtime stops them
    through; and it shares the sandbox with the rollout it forks, so when it ends while a rollout runs, the
    rollout did it (killed its parent, or took the sandbox's memory): that rollout ended (``ended_by``), it was
    not lost to the platform.
    """

    def __init__(
        self,
        preload: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        enclosure: Enclosure | None = None,
        group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        """``group``: a task group of the caller's to read the server in (entering the pool then opens nothing)."""
        self._preload, self._env, self._cwd, self._enclosure = list(preload), dict(env), cwd, enclosure
        self._process: anyio.abc.Process | None = None
        self._channel: anyio.abc.ByteStream | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self._group: anyio.abc.TaskGroup | None = group
        self._own_group = group is None
        self._lock = anyio.Lock()
        self._unavailable: str | None = None
        self._reply: tuple[anyio.Event, dict[str, Any]] | None = None
        self._children: dict[int, PooledProcess] = {}
        self._closing = False

    async def __aenter__(self) -> Self:
        if self._own_group:
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._group is not None
        with anyio.CancelScope(shield=True):
            await self._close_server()
        if self._own_group:  # else the reader ends by itself: the server's output closed with it
            self._group.cancel_scope.cancel()
            await self._group.__aexit__(exc_type, exc, tb)

    async def start(self) -> None:
        """Start the server now (it would start on the first spawn); PoolUnavailable if it cannot."""
        async with self._lock:
            await self._ensure_server()

    async def reset(self) -> bool:
        """A sandboxed server ends what its last rollout left (``fork_server.Server.reset``); False if it cannot."""
        async with self._lock:
            if self._unavailable is not None or self._process is None:
                return False
            try:
                reply = await self._request({"id": "reset", "reset": True})
            except PoolUnavailable:
                return False
        return reply.get("reset") is True

    async def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path) -> PooledProcess:
        """Fork one rollout; raises PoolUnavailable when the pool cannot (the caller falls back)."""
        async with self._lock:  # one request in flight: replies come back in order
            await self._ensure_server()
            request = {"id": str(log), "argv": list(argv), "env": dict(env), "cwd": str(cwd), "log": str(log)}
            reply = await self._request(request)
        child = reply.get("child")
        if not isinstance(child, PooledProcess):
            raise PoolUnavailable(str(reply.get("error") or "the fork server did not start the rollout"))
        if self._enclosure is not None and self._process is not None:
            child.pid = self._process.pid
        return child

    @property
    def server_pid(self) -> int | None:
        """The pid of the process started for the server (bwrap's, when enclosed); None before it started."""
        return self._process.pid if self._process is not None else None  # not looked up by pid: a quick child's exit report may already have removed it

    async def _ensure_server(self) -> None:
        if self._unavailable is not None:
            raise PoolUnavailable(self._unavailable)
        if self._process is not None:
            return
        try:
            with anyio.fail_after(START_TIMEOUT_S):
                if self._enclosure is None:
                    await self._start_plain()
                else:
                    await self._start_enclosed(self._enclosure)
                assert self._reader is not None
                hello = json.loads(await self._reader.receive_until(b"\n", MAX_LINE))
        except (OSError, TimeoutError, ValueError, anyio.EndOfStream, anyio.IncompleteRead) as exc:
            self._give_up(f"the fork server did not start: {exc.__class__.__name__}: {exc}")
            raise PoolUnavailable(self._unavailable or "") from exc
        for note in hello.get("skipped") or []:
            logger.warning("warm pool: could not preload %s", note)
        if hello.get("unsafe"):
            self._give_up(f"warm pool off: {hello['unsafe']}")
            raise PoolUnavailable(self._unavailable or "")
        assert self._group is not None
        self._group.start_soon(self._read)
        logger.debug("warm pool ready (pid %s, preloaded %s)", self.server_pid, ", ".join(self._preload) or "nothing")

    async def _start_plain(self) -> None:
        self._process = await anyio.open_process(
            [sys.executable, "-m", SERVER_MODULE, *self._preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, cwd=self._cwd, env=self._env,
            start_new_session=True,  # a Ctrl-C for the orchestrator is not the server's to handle
        )  # fmt: skip
        assert self._process.stdin is not None and self._process.stdout is not None
        self._channel = anyio.streams.stapled.StapledByteStream(self._process.stdin, self._process.stdout)
        self._reader = BufferedByteReceiveStream(self._channel)

    async def _start_enclosed(self, enclosure: Enclosure) -> None:
        """Listen on the control socket, start the sandboxed server, take its one connection, stop listening:
        the sandbox's processes hold no stdio of ours, and nothing can connect after the server."""
        command = [sys.executable, "-m", SERVER_MODULE, "--sandboxed", "--control", enclosure.inside, *self._preload]
        listener = await listen_unix(enclosure.control)
        try:
            full, fds = enclosure.wrap(command)
            try:
                self._process = await anyio.open_process(
                    full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None, cwd=self._cwd,
                    env=self._env, start_new_session=True, pass_fds=fds,
                )  # fmt: skip
            finally:
                for fd in fds:
                    os.close(fd)
            self._channel = await listener.accept()
        finally:
            await listener.aclose()
            enclosure.control.unlink(missing_ok=True)
        self._reader = BufferedByteReceiveStream(self._channel)

    async def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._channel is not None
        event: anyio.Event = anyio.Event()
        reply: dict[str, Any] = {}
        self._reply = (event, reply)
        try:
            await self._channel.send((json.dumps(request) + "\n").encode())
            with anyio.fail_after(REPLY_TIMEOUT_S):
                await event.wait()
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._give_up(f"the fork server stopped answering: {exc.__class__.__name__}")
            raise PoolUnavailable(self._unavailable or "") from exc
        finally:
            self._reply = None
        return reply

    async def _read(self) -> None:
        """Dispatch the server's lines: a reply to the request in flight, or a child's exit status."""
        assert self._reader is not None
        try:
            while True:
                message = json.loads(await self._reader.receive_until(b"\n", MAX_LINE))
                if "id" in message:
                    if "pid" in message:  # registered before its exit report can arrive (same pipe, in order)
                        message["child"] = self._children[int(message["pid"])] = PooledProcess(int(message["pid"]))
                    if self._reply is not None:
                        self._reply[1].update(message)
                        self._reply[0].set()
                    elif "pid" in message:  # its request stopped waiting (timed out): nobody would supervise it
                        _kill(self._process.pid if self._enclosure and self._process else int(message["pid"]))
                elif "code" in message:
                    child = self._children.pop(int(message["pid"]), None)
                    if child is not None:
                        child.returncode = int(message["code"])
                        child.ended.set()
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError, ValueError):
            self._give_up("the fork server exited")
        finally:  # also when cancelled with its task group (Ctrl-C): a `wait()` on a child must not outlive the reader
            self._give_up("the warm pool stopped reading the fork server", warn=False)

    def _give_up(self, reason: str, *, warn: bool = True) -> None:
        """No more pooled launches. Rollouts whose end the server would have reported are lost (retried); in an
        enclosure, where only the rollout could have ended the server, they ended with their sandbox."""
        if warn and self._unavailable is None and self._enclosure is None:  # an enclosed server ends with its slot
            logger.warning("%s; rollouts start as plain subprocesses from now on", reason)
        self._unavailable = self._unavailable or reason
        if self._reply is not None:
            self._reply[0].set()
        for child in self._children.values():
            if self._enclosure is not None and not self._closing:
                child.returncode = -signal.SIGKILL
                child.ended_by = f"its sandbox ended under it ({reason}): the warm-pool server it shared was killed"
            else:
                child.lost = self._unavailable
            child.ended.set()
        self._children.clear()

    async def _close_server(self) -> None:
        process = self._process
        if process is None:
            return
        self._closing = True
        self._unavailable = self._unavailable or "the warm pool is closed"
        if self._channel is not None:  # the server exits when it reads the end of its channel
            try:
                await self._channel.send_eof()
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
        with anyio.move_on_after(5.0):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()  # its pipes and transport, before the event loop that owns them is gone
        if self._channel is not None:
            await self._channel.aclose()
        self._process = None


def _kill(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


__all__ = ["Enclosure", "PoolUnavailable", "PooledProcess", "WarmPool", "poolable"]
