"""Which process holds each open TCP connection to a port, from /proc (Linux): how a bench row or a test sees the
kernel spread a server's connections over its worker processes."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ESTABLISHED = "01"
"""A connection's state in /proc/net/tcp while both ends have it open."""


def accepted_by(port: int, pids: list[int]) -> dict[int, int]:
    """The process among ``pids`` holding the server end of each open connection to ``port``, by the client's
    port: its socket's inode (/proc/net/tcp) among the process's descriptors (/proc/<pid>/fd)."""
    owner: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):  # a worker gone since
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):  # closed since listed
                    link = os.readlink(fd)
                    if link.startswith("socket:["):
                        owner[int(link[8:-1])] = pid
    found: dict[int, int] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
        if int(local.rsplit(":", 1)[1], 16) == port and state == ESTABLISHED and inode in owner:
            found[int(remote.rsplit(":", 1)[1], 16)] = owner[inode]
    return found


__all__ = ["ESTABLISHED", "accepted_by"]
