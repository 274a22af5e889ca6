"""``rollwire proxy --workers 2`` as a real process, handed its bound listening sockets the way ``rollwire up``
hands them (no window in which another process takes a port), for the tests that need its worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rollwire.app.serving import listening_socket


@dataclass
class CliWorkers:
    proc: subprocess.Popen[str]
    port: int
    admin_port: int
    started: float
    """When the workers were forked (``time.monotonic``): one that dies sooner than ``EARLY_EXIT_S`` after stops the
    proxy instead of being replaced."""
    output: str = ""
    """Everything the proxy printed after its workers started, once it has stopped."""

    def pids(self) -> list[int]:
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return sorted(int(p) for p in path.read_text().split())


@contextmanager
def cli_workers(upstream: str, store_url: str, model_dir: Path, *, reuse_port: bool = False) -> Iterator[CliWorkers]:
    """The proxy with two workers, yielded once it says it starts them; SIGTERM after (its workers are killed
    outright if it hangs). ``reuse_port``: the socket handed down opens a SO_REUSEPORT group."""
    listener = listening_socket("127.0.0.1", 0, reuse_port=reuse_port)
    admin_listener = listening_socket("127.0.0.1", 0)
    port, admin_port = listener.getsockname()[1], admin_listener.getsockname()[1]
    argv = [sys.executable, "-m", "rollwire.app.cli", "proxy", "--fd", str(listener.fileno()), "--port", str(port)]
    argv += ["--admin-fd", str(admin_listener.fileno()), "--admin-port", str(admin_port)]
    argv += ["--upstream", upstream, "--db", store_url, "--model", str(model_dir), "--workers", "2"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "ROLLWIRE_PROXY__OPERATOR_KEY": "k"},
        pass_fds=[listener.fileno(), admin_listener.fileno()],
    )  # fmt: skip
    listener.close()  # the proxy holds them now
    admin_listener.close()
    assert proc.stdout is not None
    workers = CliWorkers(proc, port, admin_port, 0.0)
    try:
        for line in proc.stdout:
            if line.startswith("  workers: 2"):
                break
        else:
            raise AssertionError(f"proxy exited before it started its workers (rc {proc.wait()})")
        workers.started = time.monotonic()  # "workers: 2" comes just before the forks
        yield workers
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            workers.output, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for pid in workers.pids():
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.communicate()
            raise


__all__ = ["CliWorkers", "cli_workers"]
