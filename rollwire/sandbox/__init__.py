"""Sandboxes built with bubblewrap, shared by what runs code a policy in training can steer: the orchestrator's local
runtime (each rollout's harness) and the MCP gateway (each rollout's third-party stdio MCP servers).

- ``bwrap``: the command line of one sandbox (an allowlist root, namespaces, limits), ``probe``/``require``;
- ``seccomp``: the filter passed to bwrap as ``--seccomp FD``;
- ``sandbox_init.py``: the sandbox's pid 1 (standard library only, run by path, never imported).

Runtime-independent: nothing here knows the orchestrator or the gateway; each passes what it must hide.
"""

from __future__ import annotations

from rollwire.sandbox.bwrap import (
    CONTROL_SOCKET,
    INIT_SCRIPT,
    ROOT_RUN_UID,
    SOCKET_DIR,
    Endpoint,
    SandboxLimits,
    SandboxUnavailable,
    bwrap_command,
    cpu_seconds,
    mount_points,
    probe,
    relayed_endpoints,
    require,
    state_folders,
)

__all__ = [
    "CONTROL_SOCKET",
    "INIT_SCRIPT",
    "ROOT_RUN_UID",
    "SOCKET_DIR",
    "Endpoint",
    "SandboxLimits",
    "SandboxUnavailable",
    "bwrap_command",
    "cpu_seconds",
    "mount_points",
    "probe",
    "relayed_endpoints",
    "require",
    "state_folders",
]
