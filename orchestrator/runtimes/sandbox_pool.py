"""The warm pool under the sandbox: sandboxes made ahead, each a fork server with warm imports, one per rollout.

A sandbox cannot be entered by a process forked outside it, and a process exec'd into bwrap has lost its
warm imports; so the pool itself runs inside: a *slot* is one rollout-shaped folder (workspace, tmp, net),
its endpoint relay, and a fork server (``warm_pool.WarmPool`` with a bwrap ``wrap``) that has imported the
preloads inside that slot's own sandbox. A pooled launch takes a ready slot, which becomes the rollout's
folder (renamed to ``rollwire-<rollout id>``: the sandbox's mounts follow the folders, so inside it the
workspace keeps the slot's path), and the fork server forks the harness there. ``spares`` slots are kept
ready in the background, so the sandbox and the imports are paid for before the rollout starts.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from rollwire.orchestrator.runtimes import sandbox
from rollwire.orchestrator.runtimes.relay import EndpointRelay
from rollwire.orchestrator.runtimes.warm_pool import PoolUnavailable, WarmPool

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Slot:
    """A ready sandbox; ``inside`` is the folder's path as the sandbox sees it (its name when it was made)."""

    folder: Path
    inside: Path
    endpoints: tuple[sandbox.Endpoint, ...]
    relay: EndpointRelay
    pool: WarmPool

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
        await relay.open(self._group, sockets)

        def wrap(command: list[str]) -> list[str]:
            return sandbox.bwrap_command(
                self._bwrap, argv=command, env=self._env, workspace=workspace, tmp=folder / "tmp", sockets=sockets,
                hidden=self._hidden, limits=self._limits, writable=[log],
            )  # fmt: skip

        pool = WarmPool(self._preload, self._env, workspace, wrap=wrap, group=self._group)
        slot = Slot(folder, folder, endpoints, relay, pool)
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

    async def _discard(self, slot: Slot) -> None:
        await slot.close()
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(slot.folder, ignore_errors=True))

    async def aclose(self) -> None:
        self._unavailable = self._unavailable or "the pool is closed"
        while self._ready:
            await self._discard(self._ready.pop())


__all__ = ["SandboxPool", "Slot"]
