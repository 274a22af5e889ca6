"""The machine's floor under a proxied call: what one loopback round trip costs, on one core and across two.

    python bench/loopback.py [--round-trips 20000] [--bytes 300]

A proxy at concurrency 1 makes two round trips a call that a direct call does not (client -> proxy -> upstream
and back). ``bench/proxy.py`` pins the proxy to one core and its stub and load generator to another, so both
cross cores, while its "direct" row stays on one core. Here two processes ping-pong ``--bytes`` over a
loopback TCP connection (and over a Unix socket pair, for comparison), pinned to one core, then to two. The
table gives the wall time of a round trip and the sender's CPU time for it (user + system, from getrusage),
and how many times the one-core figure each is. On the two-core virtual machine this was written on, the
two-core rows took ~9x the CPU and ~12x the wall time of the one-core rows: waking a process on the other core
most likely takes an interrupt between cores, which the hypervisor handles.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    layout: str
    transport: str
    round_trip_us: float
    user_us: float
    system_us: float

    @property
    def cpu_us(self) -> float:
        return self.user_us + self.system_us


def _pair(transport: str) -> tuple[socket.socket, socket.socket]:
    if transport == "unix":
        return socket.socketpair(socket.AF_UNIX)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    for end in (near, far):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return near, far


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise ConnectionError("the peer closed the connection")
        data += more
    return data


def measure(layout: str, transport: str, cores: tuple[int, int], round_trips: int, size: int) -> Row:
    """``round_trips`` exchanges of ``size`` bytes: this process on ``cores[0]``, a forked echo on ``cores[1]``."""
    near, far = _pair(transport)
    pid = os.fork()
    if pid == 0:  # the echo: answer each message with itself, then exit 0
        code = 1
        try:
            near.close()
            os.sched_setaffinity(0, {cores[1]})
            for _ in range(round_trips + 1):
                far.sendall(_recv_exactly(far, size))
            code = 0
        finally:
            os._exit(code)
    far.close()
    failed: OSError | None = None
    try:
        os.sched_setaffinity(0, {cores[0]})
        message = b"x" * size
        near.sendall(message)  # one untimed exchange: the echo is pinned and running
        _recv_exactly(near, size)
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(round_trips):
            near.sendall(message)
            _recv_exactly(near, size)
        wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    except OSError as exc:
        failed = exc
    finally:
        near.close()
        _, status = os.waitpid(pid, 0)
    if failed is not None or os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the {layout} {transport} row failed: {failed or 'the echo process exited with an error'}")
    per = 1e6 / round_trips
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return Row(layout, transport, wall * per, user * per, system * per)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=20_000, help="exchanges per row (default 20000)")
    parser.add_argument("--bytes", type=int, default=300, help="size of each message (default 300)")
    args = parser.parse_args(argv)
    if args.round_trips < 1 or args.bytes < 1:
        parser.error("--round-trips and --bytes must be at least 1")
    allowed = sorted(os.sched_getaffinity(0))
    layouts = [("one core", (allowed[0], allowed[0]))]
    if len(allowed) > 1:
        layouts.append(("two cores", (allowed[1], allowed[0])))
    else:
        print("only one core is allowed to this process: the two-core rows are left out", file=sys.stderr)
    original = os.sched_getaffinity(0)
    rows: list[Row] = []
    try:
        for transport in ("tcp", "unix"):
            for layout, cores in layouts:
                rows.append(measure(layout, transport, cores, args.round_trips, args.bytes))
    finally:
        os.sched_setaffinity(0, original)
    print(f"{'layout':<10} {'transport':<9} {'round trip us':>13} {'user us':>8} {'system us':>9} {'cpu us':>7} "
          f"{'x wall':>7} {'x cpu':>6}")  # fmt: skip
    for row in rows:
        base = next(r for r in rows if r.transport == row.transport and r.layout == "one core")
        print(f"{row.layout:<10} {row.transport:<9} {row.round_trip_us:>13.1f} {row.user_us:>8.1f} "
              f"{row.system_us:>9.1f} {row.cpu_us:>7.1f} {row.round_trip_us / base.round_trip_us:>7.1f} "
              f"{row.cpu_us / max(base.cpu_us, 1e-9):>6.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
