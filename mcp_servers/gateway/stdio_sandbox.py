"""Each rollout's third-party stdio MCP servers run in a bubblewrap sandbox of their own (``rollwire.sandbox``).

A stdio server is code others wrote, and a rollout's tool calls reach it: a path-traversal or exec bug there would
otherwise act with the gateway's own access (the store, the operator's state, the home folder). So each server
of each rollout runs like a harness does under the local runtime:

- an allowlist root: the system trees, this interpreter and its installation, rollwire's packages (minus the task
  suites), and the server's command with what it needs (its folder, its real file's, its venv or npm package, the
  interpreter its ``#!`` line names) and each file its arguments name by absolute path, all read-only;
- its folder ``<root>/<rollout>/<server>`` (its cwd and ``HOME``) and its own ``/tmp`` (a fresh folder of the
  gateway's, removed when the server stops) are the only writable places; the rollouts root (every other rollout's and
  server's folder), the store's folder, the suites and ``sandbox_hidden`` are covered where a shown folder holds
  them;
- no network (an empty network namespace: loopback only) unless its config says ``"network": true``: then it
  keeps the host's, the gateway's loopback services included, which is the config's choice;
- the seccomp filter, its own user, pid, ipc and uts namespaces, no capabilities, rlimits on processes and memory;
- exactly this environment: ``PATH`` and the locale from the gateway's, ``HOME`` (its folder), then its config's
  ``env``; nothing else of the gateway's (the MCP SDK adds ``USER``, ``SHELL``... on its own; ``sandbox_init``
  drops them);
- the standard streams passed through: bwrap and ``sandbox_init`` keep them and write nothing to stdout, so the
  MCP client reads the server's JSON-RPC as it wrote it.

The SDK starts the process and passes it no descriptor, so bwrap's ``--seccomp FD`` reads the filter from a file
that ``/bin/sh`` opens on that descriptor before it execs bwrap (written once, in the gateway's private folder).
With the sandbox off (``ROLLWIRE_MCP__GATEWAY__SANDBOX=false``) a server runs as the gateway's user, in its folder,
with the same environment (plus what the SDK adds); where no sandbox can be made, a stdio server is refused with
one line that names that switch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp.client.stdio import StdioServerParameters

from rollwire import sandbox
from rollwire.errors import UpstreamError
from rollwire.mcp_servers.server_config import UpstreamSpec
from rollwire.mcp_servers.tasks.loader import SUITES_DIR
from rollwire.sandbox import seccomp
from rollwire.settings import GatewaySettings

BASIC_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ")
"""What a stdio server gets of the gateway's environment (besides ``HOME``, its own folder)."""
SECCOMP_FD = 9
UNAVAILABLE_HINT = (
    "turn the gateway's sandbox off with ROLLWIRE_MCP__GATEWAY__SANDBOX=false to run stdio MCP servers with the "
    "gateway's full access"
)
WHAT = "stdio MCP servers"


def require(settings: GatewaySettings) -> str:
    """bwrap's path; SandboxUnavailable (one line with the way out) where no sandbox can be made."""
    return sandbox.require(settings.bwrap_path, what=WHAT, hint=UNAVAILABLE_HINT)


def server_env(spec: UpstreamSpec, folder: Path, host_env: Mapping[str, str]) -> dict[str, str]:
    """A stdio server's whole environment: the basics of the gateway's, ``HOME`` its folder, then its config's."""
    env = {name: host_env[name] for name in BASIC_ENV if name in host_env}
    return {**env, "HOME": str(folder), **dict(spec.env)}


@dataclass(frozen=True)
class StdioLaunch:
    """How the MCP client starts one server, and what to remove once it has stopped."""

    params: StdioServerParameters
    cleanup: Callable[[], None]


def _nothing() -> None:
    return None


class StdioSandbox:
    """What the gateway's stdio servers share: the switch, bwrap, the filter's file, the folders to hide."""

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        root: Path,
        hidden: Sequence[Path] = (),
        host_env: Mapping[str, str] | None = None,
    ) -> None:
        """``root``: the rollouts' folders (hidden: a server sees its own only). ``hidden``: state folders (the
        store's). ``host_env``: the gateway's environment (default: this process's)."""
        self._settings = settings
        self._root = root
        self._host_env = dict(os.environ if host_env is None else host_env)
        self._private: Path | None = None
        self._hidden: list[Path] = [SUITES_DIR, root, *hidden, *sandbox.state_folders(settings.sandbox_hidden)]
        self._limits = sandbox.SandboxLimits(
            processes=settings.sandbox_max_processes, memory_bytes=settings.sandbox_max_memory_mb << 20
        )

    def open(self) -> None:
        """Make the gateway's own folder for its servers' tmp folders and the filter's file (before any start)."""
        if self._private is None and self._settings.sandbox:
            self._private = Path(tempfile.mkdtemp(prefix="rollwire-gateway-sandbox-"))
            self._hidden.append(self._private)
            program = seccomp.program()
            if program is not None:
                (self._private / "seccomp.bpf").write_bytes(program)

    def launch(self, spec: UpstreamSpec, folder: Path, rollout_id: str) -> StdioLaunch:
        """How to start ``spec`` (placeholders filled) for a rollout, in its ``folder``. Blocking (the first call
        probes bwrap): run it in a worker thread."""
        env = server_env(spec, folder, self._host_env)
        if not self._settings.sandbox:
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=env, cwd=folder)
            return StdioLaunch(params, _nothing)
        bwrap = require(self._settings)
        _check_command(spec.command, env, folder)
        private = self._private
        if private is None:
            raise UpstreamError("the gateway's stdio sandbox is not open (no lifespan)")
        tmp = Path(tempfile.mkdtemp(prefix=f"{rollout_id}.{spec.name}.", dir=private))  # one per start
        bpf = private / "seccomp.bpf"
        named = [spec.command, *(arg for arg in spec.args if arg.startswith("/"))]
        command = sandbox.bwrap_command(
            bwrap, argv=[spec.command, *spec.args], env=env, workspace=folder, tmp=tmp, sockets={},
            hidden=self._hidden, limits=self._limits, seccomp_fd=SECCOMP_FD if bpf.exists() else None,
            commands=named, network=spec.network, exact_env=True,
        )  # fmt: skip
        if bpf.exists():  # sh opens the filter on the descriptor bwrap reads it from, then becomes bwrap
            command = ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', str(bpf), *command]

        def cleanup() -> None:
            shutil.rmtree(tmp, ignore_errors=True)

        return StdioLaunch(StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=folder), cleanup)

    def close(self) -> None:
        """Remove the private folder (call once every server has stopped)."""
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None


def _check_command(command: str, env: Mapping[str, str], cwd: Path) -> None:
    """The error a plain start would give for a missing command, before a sandbox is built around it."""
    path = (cwd / command) if "/" in command else shutil.which(command, path=env.get("PATH"))
    if path is None or not os.access(path, os.X_OK):
        raise UpstreamError(f"cannot start {command!r}: no such executable")


__all__ = ["BASIC_ENV", "StdioLaunch", "StdioSandbox", "require", "server_env"]
