"""The seccomp filter of a sandbox (a rollout's harness, a rollout's stdio MCP server): kernel surfaces a harness
never needs, refused with EPERM.

Namespaces, caps and mounts keep a rollout away from the host's files and network; the kernel's own interfaces
are the other way out. The filter refuses what a rollout could use to reach its platform's processes or the
kernel's shared state, or to keep something alive for the next rollout in a recycled sandbox:

- tracing and reading other processes (``ptrace``, ``process_vm_readv/writev``): the warm pool's fork server
  and the sandbox's init live beside the rollout;
- new namespaces (``unshare``, ``setns``, ``clone``/``clone3`` with a namespace flag) and mounting (classic and
  the new mount API): a user namespace gives every capability inside it, and with it mounts and more kernel
  code to attack;
- kernel keyrings (``keyctl``, ``add_key``, ``request_key``), ``bpf``, ``perf_event_open``, ``userfaultfd``,
  ``io_uring``, modules, kexec, ``open_by_handle_at``;
- System V IPC objects and POSIX message queues (``shmget``, ``msgget``, ``semget``, ``mq_open``): they outlive
  the processes that made them and the host cannot list them from outside, so a recycled slot would hand them
  to the next rollout. POSIX shared memory lives in ``/dev/shm``, which is emptied between rollouts.

``clone3`` answers ENOSYS (its flags sit in memory a filter cannot read), so libc falls back to ``clone``, whose
flags the filter checks. ``nested=True`` keeps namespaces and mounts for a harness that builds its own sandbox
inside this one (Codex CLI at its defaults runs every command in a bubblewrap sandbox of its own): the kernel
confines those mounts to the nested namespace, and the rest of the list still holds.

The program is classic BPF for x86_64, the architecture CI and the documented machines run; on another
architecture ``program`` returns None and the sandbox runs without a filter (the runtime says so once).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import platform
import struct

logger = logging.getLogger(__name__)

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
NR_OFFSET, ARCH_OFFSET, ARG0_LOW_OFFSET = 0, 4, 16
NAMESPACE_FLAGS = 0x7E020080
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME (0x80)."""

ALWAYS_DENIED = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
    "keyctl": 250, "add_key": 248, "request_key": 249, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 246, "kexec_file_load": 320,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169, "quotactl": 179,
    "shmget": 29, "msgget": 68, "semget": 64, "mq_open": 240, "iopl": 172, "ioperm": 173,
}  # fmt: skip
NAMESPACE_DENIED = {
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "open_tree": 428, "move_mount": 429, "mount_setattr": 442,
}  # fmt: skip
CLONE, CLONE3 = 56, 435


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


@functools.cache
def program(nested: bool = False) -> bytes | None:
    """The filter as bwrap's ``--seccomp FD`` reads it (``struct sock_filter`` array); None off x86_64."""
    if platform.machine() != "x86_64":
        logger.warning("no seccomp filter for %s: sandboxes run without one", platform.machine())
        return None
    deny = RET_ERRNO | errno.EPERM
    denied = dict(ALWAYS_DENIED) if nested else {**ALWAYS_DENIED, **NAMESPACE_DENIED}
    ops = [
        _op(LD_W_ABS, ARCH_OFFSET),
        _op(JEQ_K, AUDIT_ARCH_X86_64, jt=1),
        _op(RET_K, RET_KILL_PROCESS),  # another ABI's numbers mean other calls: never allowed
        _op(LD_W_ABS, NR_OFFSET),
        _op(JGE_K, X32_SYSCALL_BIT, jf=1),
        _op(RET_K, RET_KILL_PROCESS),  # the x32 ABI reaches the same calls under other numbers
    ]
    for number in sorted(denied.values()):
        ops += [_op(JEQ_K, number, jf=1), _op(RET_K, deny)]
    ops += [_op(JEQ_K, CLONE3, jf=1), _op(RET_K, RET_ERRNO | errno.ENOSYS)]
    if not nested:
        ops += [
            _op(JEQ_K, CLONE, jf=3),
            _op(LD_W_ABS, ARG0_LOW_OFFSET),
            _op(JSET_K, NAMESPACE_FLAGS, jf=1),
            _op(RET_K, deny),
        ]
    ops.append(_op(RET_K, RET_ALLOW))
    return b"".join(ops)


def open_program(nested: bool = False) -> int | None:
    """A fresh descriptor of the filter for one bwrap to read (bwrap reads to the end; each start needs its own
    offset), or None where there is no filter. The caller closes it once bwrap has started."""
    data = program(nested)
    if data is None:
        return None
    fd = os.memfd_create("rollwire-seccomp", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


__all__ = ["open_program", "program"]
