"""The first process inside a sandbox: limits, the loopback relay (a harness's proxy and gateway), then the command.

Runs as ``python -I -S sandbox_init.py SPEC_JSON`` (standard library only: no site, no venv, fast) as pid 1 of
the sandbox's pid namespace (bwrap ``--as-pid-1``), in its empty network namespace, where nothing is listening.
It makes itself non-dumpable first: the command runs as the same user, and could otherwise open this process's
descriptors through ``/proc/1/fd`` or read its memory. As pid 1 it cannot be killed from inside the namespace,
and its end ends every process in it. It writes nothing to stdout, which the command inherits: a stdio MCP server's
stdout carries JSON-RPC to the gateway, and nothing else may appear there (a failure to start goes to stderr). It:

1. binds a loopback TCP listener at each relayed ``host:port`` (the proxy's and the gateway's own
   addresses, so the harness's URLs stay as they are), before the harness exists: no start-up race;
2. sets the resource limits (processes, memory, CPU seconds, file size, no core files), inherited by all;
3. forks the command (``execvp`` of the launch's argv, with the environment cut to ``keep`` when given) and relays
   each accepted connection to the unix socket its caller bound into the sandbox for that endpoint (one thread
   pair per connection);
4. reaps every orphan the command leaves (it is their init) and exits with the command's status once it ends.

SPEC_JSON: ``{"relay": [[host, port, socket_path], ...], "limits": {"nproc": N, "data": BYTES, "cpu": S,
"fsize": BYTES},
"argv": [...], "unset": [env names], "keep": [env names]}``; a limit of 0 is no limit; without ``keep`` the
command gets this process's environment less ``unset``, with it only the variables ``keep`` names.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sys
import threading
from typing import Any

LIMITS = {
    "nproc": resource.RLIMIT_NPROC,
    "data": resource.RLIMIT_DATA,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
}
CHUNK = 65536


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(128)
    return server


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def _serve(server: socket.socket, path: str) -> None:
    """Accept forever; each client is joined to a fresh connection to the endpoint's unix socket."""
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue

        def close_both(c: socket.socket = client, u: socket.socket = upstream) -> None:
            c.close()
            u.close()

        done = threading.Barrier(2, action=close_both)

        def pipe(a: socket.socket, b: socket.socket, barrier: threading.Barrier = done) -> None:
            _pump(a, b)
            barrier.wait()

        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()


def _set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        if value > 0:
            resource.setrlimit(LIMITS[name], (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _set_dumpable(flag: bool) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, int(flag), 0, 0, 0)  # PR_SET_DUMPABLE


def main(spec: dict[str, Any]) -> int:
    _set_dumpable(False)
    servers = [(_listen(host, int(port)), path) for host, port, path in spec["relay"]]
    _set_limits(spec.get("limits") or {})
    argv = spec["argv"]
    for name in spec.get("unset") or []:
        os.environ.pop(name, None)
    if "keep" in spec:  # exactly the launch's variables: none of what the caller's client library added
        keep = set(spec["keep"])
        for name in [n for n in os.environ if n not in keep]:
            os.environ.pop(name, None)
    pid = os.fork()  # before any thread starts
    if pid == 0:
        for server, _ in servers:
            server.close()
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"cannot start {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        os._exit(127)
    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # the harness already exited (and was reaped): its status is what we report
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # pass a stop on to the harness, then report it
        signal.signal(sig, forward)
    for server, path in servers:
        threading.Thread(target=_serve, args=(server, path), daemon=True).start()
    while True:  # the harness's end, reaping orphans on the way
        try:
            ended, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        if ended == pid:
            break
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(json.loads(sys.argv[1])))
