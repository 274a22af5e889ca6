"""The local runtime's sandbox as the runtime uses it: a recycled warm-pool slot keeps nothing of the last rollout,
a command named through a symlinked folder starts, and where no sandbox can be made the runtime and the
``rollouts`` CLI refuse to start (in one line) unless the sandbox is turned off.

The attacks a hostile rollout tries, in these sandboxes and against a real stack, are ``tests/adversary``'s.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollwire import sandbox
from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scheduler import Endpoints, Scheduler
from rollwire.orchestrator.scoring import ExitCodeScorer
from tests.orchestrator.runs import ScriptAdapter, orchestrator_settings, plan, run_with
from tests.real_parts import needs_sandbox

FAKE_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace, likely because the kernel does not allow' >&2\nexit 1\n"


@pytest.mark.parametrize("kind", ["missing", "no-namespaces"])
@pytest.mark.asyncio
async def test_no_sandbox_here_refuses_with_one_line_unless_turned_off(book, tmp_path: Path, kind: str) -> None:
    bwrap = tmp_path / "bwrap"
    if kind == "no-namespaces":
        bwrap.write_text(FAKE_BWRAP)
        bwrap.chmod(0o755)
    settings = orchestrator_settings(workspace_root=str(tmp_path / "ws"), bwrap_path=str(bwrap), warm_pool=False)
    with pytest.raises(sandbox.SandboxUnavailable) as caught:
        async with LocalRuntime(settings, host_env=dict(os.environ)):
            pytest.fail("the runtime started without a sandbox")
    message = caught.value.message
    assert "\n" not in message and "--no-sandbox" in message
    assert ("not installed" if kind == "missing" else "cannot create namespaces") in message
    unsandboxed = settings.model_copy(update={"sandbox": False})
    async with LocalRuntime(unsandboxed, host_env=dict(os.environ)) as runtime:
        await run_with(runtime, book, plan("unsandboxed", 1, 1), unsandboxed, ScriptAdapter("print('ran as is')"))
    (row,) = book.rollouts("unsandboxed")
    assert row.status == "finished" and "ran as is" in (row.log_tail or "")


LEAVE_TRACES = r"""
import os, pathlib, subprocess, sys
sample = int(os.environ["ROLLWIRE_SAMPLE"])
where = os.getcwd()
seen = {
    "files": [p for p in ("left.txt", "/tmp/left.txt", "/dev/shm/left") if os.path.exists(p)],
    "processes": [p for p in os.listdir("/proc") if p.isdigit() and b"left-behind" in open(f"/proc/{p}/cmdline", "rb").read()],
}
for path in ("left.txt", "/tmp/left.txt", "/dev/shm/left"):
    pathlib.Path(path).write_text("trace")
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "left-behind"], start_new_session=True)
pathlib.Path("final_answer.txt").write_text(repr((sample, where, seen)))
"""


@needs_sandbox
@pytest.mark.asyncio
async def test_a_recycled_sandbox_keeps_nothing_of_the_last_rollout(book, tmp_path: Path) -> None:
    """One rollout at a time through the sandboxed warm pool: each leaves files (workspace, /tmp, /dev/shm) and a
    detached process; the next one, forked in the same recycled sandbox, finds none of them."""
    settings = orchestrator_settings(
        workspace_root=str(tmp_path / "ws"), warm_pool=True, warm_preload=["json"], warm_spares=1, concurrency=1
    )
    async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
        await run_with(runtime, book, plan("recycle", 1, 4), settings, ScriptAdapter(LEAVE_TRACES, module=True))
    rows = sorted(book.rollouts("recycle"), key=lambda row: row.sample_index)
    assert all(row.status == "finished" for row in rows), [(row.error, row.log_tail) for row in rows]
    reports = [ast.literal_eval(row.final_answer or "") for row in rows]
    assert all(seen == {"files": [], "processes": []} for _, _, seen in reports), reports
    places = [where for _, where, _ in reports]
    assert len(set(places)) < len(places), places  # some sandbox served two rollouts (else nothing was tested)
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, b"left-behind")]


def _cmdline_has(proc: Path, mark: bytes) -> bool:
    try:
        return mark in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def test_rollouts_cli_refuses_in_one_line_without_a_sandbox(tmp_path: Path) -> None:
    """A harness with built-in tools (Codex) does not start where no sandbox can be made."""
    (tmp_path / "state").mkdir()
    env = {**os.environ, "ROLLWIRE_ORCHESTRATOR__BWRAP_PATH": str(tmp_path / "no-bwrap")}
    args = ["--suite", "tiny", "--harness", "codex", "--tasks", "write-cat", "--proxy-url", "http://127.0.0.1:9", "--gateway-url",
            "http://127.0.0.1:9", "--db", f"sqlite:///{tmp_path / 'store.db'}", "--state-dir", str(tmp_path / "state")]  # fmt: skip
    command = [sys.executable, "-m", "rollwire.app.cli", "rollouts", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rollwire rollouts: cannot sandbox rollouts: bubblewrap") and "--no-sandbox" in last


class LinkedCommand:
    """A harness named by a path that goes through a symlinked folder (a venv under a linked folder)."""

    name = "linked"

    def __init__(self, command: Path) -> None:
        self.command = command

    def launch(self, ctx: RolloutContext) -> Launch:
        return Launch(argv=(str(self.command),), env={}, files={})


@needs_sandbox
@pytest.mark.asyncio
async def test_a_command_named_through_a_symlinked_folder_starts_in_the_sandbox(book, tmp_path: Path) -> None:
    """The sandbox shows the real folder and recreates the link, so the path the launch names leads there."""
    real = tmp_path / "real" / "bin"
    real.mkdir(parents=True)
    tool = real / "tool"
    tool.write_text("#!/bin/sh\necho ran-through-link > final_answer.txt\n")
    tool.chmod(0o755)
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    settings = orchestrator_settings(workspace_root=str(tmp_path / "ws"), warm_pool=False)
    async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
        adapter = LinkedCommand(tmp_path / "linked" / "bin" / "tool")
        await run_with(runtime, book, plan("linked", 1, 1), settings, adapter)
    (row,) = book.rollouts("linked")
    assert row.status == "finished" and row.final_answer == "ran-through-link\n", (row.error, row.log_tail)


@needs_sandbox
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm-pool"])
@pytest.mark.asyncio
async def test_a_deep_workspace_root_runs_sandboxed_rollouts(book, tmp_path: Path, warm: bool) -> None:
    """A unix socket path holds 107 bytes and the relay's sockets (to the proxy and the gateway, and the warm pool's
    control socket) live in the rollout's folder, however deep the user put the workspace root: bound through a
    short name, they start, where each rollout used to fail to ("AF_UNIX path too long", on every retry)."""
    root = tmp_path / ("w" * 80) / ("s" * 80)
    assert len(str(root)) > 160
    settings = orchestrator_settings(workspace_root=str(root), warm_pool=warm, warm_preload=["json"], warm_spares=1)
    loopback = Endpoints("http://127.0.0.1:47001", "http://127.0.0.1:47002")  # relayed in by unix sockets
    async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
        scheduler = Scheduler(
            book=book, runtime=runtime, adapter=ScriptAdapter(ANSWER, module=warm), scorer=ExitCodeScorer(),
            settings=settings, endpoints=loopback,
        )  # fmt: skip
        await scheduler.run(plan(f"deep-{warm}", 1, 2))
    rows = book.rollouts(f"deep-{warm}")
    assert [row.status for row in rows] == ["finished"] * 2, [(row.error, row.log_tail) for row in rows]
    assert all(row.final_answer == "done" for row in rows)


ANSWER = "open('final_answer.txt', 'w').write('done')\n"
