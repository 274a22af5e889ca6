"""The warm pool under the local runtime: exit statuses as `python -m` reports them, refusal to fork with threads
running, and a fork server that dies mid-run (its rollouts are lost and retried as plain subprocesses)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scheduler import RunPlan, TaskSpec, live_rows
from tests.orchestrator.runs import ScriptAdapter, orchestrator_settings, plan, run_with
from tests.polling import wait_until_async

WARM = ["openai"]


class ModuleAdapter:
    """``python -m <module> <args>`` with the task's prompt as the module source (written to the workspace)."""

    name = "module"

    def __init__(self, sources: dict[str, str], module: str = "harness") -> None:
        self.sources, self.module = sources, module

    def launch(self, ctx: RolloutContext) -> Launch:
        files = {"harness.py": self.sources[ctx.task_id]} if ctx.task_id in self.sources else {}
        return Launch(argv=(sys.executable, "-m", self.module, "a1", "b2"), files=files)


EXITS = {
    "clean": ("import sys; assert sys.argv[1:] == ['a1', 'b2'], sys.argv; print('argv ok', sys.argv[0].endswith('harness.py'))", 0, "argv ok True"),
    "exit3": ("import sys; sys.exit(3)", 3, ""),
    "message": ("import sys; sys.exit('gave up: no tools')", 1, "gave up: no tools"),
    "raises": ("raise RuntimeError('harness bug')", 1, "RuntimeError: harness bug"),
    "os_exit": ("import os, sys; print('bye', flush=True); os._exit(5)", 5, "bye"),
    "atexit": ("import atexit; atexit.register(lambda: print('atexit ran'))", 0, "atexit ran"),
    "thread": ("import threading, time; threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()", 0, "thread done"),
}


@pytest.mark.asyncio
async def test_pooled_exit_statuses_match_python_dash_m(book, tmp_path: Path) -> None:
    """Each case runs pooled and cold; both must record the same status, exit code and log text."""
    adapter = ModuleAdapter({name: source for name, (source, _, _) in EXITS.items()})
    tasks = [TaskSpec(name, "") for name in EXITS]
    results = {}
    for pool in (True, False):
        settings = orchestrator_settings(workspace_root=str(tmp_path / str(pool)), warm_pool=pool, warm_preload=WARM, concurrency=4)
        run = RunPlan(run_id=f"exits-{pool}", tasks=tasks, group_size=1, harness="module")
        with anyio.fail_after(60):
            async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
                await run_with(runtime, book, run, settings, adapter)
        results[pool] = {row.task_id: row for row in book.rollouts(run.run_id)}
    for name, (_, code, text) in EXITS.items():
        for pool in (True, False):
            row = results[pool][name]
            assert row.exit_code == code, (name, pool, row.log_tail)
            assert text in (row.log_tail or ""), (name, pool, row.log_tail)
            assert row.status == ("finished" if code == 0 else "failed"), (name, pool)


@pytest.mark.asyncio
async def test_missing_module_fails_like_python(book, tmp_path: Path) -> None:
    settings = orchestrator_settings(workspace_root=str(tmp_path), warm_preload=WARM)
    async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
        await run_with(runtime, book, plan("missing", 1, 1), settings, ModuleAdapter({}, module="no_such_harness"))
    (row,) = book.rollouts("missing")
    assert row.status == "failed" and row.exit_code == 1
    assert "No module named no_such_harness" in (row.log_tail or "")


@pytest.mark.asyncio
async def test_pool_refuses_to_fork_with_threads_and_falls_back(book, tmp_path: Path) -> None:
    (tmp_path / "threaded_preload.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    )  # the fork server runs in the workspace root, so it can import this
    # unsandboxed: a sandboxed fork server runs in its own empty workspace (test_sandbox covers that pool)
    settings = orchestrator_settings(
        workspace_root=str(tmp_path), warm_preload=["openai", "threaded_preload"], sandbox=False
    )
    script = "import sys\nprint('warm' if 'openai' in sys.modules else 'cold')\n"
    async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
        await run_with(runtime, book, plan("threads", 2, 1), settings, ScriptAdapter(script, module=True))
    rows = book.rollouts("threads")
    assert [row.status for row in rows] == ["finished", "finished"]
    assert all("cold" in (row.log_tail or "") for row in rows)


KILL_MY_PARENT = """
import os, pathlib, sys, time
if "openai" in sys.modules:  # forked by the warm pool: the parent is the fork server
    pathlib.Path(os.environ["ROLLWIRE_TEST_FLAG"]).write_text(str(os.getppid()))
    time.sleep(60)
print("finished cold")
"""


@pytest.mark.asyncio
async def test_fork_server_death_loses_rollouts_which_retry_cold(book, tmp_path: Path) -> None:
    flag = tmp_path / "server.pid"

    class Adapter(ScriptAdapter):
        def launch(self, ctx: RolloutContext) -> Launch:
            base = super().launch(ctx)
            return Launch(argv=base.argv, env={**base.env, "ROLLWIRE_TEST_FLAG": str(flag)}, files=base.files)

    # unsandboxed: the harness reports its parent's pid through a file outside its workspace
    settings = orchestrator_settings(workspace_root=str(tmp_path / "ws"), warm_preload=WARM, sandbox=False)

    async def kill_server() -> None:
        def written() -> str:
            return flag.read_text() if flag.exists() else ""

        pid = await wait_until_async(written, "the fork server's pid", timeout_s=60)
        os.kill(int(pid), signal.SIGKILL)

    with anyio.fail_after(60):
        async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime, anyio.create_task_group() as group:
            group.start_soon(kill_server)
            await run_with(runtime, book, plan("death", 1, 1), settings, Adapter(KILL_MY_PARENT, module=True))
    rows = book.rollouts("death")
    (live,) = live_rows(rows)
    assert live.status == "finished" and live.attempt == 1 and "finished cold" in (live.log_tail or "")
    (lost,) = [row for row in rows if row.id != live.id]
    assert lost.status == "failed" and "fork server exited" in (lost.error or "")
