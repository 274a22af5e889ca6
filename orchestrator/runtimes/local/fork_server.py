"""The warm pool's fork server: a Python process that imported a harness's modules once and forks one child per rollout.

A fresh ``python -m MODULE`` spends most of a short rollout importing (openai + mcp alone take ~0.9 s of CPU);
a child forked from this process starts with those imports done. The server is deliberately plain: no
threads and no event loop (forking either is unsafe), one ``selectors`` loop over its control pipe and a
SIGCHLD wake-up pipe. It speaks JSON lines with the orchestrator (``warm_pool.WarmPool``):

- it says ``{"ready": true, "unsafe": null | reason, "skipped": [...]}`` once the preloads are imported;
- each request ``{"id", "argv", "env", "cwd", "log"}`` is answered ``{"id", "pid"}`` (or ``{"id", "error"}``);
- each child's end is reported ``{"pid", "code"}`` (``code`` as ``subprocess`` reports it: ``-N`` for signal N);
- in a sandbox (``--sandboxed``), ``{"id", "reset": true}`` ends what the last rollout left, answered
  ``{"id", "reset": ok}``; the server is then not dumpable (a rollout cannot open its descriptors through
  ``/proc`` or read its memory), its children are.

The lines travel over stdin/stdout, or with ``--control PATH`` over a unix socket the server connects to once
(a sandboxed slot: no process the rollout can reach holds the channel; the orchestrator stops listening as soon
as the server is connected, so nothing else can connect after it).

A child becomes what ``python -m MODULE ARGS`` would be: its own session (the runtime kills the group),
cwd, ``os.environ`` replaced by the request's env, stdin from /dev/null, stdout/stderr to the log file, the
module run as ``__main__`` with ``sys.argv`` from the request, and the exit status it asked for.
The server exits when its control pipe closes (the orchestrator is gone); running children are not touched.

What a fork cannot redo: anything a preloaded module computed from the environment when it was imported
(a module-level ``Path.home()``, an env var read at import) keeps the server's value, so preload only
modules that read their environment when called; the module the launch names is always run afresh.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

SANDBOXED_FLAG = "--sandboxed"
"""Given by ``sandbox_pool``: the server runs alone in a rollout sandbox and may ``reset`` it between rollouts."""
CONTROL_FLAG = "--control"
"""``--control PATH``: speak over the unix socket at PATH instead of stdin/stdout."""


def _send(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def preload(entries: list[str]) -> list[str]:
    """Import each ``module`` (or import ``module`` and call ``module:function``, e.g. a CLI's parser builder
    that imports its subcommands); returns a note per entry that failed (a missing optional harness is no error)."""
    skipped = []
    for entry in entries:
        module_name, _, function = entry.partition(":")
        try:
            module = importlib.import_module(module_name)
            if function:
                getattr(module, function)()
        except Exception as exc:  # noqa: BLE001 - reported to the orchestrator, the pool still serves
            skipped.append(f"{entry}: {exc.__class__.__name__}: {exc}")
    return skipped


def _set_dumpable(flag: bool) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, int(flag), 0, 0, 0)  # PR_SET_DUMPABLE


def _exit_status(exc: SystemExit) -> int:
    """What the interpreter would exit with for ``sys.exit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _reopen_std_streams() -> None:
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
    for name in ("stdin", "stdout", "stderr"):  # sys.__stdin__ & co. too (typeshed declares them Final; they are not)
        setattr(sys, f"__{name}__", getattr(sys, name))


def run_child(request: dict[str, Any]) -> int:
    """In the forked child: become the requested ``python -m MODULE`` process and run it; returns its exit status."""
    signal.set_wakeup_fd(-1)
    if request.get("dumpable"):
        _set_dumpable(True)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
    _reopen_std_streams()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # recomputed from the child's TMPDIR
    module, args = request["argv"][2], request["argv"][3:]
    sys.path[0] = os.getcwd()  # what `python -m` puts first
    sys.argv = [module, *args]
    if importlib.util.find_spec(module) is None:
        print(f"{request['argv'][0]}: No module named {module}", file=sys.stderr)
        return 1
    for name in (module, f"{module}.__main__"):  # preloaded under its own name: run it afresh as __main__
        sys.modules.pop(name, None)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:  # noqa: BLE001 - an uncaught error: the traceback and status 1, as the interpreter does
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # wait for non-daemon threads, as a normal exit does
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


class Server:
    def __init__(self, control_in: int, control_out: int, sandboxed: bool = False) -> None:
        self.control_in, self.control_out, self.sandboxed = control_in, control_out, sandboxed
        self.buffer = b""

    def spawn(self, request: dict[str, Any]) -> None:
        try:
            pid = os.fork()
        except OSError as exc:
            _send(self.control_out, {"id": request.get("id"), "error": f"fork failed: {exc}"})
            return
        if pid == 0:
            code = 1
            try:
                code = run_child({**request, "dumpable": self.sandboxed})
            except BaseException:  # noqa: BLE001 - never return into the server loop from a child
                traceback.print_exc()
            finally:
                os._exit(code & 0xFF)  # as the OS truncates sys.exit(N)
        _send(self.control_out, {"id": request.get("id"), "pid": pid})

    def reset(self, request: dict[str, Any]) -> None:
        """Between two rollouts in one sandbox (``sandbox_pool``): end every process the last one left, empty
        /dev/shm. Only inside a bwrap pid namespace, where /proc lists the sandbox's processes and no others."""
        init = Path("/proc/1/cmdline").read_bytes()
        if not self.sandboxed or os.getppid() != 1 or b"sandbox_init.py" not in init:
            _send(self.control_out, {"id": request.get("id"), "error": "reset outside a sandbox"})
            return
        keep = {1, os.getpid()}
        for _ in range(100):  # a process may fork while the last sweep runs: sweep until none is left
            others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep]
            if not others:
                break
            for pid in others:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.reap()
            time.sleep(0.01)
        for entry in Path("/dev/shm").glob("*"):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        _send(self.control_out, {"id": request.get("id"), "reset": not others})

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _send(self.control_out, {"pid": pid, "code": os.waitstatus_to_exitcode(status)})

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if line.strip():
                try:
                    request = json.loads(line)
                    if request.get("reset"):
                        self.reset(request)
                        continue
                    argv = request["argv"]
                    if len(argv) < 3 or argv[1] != "-m":
                        raise ValueError("argv must be PYTHON -m MODULE [ARGS...]")
                except (ValueError, KeyError, TypeError) as exc:
                    _send(self.control_out, {"id": None, "error": f"bad request: {exc}"})
                    continue
                self.spawn(request)

    def serve(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        selector = selectors.DefaultSelector()
        selector.register(self.control_in, selectors.EVENT_READ, "control")
        selector.register(wake_r, selectors.EVENT_READ, "child")
        while True:
            for key, _ in selector.select():
                if key.data == "child":
                    while True:
                        try:
                            if not os.read(wake_r, 4096):
                                break
                        except BlockingIOError:
                            break
                    self.reap()
                else:
                    data = os.read(self.control_in, 65536)
                    if not data:
                        return  # the orchestrator closed the pipe (or died)
                    self.feed(data)


def main(argv: list[str] | None = None) -> int:
    """``python -m rollwire.orchestrator.runtimes.local.fork_server [--sandboxed] [--control PATH] [PRELOAD ...]``."""
    entries = list(sys.argv[1:] if argv is None else argv)
    sandboxed = SANDBOXED_FLAG in entries
    entries = [entry for entry in entries if entry != SANDBOXED_FLAG]
    if sandboxed:
        _set_dumpable(False)
    if CONTROL_FLAG in entries:
        at = entries.index(CONTROL_FLAG)
        path, entries = entries[at + 1], entries[:at] + entries[at + 2 :]
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        channel.connect(path)
        control_in = channel.detach()
        control_out = os.dup(control_in)
    else:
        control_in, control_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)  # stray prints of preloaded modules must not corrupt the control pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the orchestrator stops it by closing the pipe
    skipped = preload(entries)
    threads = threading.active_count()
    unsafe = f"{threads - 1} thread(s) running after the preloads; forking would be unsafe" if threads > 1 else None
    _send(control_out, {"ready": True, "unsafe": unsafe, "skipped": skipped})
    if unsafe is None:
        Server(control_in, control_out, sandboxed).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
