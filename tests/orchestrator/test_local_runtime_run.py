"""The local runtime runs real harness subprocesses for a small run and stores G rewards per task."""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from pathlib import Path

import anyio
import pytest

from rollwire.orchestrator.runtimes.base import Ended, Handle
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scoring import ExpectedAnswerScorer
from tests.orchestrator.runs import LAUNCH_MODES, ScriptAdapter, orchestrator_settings, plan, run_with
from tests.polling import wait_until_async

HARNESS = """
import os, pathlib, sys
prompt = pathlib.Path("task/prompt.txt").read_text()
assert "/r/" in os.environ["OPENAI_BASE_URL"] and os.environ["OPENAI_API_KEY"] in os.environ["OPENAI_BASE_URL"]
assert os.environ["HOME"] == os.environ["ROLLWIRE_WORKSPACE"] == os.getcwd() == os.path.expanduser("~")
allowed = {"OPENAI_BASE_URL", "OPENAI_API_KEY", "ROLLWIRE_SAMPLE", "ROLLWIRE_WORKSPACE", "HOME", "ROLLWIRE_ROLLOUT_ID",
           "PATH", "LANG", "LC_ALL", "TZ", "VIRTUAL_ENV", "LC_CTYPE"}
assert set(os.environ) <= allowed, sorted(set(os.environ) - allowed)
assert sys.stdin.read() == ""
print("warm" if "openai" in sys.modules else "cold", "main" if __name__ == "__main__" else __name__)
sample = int(os.environ["ROLLWIRE_SAMPLE"])
answer = prompt.split()[-1] if sample % 2 == 0 else "wrong"
print("thinking about", prompt)
print("answer", answer, file=sys.stderr)
pathlib.Path("final_answer.txt").write_text(answer)
"""

CRASH = "import sys\nprint('boom: cannot reach the proxy', file=sys.stderr)\nsys.exit(7)\n"
HANG = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[0], MARK])\nprint('started', flush=True)\ntime.sleep(600)\n"
"""Its child is found again by MARK in its command line (a sandboxed child's pid is its pid namespace's, not ours)."""


MODES = pytest.mark.parametrize(("pool", "module"), list(LAUNCH_MODES.values()), ids=list(LAUNCH_MODES))


@MODES
@pytest.mark.asyncio
async def test_local_run_stores_group_rewards_per_task(book, tmp_path, pool: bool, module: bool) -> None:
    settings = orchestrator_settings(concurrency=3, workspace_root=str(tmp_path / "ws"), warm_pool=pool)
    scorer = ExpectedAnswerScorer({"t0": "0", "t1": "1"})
    adapter = ScriptAdapter(HARNESS, module=module)
    with anyio.fail_after(60):
        async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
            progress = await run_with(runtime, book, plan("run-local", tasks=2, group=3), settings, adapter, scorer)
    rewards: dict[str, list[float]] = defaultdict(list)
    for row in book.rollouts("run-local"):
        assert row.status == "finished", (row.error, row.log_tail)
        rewards[row.task_id or ""].append(row.reward)
        assert "thinking about prompt" in (row.log_tail or "") and row.exit_code == 0
        assert ("warm main" if pool and module else "cold main") in (row.log_tail or "")  # pooled: openai imported
    assert {task: sorted(values) for task, values in rewards.items()} == {"t0": [0.0, 1.0, 1.0], "t1": [0.0, 1.0, 1.0]}
    assert progress.finished == 6 and progress.mean_reward == pytest.approx(4 / 6)
    assert list((tmp_path / "ws").iterdir()) == []  # workspaces removed


@MODES
@pytest.mark.asyncio
async def test_local_crash_is_failed_with_stderr_tail(book, tmp_path, pool: bool, module: bool) -> None:
    settings = orchestrator_settings(workspace_root=str(tmp_path), warm_pool=pool, warm_preload=["openai"])
    async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
        await run_with(runtime, book, plan("run-crash", 1, 1), settings, ScriptAdapter(CRASH, module=module))
    (row,) = book.rollouts("run-crash")
    assert row.status == "failed" and row.exit_code == 7
    assert "boom: cannot reach the proxy" in (row.log_tail or "") and "status 7" in (row.error or "")


@MODES
@pytest.mark.asyncio
async def test_local_hang_is_killed_with_children_at_deadline(book, tmp_path, pool: bool, module: bool) -> None:
    settings = orchestrator_settings(
        deadline_s=1.0, workspace_root=str(tmp_path), keep_workspaces=True, warm_pool=pool, warm_preload=["openai"]
    )
    with anyio.fail_after(60):
        async with StartedFirst(settings, host_env=dict(os.environ)) as runtime:
            mark = f"hang-child-{uuid.uuid4().hex}"
            hang = ScriptAdapter(HANG.replace("MARK", repr(mark)), module=module)
            await run_with(runtime, book, plan("run-hang", 1, 1), settings, hang)
    (row,) = book.rollouts("run-hang")
    assert row.status == "timed_out" and "started" in (row.log_tail or "")
    assert not _running_with(mark)


class StartedFirst(LocalRuntime):
    """Starts the deadline's clock once the harness has printed ``started`` (after starting its child): a
    signal from the work, so a slow start on a busy machine cannot beat the harness to the 1 s deadline."""

    async def wait(self, handle: Handle, timeout_s: float) -> Ended:
        log = self._procs[handle.rollout_id].folder / "output.log"
        await wait_until_async(lambda: log.is_file() and "started" in log.read_text(), "the harness to print started")
        return await super().wait(handle, timeout_s)


def _running_with(mark: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``mark``; killed ones are gone or zombies (empty)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found
