"""How the local runtime starts a rollout inside its sandbox: cold (bwrap around the launch) or from a ready slot.

``SandboxLauncher`` owns what sandboxed launches share (the bwrap path, the folders to hide, the limits, the
slot pool); each start returns the process the runtime supervises (its pid leads the process group the
runtime kills; killing it ends the whole sandbox) and a ``release`` to call when the rollout is over.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from rollwire import sandbox
from rollwire.errors import InvalidRequest
from rollwire.orchestrator.runtimes.base import RolloutJob
from rollwire.orchestrator.runtimes.local.relay import EndpointRelay
from rollwire.orchestrator.runtimes.local.sandbox_pool import SandboxPool
from rollwire.orchestrator.runtimes.local.warm_pool import PooledProcess, PoolUnavailable, poolable
from rollwire.sandbox import seccomp
from rollwire.settings import OrchestratorSettings

Opener = Callable[[list[str], dict[str, str], Path, Path, Sequence[int]], Awaitable[anyio.abc.Process]]
"""The runtime's plain start: (argv, env, cwd, log, descriptors to pass) -> process in its own session."""


@dataclass(slots=True)
class Sandboxed:
    process: anyio.abc.Process | PooledProcess
    release: Callable[[], Awaitable[None]]
    workspace_inside: Path
    """The workspace's path as the harness sees it (a pooled slot keeps the name it was made with)."""
    recyclable: bool = False
    """A pooled slot: once its harness exited by itself, ``release`` recycles the sandbox (do not kill it)."""


class SandboxLauncher:
    def __init__(
        self,
        settings: OrchestratorSettings,
        *,
        bwrap: str,
        hidden: Sequence[Path],
        host_env: Mapping[str, str],
        root: Path,
        group: anyio.abc.TaskGroup,
    ) -> None:
        self._settings, self._bwrap, self._hidden, self._group = settings, bwrap, list(hidden), group
        self._pool: SandboxPool | None = None
        if settings.warm_pool:
            self._pool = SandboxPool(
                bwrap=bwrap, preload=settings.warm_preload, env=host_env, root=root, hidden=self._hidden,
                limits=self.limits(settings.deadline_s), spares=settings.warm_spares, group=group,
            )  # fmt: skip

    def limits(self, deadline_s: float) -> sandbox.SandboxLimits:
        return sandbox.SandboxLimits(
            processes=self._settings.sandbox_max_processes,
            memory_bytes=self._settings.sandbox_max_memory_mb << 20,
            cpu_s=sandbox.cpu_seconds(deadline_s),
            file_bytes=self._settings.max_disk_mb << 20,
        )

    async def pooled(
        self,
        job: RolloutJob,
        folder: Path,
        write_files: Callable[[Path], None],
        env_for: Callable[[Path], dict[str, str]],
    ) -> Sandboxed | None:
        """Start from a ready slot (renamed to ``folder``), or None when the launch or the pool cannot.
        ``env_for(workspace)``: the harness's whole environment for a workspace path."""
        if self._pool is None or not poolable(job.launch.argv) or job.launch.nested_sandbox:
            return None
        try:
            slot = await self._pool.take(sandbox.relayed_endpoints(job.endpoints))
        except PoolUnavailable:
            return None

        def adopt() -> None:
            if folder.exists():  # a leftover of an earlier, interrupted start of the same rollout
                shutil.rmtree(folder)
            slot.folder.rename(folder)
            slot.folder = folder
            write_files(folder / "workspace")

        try:
            await anyio.to_thread.run_sync(adopt)
            inside = slot.inside / "workspace"
            child = await slot.pool.spawn(list(job.launch.argv), env_for(inside), inside, slot.inside / "output.log")
        except BaseException as exc:
            await slot.close()
            if isinstance(exc, PoolUnavailable):
                return None
            raise
        pool = self._pool

        async def release() -> None:
            if child.returncode is None or child.lost or self._settings.keep_workspaces:
                await slot.close()  # killed, lost, or its workspace is kept: the sandbox goes with it
            else:
                await pool.recycle(slot, folder)

        return Sandboxed(child, release, inside, recyclable=True)

    async def cold(self, job: RolloutJob, env: dict[str, str], folder: Path, open_process: Opener) -> Sandboxed:
        """bwrap around ``sandbox_init`` around the launch; the job's endpoints relayed through unix sockets."""
        workspace, argv = folder / "workspace", list(job.launch.argv)
        _check_command(argv[0], env, workspace)
        (folder / "tmp").mkdir()
        (folder / "net").mkdir()
        sockets = {e: folder / "net" / f"{i}.sock" for i, e in enumerate(sandbox.relayed_endpoints(job.endpoints))}
        relay = EndpointRelay()
        await relay.open(self._group, sockets)
        fd = seccomp.open_program(nested=job.launch.nested_sandbox)
        command = sandbox.bwrap_command(
            self._bwrap, argv=argv, env=env, workspace=workspace, tmp=folder / "tmp", sockets=sockets,
            hidden=self._hidden, limits=self.limits(job.deadline_s), seccomp_fd=fd,
        )  # fmt: skip

        async def release() -> None:
            relay.close()

        try:
            process = await open_process(command, env, workspace, folder / "output.log", () if fd is None else (fd,))
        except BaseException:
            relay.close()
            raise
        finally:
            if fd is not None:
                os.close(fd)
        return Sandboxed(process, release, workspace)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()


def _check_command(command: str, env: Mapping[str, str], cwd: Path) -> None:
    """The error a plain start would give for a missing command, before a sandbox is built around it."""
    path = (cwd / command) if "/" in command else shutil.which(command, path=env.get("PATH"))
    if path is None or not os.access(path, os.X_OK):
        raise InvalidRequest(f"cannot start {command!r}: No such file or directory", param="argv")


__all__ = ["SandboxLauncher", "Sandboxed"]
