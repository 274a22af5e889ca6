"""A hostile harness inside real local sandboxes (cold, and warm-pool slots recycled between rollouts).

Each attack is one the policy under training could learn: read the task's answer from the shipped suites, leave a
file or an IPC object for the next rollout in the same slot, write to the warm pool's control channel, read the
host's paths from ``/proc``, trace its parent, make nested namespaces or keys, make the host read a symlink, a
FIFO or a huge file as its final answer, kill its launcher so that a hard task is retried instead of scored, or
fill the host's disk.
Every attack must fail while an honest rollout in the same run still scores.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rollwire import sandbox
from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.mcp_servers.tasks.loader import SUITES_DIR
from rollwire.orchestrator.lifecycle import RolloutBook
from rollwire.orchestrator.runtimes.local import LocalRuntime
from rollwire.orchestrator.scheduler import Endpoints, RunPlan, Scheduler, TaskSpec, live_rows
from rollwire.orchestrator.scoring import ExitCodeScorer
from rollwire.settings import OrchestratorSettings
from rollwire.store.db import open_engine
from rollwire.trajectory import failure_cause

needs_sandbox = pytest.mark.skipif(
    sandbox.probe("bwrap") is not None, reason=f"no sandbox here: {sandbox.probe('bwrap')} (.ci/run installs it)"
)
ENDPOINTS = Endpoints(proxy_url="http://127.0.0.1:48111", gateway_url="http://127.0.0.1:48112")  # relayed, never called

HOSTILE = r"""
import ctypes, errno, json, os, pathlib, sys
targets = json.load(open("targets.json"))
mark = os.environ["ROLLWIRE_SAMPLE"]
libc = ctypes.CDLL(None, use_errno=True)
report = {"escaped": {}, "seen": {}, "attempts": 0}

def attempt(name, fn):
    report["attempts"] += 1
    try:
        result = fn()
    except BaseException as exc:  # every way a door can be shut
        return
    if result:
        report["escaped"][name] = repr(result)[:300]

def read(path):
    return open(path, "rb").read(200)

# 1. the task's answer: the shipped suites, by file and by import
attempt("read_suite_file", lambda: read(targets["suite_file"]))
attempt("list_suites", lambda: os.listdir(targets["suites_dir"]))
def load():
    from rollwire.mcp_servers.tasks.loader import load_suite
    return load_suite("tiny").tasks[0].checker
attempt("import_suite", load)
attempt("read_home_secret", lambda: read(targets["home_secret"]))
attempt("read_cwd_secret", lambda: read(targets["cwd_secret"]))
attempt("read_state", lambda: read(targets["stack_file"]))
attempt("list_state", lambda: os.listdir(os.path.dirname(targets["stack_file"])))

# the earlier round's: the host's loopback (an empty network namespace reaches nothing), the installation, /etc
import socket
attempt("other_loopback_port", lambda: socket.create_connection(("127.0.0.1", targets["listener_port"]), timeout=3))
def write(path):
    with open(path, "w") as handle:
        handle.write("planted")
    return path
attempt("write_installation", lambda: write(targets["installation_file"]))
attempt("write_etc", lambda: write("/etc/rollwire-planted"))

# 2. what an earlier rollout in this slot left, then leave the same for the next one
places = ["/", "/run/rollwire", "/var/tmp", "/home", "/run", "/root", "/dev", "/dev/shm", "/mnt", "/srv", "/etc/ssh", "/tmp", os.getcwd()]
for place in places:
    try:
        left = sorted(name for name in os.listdir(place) if name.startswith("left-"))
    except OSError:
        left = []
    if left:
        report["seen"][place] = left
    report["attempts"] += 1
    try:
        pathlib.Path(place, f"left-{mark}").write_text("a trace")
    except OSError:
        pass
try:
    shm = open("/proc/sysvipc/shm").read().splitlines()[1:]
except OSError:
    shm = []
if shm:
    report["seen"]["sysv_shm"] = shm
libc.shmget(0x5EED0000 + int(mark), 4096, 0o1000 | 0o600)  # IPC_CREAT
if libc.syscall(240, f"/left-{mark}".encode(), 0o100 | 0o2, 0o600, None) >= 0:  # mq_open(O_CREAT|O_RDWR)
    report["escaped"]["mq_open"] = "made a POSIX message queue"

# 3. the platform's processes: their pipes, their command lines, tracing them
ancestors, pid = set(), os.getpid()
me = os.getpid()
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == me:
        continue
    for fd in ("0", "1", "2", "3", "4", "5"):
        link = f"/proc/{entry}/fd/{fd}"
        for mode in ("wb", "rb"):
            def opened(link=link, mode=mode):
                target = os.readlink(link)
                if not target.startswith(("pipe:", "socket:")):
                    return None
                with open(link, mode, buffering=0):
                    return f"{target} ({mode})"
            attempt(f"open_{entry}_fd{fd}_{mode}", opened)
    def host_paths(entry=entry):
        text = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace")
        return [path for path in targets["host_paths"] if path in text]
    attempt(f"cmdline_{entry}", host_paths)
    def trace(entry=entry):  # PTRACE_SEIZE does not stop the tracee; detach at once if it worked
        seized = libc.ptrace(0x4206, int(entry), None, None) == 0
        return seized and libc.ptrace(17, int(entry), None, None) is not None
    attempt(f"ptrace_{entry}", trace)

def private_paths(path):  # what the sandbox's own /proc says of the host: its mounts' sources, maps, environment
    text = open(path, "rb").read().decode(errors="replace")
    return [found for found in targets["private_paths"] if found in text]
for who in ("self", "1"):
    for path in ("mountinfo", "mounts", "maps", "environ", "cgroup"):
        attempt(f"{who}_{path}_host_paths", lambda who=who, path=path: private_paths(f"/proc/{who}/{path}"))

def control_socket():  # the warm pool's control channel: the host stopped listening once its server connected
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    channel.connect("/run/rollwire/control.sock")
    return "connected"
attempt("connect_control_socket", control_socket)

# 4. kernel surfaces a rollout needs none of
attempt("unshare_user", lambda: libc.unshare(0x10000000) == 0)  # CLONE_NEWUSER
attempt("unshare_mount", lambda: libc.unshare(0x00020000) == 0)  # CLONE_NEWNS
attempt("keyctl", lambda: libc.syscall(250, 0, -3, 0, 0, 0) >= 0)  # KEYCTL_GET_KEYRING_ID of the session keyring
attempt("add_key", lambda: libc.syscall(248, b"user", b"left", b"x", 1, -3) >= 0)
attempt("bpf", lambda: libc.syscall(321, 0, None, 0) >= 0 or ctypes.get_errno() not in (errno.EPERM, errno.ENOSYS))
attempt("perf_event_open", lambda: libc.syscall(298, None, 0, -1, -1, 0) >= 0 or ctypes.get_errno() not in (errno.EPERM, errno.ENOSYS, errno.EACCES))
attempt("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0)
report["where"] = os.getcwd()
pathlib.Path("final_answer.txt").write_text(json.dumps(report))
"""

ANSWERS = {
    "symlink-answer": "import os, json; os.symlink(json.load(open('targets.json'))['stack_file'], 'final_answer.txt')",
    "fifo-answer": "import os; os.mkfifo('final_answer.txt')",
    "huge-answer": "open('final_answer.txt', 'wb').write(b'7 ' * (1 << 20))",
    "linked-dir-answer": "import os; os.symlink('/etc', 'out'); open('notes.txt', 'w').write('x')",
    "kill-launcher": "import os, signal, sys\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n    pass\nsys.exit(3)",
    "fill-disk": "import os, threading\nfor i in range(40):\n    open(f'fill-{i}', 'wb').write(os.urandom(1 << 20))\nthreading.Event().wait()",
    "file-past-limit": (
        "import errno, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\nhandle = open('sparse', 'wb')\n"
        "handle.seek(32 << 20)\ntry:\n    handle.write(b'x'); handle.flush(); said = 'written'\n"
        "except OSError as exc:\n    said = errno.errorcode[exc.errno]\nopen('final_answer.txt', 'w').write(said)"
    ),
    "honest": "open('final_answer.txt', 'w').write('42')",
}
DISK_MB = 16
"""The disk the answer attacks run under: ``fill-disk`` writes 40 MiB and waits to be stopped; ``file-past-limit``
writes one byte at 32 MiB into a sparse file (no disk used, but past the file size limit)."""


class HostileAdapter:
    """``python -m harness`` (the form the warm pool forks) or ``python harness.py`` (always cold)."""

    name = "hostile"

    def __init__(self, targets: dict[str, object], module: bool) -> None:
        self.targets, self.module = targets, module

    def launch(self, ctx: RolloutContext) -> Launch:
        script = HOSTILE if ctx.task_id == "hostile" else ANSWERS[ctx.task_id]
        answer_path = "out/answer.txt" if ctx.task_id == "linked-dir-answer" else "final_answer.txt"
        files = {"harness.py": script, "targets.json": json.dumps(self.targets)}
        argv = (sys.executable, "-m", "harness") if self.module else (sys.executable, "harness.py")
        return Launch(argv=argv, env={"ROLLWIRE_SAMPLE": str(ctx.sample_index)}, files=files,
                      final_answer_path=answer_path)  # fmt: skip


@pytest.fixture()
def secrets(tmp_path: Path) -> Iterator[dict[str, object]]:
    """Host files a rollout must never read: a stack file with an operator key, and a home folder whose path is
    on ``sys.path`` (as when the CLI is started from the home folder)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    stack_file = tmp_path / "state" / "stack.json"
    stack_file.parent.mkdir()
    stack_file.write_text(json.dumps({"operator_key": "operator-key-never-leaks"}))
    sys.path.insert(0, str(home))
    listener = socket.create_server(("127.0.0.1", 0))
    installation_file = Path(sysconfig.get_paths()["purelib"]) / f"rollwire-planted-{os.getpid()}"
    try:
        yield {
            "listener_port": listener.getsockname()[1],
            "installation_file": str(installation_file),
            "suite_file": str(SUITES_DIR / "tiny.json"),
            "suites_dir": str(SUITES_DIR),
            "home_secret": str(home / ".ssh" / "id_ed25519"),
            "cwd_secret": str(home / ".ssh" / "id_ed25519"),
            "stack_file": str(stack_file),
            "host_paths": [str(tmp_path), str(Path.home())] if Path.home() != Path("/") else [str(tmp_path)],
            "private_paths": [str(home), str(stack_file.parent)],
        }
    finally:
        sys.path.remove(str(home))
        listener.close()
        planted = installation_file.exists()
        installation_file.unlink(missing_ok=True)
        assert not planted, "a rollout wrote into the installation"


def _run(book: RolloutBook, settings: OrchestratorSettings, plan: RunPlan, adapter: HostileAdapter, hidden: list[Path]) -> None:
    async def go() -> None:
        async with LocalRuntime(settings, host_env=dict(os.environ), hidden=hidden) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=adapter, scorer=ExitCodeScorer(), settings=settings,
                endpoints=ENDPOINTS,
            )  # fmt: skip
            await scheduler.run(plan)

    anyio.run(go)


def _settings(tmp_path: Path, pooled: bool, **limits: Any) -> OrchestratorSettings:
    """One warm slot kept ready (pooled), so consecutive rollouts share recycled sandboxes."""
    return OrchestratorSettings(
        workspace_root=str(tmp_path / "ws"), warm_pool=pooled, warm_preload=["json"], warm_spares=1, **limits
    )


def _plan(run_id: str, tasks: list[str], group: int) -> RunPlan:
    return RunPlan(run_id=run_id, tasks=[TaskSpec(t, t) for t in tasks], group_size=group, harness="hostile")


@needs_sandbox
@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "warm-pool"])
def test_hostile_rollouts_reach_nothing_and_leave_nothing(
    store_url: str, tmp_path: Path, secrets: dict[str, object], pooled: bool
) -> None:
    """Four hostile rollouts one after another (pooled: in recycled slots); none escapes, none sees another's."""
    book = RolloutBook(open_engine(store_url))
    settings = _settings(tmp_path, pooled, concurrency=1, deadline_s=120, max_attempts=1)  # a retry would hide a failure
    _run(book, settings, _plan("hostile", ["hostile"], 4), HostileAdapter(secrets, pooled), [tmp_path / "state"])
    rows = sorted(book.rollouts("hostile"), key=lambda row: row.sample_index)
    assert [row.status for row in rows] == ["finished"] * 4, [(row.error, row.log_tail) for row in rows]
    reports = [json.loads(row.final_answer or "{}") for row in rows]
    slots = [report["where"] for report in reports]
    assert not pooled or len(set(slots)) < len(slots), slots  # some slot served two rollouts: recycling was tested
    escaped = [",".join(sorted(report["escaped"])) for report in reports]
    assert escaped == [""] * 4, escaped
    assert [report["seen"] for report in reports] == [{}] * 4, reports
    attempts = [report["attempts"] for report in reports]
    assert min(attempts) >= 40, attempts  # the probe ran its attacks (cold: 44 a rollout; pooled, 58 with the server)
    print(f"hostile {'warm-pool' if pooled else 'cold'}: {sum(attempts)} attempts in 4 rollouts, 0 succeeded")


@needs_sandbox
@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "warm-pool"])
def test_answers_the_host_must_not_read_and_a_killed_launcher_are_the_policys_failures(
    store_url: str, tmp_path: Path, secrets: dict[str, object], pooled: bool
) -> None:
    book = RolloutBook(open_engine(store_url))
    settings = _settings(tmp_path, pooled, concurrency=2, deadline_s=60, max_attempts=3, max_disk_mb=DISK_MB)
    tasks = list(ANSWERS)
    _run(book, settings, _plan("answers", tasks, 1), HostileAdapter(secrets, pooled), [tmp_path / "state"])
    rows = book.rollouts("answers")
    assert len(rows) == len(tasks) == len(live_rows(rows)), [(r.task_id, r.error) for r in rows]  # nothing retried
    by_task = {row.task_id: row for row in rows}
    honest = by_task.pop("honest")
    assert honest.status == "finished" and honest.final_answer == "42", (honest.error, honest.log_tail)
    past_limit = by_task.pop("file-past-limit")  # the write failed; the rollout itself went on
    assert past_limit.final_answer == "EFBIG", (past_limit.status, past_limit.final_answer, past_limit.log_tail)
    for task, row in by_task.items():
        assert row.status == "failed" and failure_cause(row.status, row.error) == "policy", (task, row.error)
        assert "operator-key-never-leaks" not in (row.final_answer or "") + (row.error or "")
    assert "symbolic link" in (by_task["symlink-answer"].error or "")
    assert "FIFO" in (by_task["fifo-answer"].error or "")
    assert "larger than" in (by_task["huge-answer"].error or "")
    assert "symbolic link" in (by_task["linked-dir-answer"].error or "")
    assert f"used more than {DISK_MB} MiB of disk" in (by_task["fill-disk"].error or "")

