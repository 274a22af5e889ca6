"""The warm pool under the sandbox: sandboxes made ahead, each a fork server with warm imports, one rollout at a time.

A sandbox cannot be entered by a process forked outside it, and a process exec'd into bwrap has lost its
warm imports; so the pool itself runs inside: a *slot* is one rollout-shaped folder (workspace, tmp, net),
its endpoint relay, and a fork server (``warm_pool.WarmPool`` with a bwrap ``wrap``) that has imported the
preloads inside that slot's own sandbox. A pooled launch takes a ready slot, which becomes the rollout's
folder (renamed to ``rollwire-<rollout id>``: the sandbox's mounts follow the folders, so inside it the
workspace keeps the slot's path), and the fork server forks the harness there. ``spares`` slots are kept
ready in the background, so the sandbox and the imports are paid for before the rollout starts. A slot whose
rollout exited by itself is recycled: its fork server kills every process left in its pid namespace and empties
/dev/shm, the host checks that only the server and the sandbox's init are left in that namespace, empties its
workspace and tmp (every other path in the sandbox is read-only, and System V IPC and message queues are refused
by its seccomp filter), and the next rollout forks from the same warm server (one import per slot, not per
rollout); a timed-out, lost or kept (``keep_workspaces``) rollout's slot is discarded.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from rollwire import sandbox
from rollwire.orchestrator.runtimes.local.relay import EndpointRelay
from rollwire.orchestrator.runtimes.local.warm_pool import Enclosure, PoolUnavailable, WarmPool
from rollwire.sandbox import seccomp

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Slot:
    """A ready sandbox; ``inside`` is the folder's path as the sandbox sees it (its name when it was made)."""

    folder: Path
    inside: Path
    endpoints: tuple[sandbox.Endpoint, ...]
    relay: EndpointRelay
    pool: WarmPool
    mounts: list[Path] = field(default_factory=list)
    """Mount points the sandbox made inside its /tmp (the slot's tmp folder): folders the host must not remove."""

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.pool.__aexit__(None, None, None)
        self.relay.close()


class SandboxPool:
    """Ready slots per endpoint set; ``take`` hands one out (made now if none is ready) and refills behind it."""

    def __init__(
        self,
        *,
        bwrap: str,
        preload: Sequence[str],
        env: Mapping[str, str],
        root: Path,
        hidden: Sequence[Path],
        limits: sandbox.SandboxLimits,
        spares: int,
        group: anyio.abc.TaskGroup,
    ) -> None:
        self._bwrap, self._preload, self._env, self._root = bwrap, list(preload), dict(env), root
        self._hidden, self._limits, self._spares, self._group = list(hidden), limits, max(0, spares), group
        self._ready: list[Slot] = []
        self._making = 0
        self._unavailable: str | None = None

    async def take(self, endpoints: Sequence[sandbox.Endpoint]) -> Slot:
        """A slot for these endpoints; PoolUnavailable when slots cannot be made (the caller starts cold)."""
        if self._unavailable is not None:
            raise PoolUnavailable(self._unavailable)
        wanted = tuple(endpoints)
        for slot in [s for s in self._ready if s.endpoints != wanted]:  # another stack's: not coming back
            self._ready.remove(slot)
            await self._discard(slot)
        slot = self._ready.pop(0) if self._ready else await self._make(wanted)
        self._refill(wanted)
        return slot

    def _refill(self, endpoints: tuple[sandbox.Endpoint, ...]) -> None:
        while self._unavailable is None and len(self._ready) + self._making < self._spares:
            self._making += 1
            self._group.start_soon(self._make_spare, endpoints)

    async def _make_spare(self, endpoints: tuple[sandbox.Endpoint, ...]) -> None:
        try:
            slot = await self._make(endpoints)
        except PoolUnavailable:
            return
        finally:
            self._making -= 1
        if self._unavailable is not None:  # closed while it was being made
            await self._discard(slot)
        else:
            self._ready.append(slot)

    async def _make(self, endpoints: tuple[sandbox.Endpoint, ...]) -> Slot:
        folder = self._root / f"rollwire-slot-{secrets.token_hex(8)}"
        workspace, log = folder / "workspace", folder / "output.log"
        for sub in ("workspace", "tmp", "net"):
            (folder / sub).mkdir(parents=True)
        log.touch()
        sockets = {endpoint: folder / "net" / f"{i}.sock" for i, endpoint in enumerate(endpoints)}
        relay = EndpointRelay()
        try:
            await relay.open(self._group, sockets)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(folder, ignore_errors=True))
            raise

        mounts: list[Path] = []
        control = folder / "net" / "control.sock"

        def wrap(command: list[str]) -> tuple[list[str], list[int]]:
            fd = seccomp.open_program()
            full = sandbox.bwrap_command(
                self._bwrap, argv=command, env=self._env, workspace=workspace, tmp=folder / "tmp", sockets=sockets,
                hidden=self._hidden, limits=self._limits, writable=[log], control=control, seccomp_fd=fd,
            )  # fmt: skip
            mounts.extend(sandbox.mount_points(full, under=Path("/tmp")))
            return full, [] if fd is None else [fd]

        enclosure = Enclosure(wrap, control, sandbox.CONTROL_SOCKET)
        pool = WarmPool(self._preload, self._env, workspace, enclosure=enclosure, group=self._group)
        slot = Slot(folder, folder, endpoints, relay, pool, mounts)
        try:
            await pool.start()
        except BaseException as exc:
            if isinstance(exc, PoolUnavailable) and self._unavailable is None:
                logger.warning("sandboxed warm pool off (%s); pooled launches start cold in their sandbox", exc)
                self._unavailable = str(exc)
            with anyio.CancelScope(shield=True):
                await self._discard(slot)
            raise
        return slot

    async def recycle(self, slot: Slot, folder: Path) -> None:
        """A slot whose rollout ended: its server ends what the rollout left, the host empties its folders (the
        mounts stay), and it is ready for the next rollout with the same endpoints; else it is discarded."""
        slot.folder = folder
        if self._unavailable is not None or not await slot.pool.reset() or not await _only_the_server_left(slot):
            logger.debug("sandbox slot not reset; discarded")
            await self._discard(slot)
            return
        fresh = self._root / f"rollwire-slot-{secrets.token_hex(8)}"
        # their mount points in the sandbox's /tmp, and those of what it shows again from the host's /tmp
        keep = [slot.inside / "workspace", slot.inside / "output.log", *slot.mounts]
        try:
            await anyio.to_thread.run_sync(_empty_folder, folder, keep, fresh)
        except OSError as exc:
            logger.debug("could not recycle a sandbox slot: %s", exc)
            await self._discard(slot)
            return
        slot.folder = fresh
        if self._unavailable is not None:  # closed meanwhile
            await self._discard(slot)
        else:  # new slots are made only while fewer than ``spares`` are ready: slots in use come back here
            self._ready.append(slot)

    async def _discard(self, slot: Slot) -> None:
        with anyio.CancelScope(shield=True):  # also while the runtime closes: no slot folder is left behind
            await slot.close()
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(slot.folder, ignore_errors=True))

    async def aclose(self) -> None:
        self._unavailable = self._unavailable or "the pool is closed"
        while self._ready:
            await self._discard(self._ready.pop())


async def _only_the_server_left(slot: Slot) -> bool:
    """Checked from the host after the server's own reset: the slot's pid namespace holds its init and the fork
    server and nothing else (the server is in the sandbox with what it swept, so its word is not enough)."""
    pid = slot.pool.server_pid
    return pid is not None and await anyio.to_thread.run_sync(lambda: len(namespace_members(pid)) == 2)


def namespace_members(bwrap_pid: int) -> list[int]:
    """Host pids of every process in the pid namespace whose init is ``bwrap_pid``'s child (the sandbox's pid 1)."""
    try:
        init = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()[0]
        namespace = os.stat(f"/proc/{init}/ns/pid").st_ino
    except (OSError, IndexError):
        return []
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/pid").st_ino == namespace:
                    members.append(int(entry))
            except OSError:  # ended meanwhile, or not ours to look at
                continue
    return members


def _empty_folder(folder: Path, keep_inside: list[Path], rename_to: Path) -> None:
    """Empty a slot's workspace, tmp and log in place, then rename the folder. Mount points stay: removing a
    folder that is a mount point in the sandbox would detach the sandbox's mount of the workspace."""
    for entry in (folder / "workspace").iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    keep = [folder / "tmp" / path.relative_to("/tmp") for path in keep_inside if path.is_relative_to("/tmp")]
    _empty_except(folder / "tmp", keep)
    (folder / "output.log").write_bytes(b"")
    folder.rename(rename_to)


def _empty_except(root: Path, keep: list[Path]) -> None:
    for entry in root.iterdir():
        if entry in keep:
            continue
        if any(path.is_relative_to(entry) for path in keep):
            _empty_except(entry, keep)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


__all__ = ["SandboxPool", "Slot", "namespace_members"]
