"""A local stack whose owner is killed outright (SIGKILL: no clean-up runs) does not run on as orphans: each part
(env servers, gateway, the proxy's worker master and its workers) stops once the process that started it is gone.
The owner is a real process holding a real ``LocalStack``; the parts are the real ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

OWNER = """
import json, sys, threading
from pathlib import Path
from rollwire.app.demo.teacher import build_teacher_app
from rollwire.app.serving import ServerThread
from rollwire.app.stack import LocalStack
from rollwire.settings import Settings

model, folder = Path(sys.argv[1]), Path(sys.argv[2])
with ServerThread(build_teacher_app(model, [])) as upstream:
    stack = LocalStack(Settings(), upstream=upstream.url, db_url=f"sqlite:///{folder / 'store.db'}",
                       state_dir=folder / "state", log_dir=folder / "logs", proxy_args=["--workers", "2"])
    with stack as info:
        print(json.dumps(info.pids), flush=True)
        threading.Event().wait()
"""
DEADLINE_S = 60.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie awaits its parent's wait: it runs nothing
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _family(pids: list[int]) -> list[int]:
    """``pids`` and every process whose parent is one of them, recursively (the proxy's workers)."""
    found, frontier = list(pids), list(pids)
    while frontier:
        parent = frontier.pop()
        for child in Path("/proc").glob(f"{parent}/task/*/children"):
            kids = [int(p) for p in child.read_text().split()]
            found += kids
            frontier += kids
    return found


@pytest.mark.slow
def test_the_parts_stop_when_the_stacks_owner_is_killed(tiny_model_dir: Path, tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tiny_model_dir), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    parts: list[int] = []
    try:
        assert owner.stdout is not None
        pids = json.loads(owner.stdout.readline())  # the stack is up and healthy
        parts = _family(list(pids.values()))
        assert set(pids) == {"env", "gateway", "proxy"} and len(parts) >= 5, pids  # the proxy's two workers too
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + DEADLINE_S
        while any(_alive(p) for p in parts) and time.monotonic() < deadline:
            time.sleep(0.2)  # polling the processes' own state, up to a deadline
        assert not [p for p in parts if _alive(p)], "parts of a killed owner's stack still run"
    finally:
        owner.kill()
        for pid in parts:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
