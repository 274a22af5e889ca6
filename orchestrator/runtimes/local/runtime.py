"""The local runtime: one process per rollout in its own temp workspace, its whole process group killed at the end.

Each rollout gets ``<root>/<rollout_id>/workspace`` (the harness's cwd and ``HOME``, so harness config
never lands in the user's home) and ``<root>/<rollout_id>/output.log`` (combined stdout/stderr, outside the
workspace). The process leads its own session, so a timeout or the end of the rollout kills its children too.
With ``warm_pool`` on, ``python -m MODULE`` launches are forked from a warm process (``warm_pool``) instead of
started cold; everything above holds for them the same way.

With ``sandbox`` on (the default) each rollout runs under bubblewrap (``rollwire.sandbox``): the host read-only, only
its workspace and ``<folder>/tmp`` writable, network only to the job's proxy and gateway (``relay``). Where no
sandbox can be made, entering the runtime fails with one line saying why, unless the sandbox is turned off.

A rollout's folder is measured while it runs (``max_disk_mb``): one that fills the disk is killed and fails as
the policy's doing, before it takes the host's disk from the store and the other rollouts.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio
import anyio.abc

from rollwire import sandbox
from rollwire.errors import InvalidRequest
from rollwire.harness_adapters.base import WORKSPACE_ENV
from rollwire.mcp_servers.tasks.loader import SUITES_DIR
from rollwire.orchestrator.runtimes.base import Ended, EndKind, Handle, RolloutJob
from rollwire.orchestrator.runtimes.local.sandboxed import SandboxLauncher
from rollwire.orchestrator.runtimes.local.warm_pool import PooledProcess, PoolUnavailable, WarmPool, poolable
from rollwire.rollout_files import RefusedFile, disk_used, read_beneath
from rollwire.settings import OrchestratorSettings

logger = logging.getLogger(__name__)

ROLLOUT_ENV = "ROLLWIRE_ROLLOUT_ID"
PASS_THROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "SYSTEMROOT", "VIRTUAL_ENV")
"""Host variables a harness inherits; everything else comes from the adapter (no host secrets leak in)."""
UNAVAILABLE_HINT = "turn the sandbox off with --no-sandbox (ROLLWIRE_ORCHESTRATOR__SANDBOX=false) to run harnesses with the user's full access"
MAX_ANSWER_BYTES = 64 * 1024
TERM_GRACE_S = 2.0
NAMESPACE_GONE_S = 10.0
DISK_CHECK_S = 1.0
"""How often a running rollout's folder is measured, at least (a slow walk spaces the next one out)."""


@dataclass(frozen=True, slots=True)
class AnswerPath:
    """Where the final answer is: a path the rollout chose the contents of, read relative to its workspace."""

    workspace: Path
    relative: str


@dataclass(slots=True)
class _Proc:
    process: anyio.abc.Process | PooledProcess  # both: pid, returncode, wait()
    folder: Path
    answer_path: AnswerPath
    release: Callable[[], Awaitable[None]] | None = None
    recyclable: bool = False


class LocalRuntime:
    """Subprocess per rollout; ``host_env`` is the parent's environment the CLI passes in (library code reads none)."""

    name = "local"

    def __init__(
        self, settings: OrchestratorSettings, host_env: dict[str, str] | None = None, hidden: Sequence[Path] = ()
    ) -> None:
        """``hidden``: state folders (the store's, the env servers') a sandboxed rollout must not see; the task suites
        (their checker arguments are the answers) are always among them."""
        self._settings = settings
        self._host_env = {k: v for k, v in (host_env or {}).items() if k in PASS_THROUGH_ENV}
        self._root = Path(settings.workspace_root) if settings.workspace_root else Path(tempfile.gettempdir())
        self._procs: dict[str, _Proc] = {}
        self._pool: WarmPool | None = None
        self._hidden = [SUITES_DIR, *hidden, *sandbox.state_folders(settings.sandbox_hidden)]
        self._sandbox: SandboxLauncher | None = None
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        bwrap = None
        if self._settings.sandbox:  # refuse before anything runs: a harness would have the user's full access
            bwrap = await anyio.to_thread.run_sync(
                functools.partial(sandbox.require, self._settings.bwrap_path, what="rollouts", hint=UNAVAILABLE_HINT)
            )
        self._root.mkdir(parents=True, exist_ok=True)
        self._group = await anyio.create_task_group().__aenter__()
        if bwrap is not None:  # the workspace root hides other rollouts' workspaces
            hidden = [*self._hidden, self._root.resolve()]
            self._sandbox = SandboxLauncher(
                self._settings, bwrap=bwrap, hidden=hidden, host_env=self._host_env, root=self._root, group=self._group
            )
        elif self._settings.warm_pool:  # the fork server itself starts on the first pooled launch
            self._pool = await WarmPool(self._settings.warm_preload, self._host_env, self._root).__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):
            for rollout_id in list(self._procs):
                await self.stop(Handle(rollout_id, ""))
        if self._pool is not None:
            await self._pool.__aexit__(exc_type, exc, tb)
            self._pool = None
        if self._sandbox is not None:
            with anyio.CancelScope(shield=True):
                await self._sandbox.aclose()
        if self._group is not None:
            self._group.cancel_scope.cancel()
            await self._group.__aexit__(None, None, None)
            self._group = None

    async def start(self, job: RolloutJob) -> Handle:
        if job.rollout_id in self._procs:
            return Handle(job.rollout_id, str(self._procs[job.rollout_id].process.pid))
        folder = self._root / f"rollwire-{job.rollout_id}"
        workspace = folder / "workspace"
        answer_path = AnswerPath(workspace, job.launch.final_answer_path)

        def env_for(path: Path) -> dict[str, str]:
            env = {**self._host_env, **job.launch.env, WORKSPACE_ENV: str(path), "HOME": str(path)}
            return {**env, ROLLOUT_ENV: job.rollout_id}

        started = None
        if self._sandbox is not None:
            started = await self._sandbox.pooled(job, folder, lambda path: _write_files(path, job), env_for)
        if started is None:
            await anyio.to_thread.run_sync(self._prepare, workspace, job)
        if started is None and self._sandbox is not None:
            started = await self._sandbox.cold(job, env_for(workspace), folder, self._open)
        if started is not None:
            process = started.process
            self._procs[job.rollout_id] = _Proc(process, folder, answer_path, started.release, started.recyclable)
        else:
            process = await self._spawn(list(job.launch.argv), env_for(workspace), workspace, folder / "output.log")
            self._procs[job.rollout_id] = _Proc(process, folder, answer_path)
        pooled = " (warm pool)" if isinstance(process, PooledProcess) else ""
        logger.debug("rollout started as pid %s%s", process.pid, pooled, extra={"rollout_id": job.rollout_id})
        return Handle(job.rollout_id, str(process.pid))

    async def _spawn(
        self, argv: list[str], env: dict[str, str], workspace: Path, log: Path
    ) -> anyio.abc.Process | PooledProcess:
        """Fork from the warm pool when the launch allows it, else a plain subprocess in its own session."""
        if self._pool is not None and poolable(argv):
            try:
                return await self._pool.spawn(argv, env, workspace, log)
            except PoolUnavailable as exc:
                logger.debug("warm pool unavailable (%s); starting a subprocess", exc)
        return await self._open(argv, env, workspace, log)

    @staticmethod
    async def _open(
        argv: list[str], env: dict[str, str], cwd: Path, log: Path, pass_fds: Sequence[int] = ()
    ) -> anyio.abc.Process:
        with open(log, "wb") as log_file:  # the child keeps its own descriptor
            try:
                return await anyio.open_process(
                    argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                    start_new_session=True, pass_fds=pass_fds,
                )  # fmt: skip
            except OSError as exc:  # command not found / not executable: a configuration error, not infrastructure
                raise InvalidRequest(f"cannot start {argv[0]!r}: {exc.strerror or exc}", param="argv") from exc

    @staticmethod
    def _prepare(workspace: Path, job: RolloutJob) -> None:
        if workspace.parent.exists():  # a leftover of an earlier, interrupted start of the same rollout
            shutil.rmtree(workspace.parent)
        workspace.mkdir(parents=True)
        _write_files(workspace, job)

    async def wait(self, handle: Handle, timeout_s: float) -> Ended:
        proc = self._procs[handle.rollout_id]
        code: int | None = None
        with anyio.move_on_after(max(timeout_s, 0.0)) as scope:
            code, over_disk = await self._exit_or_disk(proc)
        if scope.cancelled_caught:
            await self._kill_group(proc)
            return Ended(EndKind.TIMED_OUT, exit_code=proc.process.returncode, reason=f"deadline of {timeout_s:.1f}s")
        await self._kill_group(proc)  # the harness is done (or past its disk): its children go with it
        if over_disk is not None:
            return Ended(EndKind.EXITED, exit_code=-signal.SIGKILL, reason=over_disk)
        reason = None
        if isinstance(proc.process, PooledProcess):
            if proc.process.lost:
                return Ended(EndKind.LOST, reason=proc.process.lost)
            reason = proc.process.ended_by
        try:
            answer = await anyio.to_thread.run_sync(_read_answer, proc.answer_path)
        except RefusedFile as refused:
            return Ended(EndKind.EXITED, exit_code=code, reason=reason, answer_refused=refused.reason)
        return Ended(EndKind.EXITED, exit_code=code, reason=reason, final_answer=answer)

    async def _exit_or_disk(self, proc: _Proc) -> tuple[int | None, str | None]:
        """The harness's exit status, or (None, why) once its folder holds more than ``max_disk_mb``."""
        limit = self._settings.max_disk_mb << 20
        if not limit:
            return await proc.process.wait(), None
        exited: list[int | None] = []  # a pooled rollout whose end was lost has no status
        async with anyio.create_task_group() as group:

            async def until_exit() -> None:
                exited.append(await proc.process.wait())
                group.cancel_scope.cancel()

            group.start_soon(until_exit)
            over = await _until_over(proc.folder, limit)
            group.cancel_scope.cancel()
        return (exited[0], None) if exited else (None, over)

    async def logs_tail(self, handle: Handle, lines: int) -> str:
        proc = self._procs.get(handle.rollout_id)
        if proc is None:
            return ""
        return await anyio.to_thread.run_sync(_tail, proc.folder / "output.log", lines)

    async def stop(self, handle: Handle) -> None:
        proc = self._procs.pop(handle.rollout_id, None)
        if proc is None:
            return
        with anyio.CancelScope(shield=True):
            await self._kill_group(proc)
            if proc.release is not None:
                await proc.release()
            if not self._settings.keep_workspaces:
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(proc.folder, ignore_errors=True))

    async def attach(self, rollout_id: str, ref: str) -> Handle | None:
        """A local process cannot be re-attached; kill what is left of it so the retry runs alone."""
        if ref.isdigit() and _is_our_process(int(ref), rollout_id):
            _signal_group(int(ref), signal.SIGKILL)
        return None

    async def _kill_group(self, proc: _Proc) -> None:
        if proc.recyclable and proc.process.returncode is not None:
            return  # its sandbox outlives it, to be reset and reused: release() ends what it left
        pgid = proc.process.pid
        # a sandbox's pid namespace outlives bwrap's own pid by a moment: its init's end is the end of all of them
        inner = _first_child_pidfd(pgid) if proc.release is not None and proc.process.returncode is None else None
        try:
            await self._signal_and_wait(proc, pgid)
            if inner is not None:
                with anyio.move_on_after(NAMESPACE_GONE_S):
                    await anyio.wait_readable(inner)
        finally:
            if inner is not None:
                os.close(inner)

    @staticmethod
    async def _signal_and_wait(proc: _Proc, pgid: int) -> None:
        if proc.process.returncode is None:
            _signal_group(pgid, signal.SIGTERM)
            with anyio.move_on_after(TERM_GRACE_S):
                await proc.process.wait()
        _signal_group(pgid, signal.SIGKILL)  # the leader may be gone while its children linger
        if proc.process.returncode is None:
            await proc.process.wait()
        if isinstance(proc.process, anyio.abc.Process):
            await proc.process.aclose()


async def _until_over(folder: Path, limit: int) -> str:
    """Measure ``folder`` until it holds more than ``limit`` bytes; then one line saying so."""
    while True:
        started = anyio.current_time()
        try:
            used = await anyio.to_thread.run_sync(disk_used, folder, limit, abandon_on_cancel=True)
        except OSError as exc:  # only the rollout's own files can make its folder unmeasurable
            return f"its folder could not be measured ({exc.strerror or exc})"
        if used > limit:
            return f"used more than {limit >> 20} MiB of disk (max_disk_mb)"
        await anyio.sleep(max(DISK_CHECK_S, 20 * (anyio.current_time() - started)))


def _first_child_pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``'s first child (bwrap's: the sandbox's pid-namespace init), readable once it is gone."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return os.pidfd_open(int(children[0])) if children else None
    except (OSError, ValueError):
        return None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _is_our_process(pid: int, rollout_id: str) -> bool:
    """True only if ``pid`` is still this rollout's (guards against pid reuse): its start-up environment names the
    rollout, or, for a warm-pool child (whose /proc environ is the fork server's), its cwd is the rollout's folder."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    if f"{ROLLOUT_ENV}={rollout_id}".encode() in environ.split(b"\0"):
        return True
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return False
    return f"rollwire-{rollout_id}" in cwd.parts


def _write_files(workspace: Path, job: RolloutJob) -> None:
    root = workspace.resolve()
    for relative, content in job.launch.files.items():
        target = (workspace / relative).resolve()
        if not target.is_relative_to(root):
            raise InvalidRequest(f"adapter file escapes the workspace: {relative!r}", param="files")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


def _read_answer(path: AnswerPath) -> str | None:
    """The final answer the rollout left (None: none); ``RefusedFile`` when it is not a plain, small file."""
    try:
        data = read_beneath(path.workspace, path.relative, MAX_ANSWER_BYTES)
    except OSError:
        return None
    return None if data is None else data.decode("utf-8", errors="replace")


def _tail(path: Path, lines: int, max_bytes: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])


__all__ = ["LocalRuntime"]
