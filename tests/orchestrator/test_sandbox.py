"""The local runtime's sandbox, probed from inside a rollout: every way out fails, the rollout's own work succeeds.

A probe harness (a Python script run through the scheduler + ``LocalRuntime`` against the real stack on
loopback) tries to read the host's secrets, the store, the env state and another rollout's workspace, to
write outside its workspace, to reach the engine, an env server, another loopback port, an address off the
machine and the orchestrator's own process, and to reach the operator API (finish its own rollout with a reward,
read the trajectory stream: with its own token and with none), the viewer and /metrics through the relayed proxy
address, and the admin listener itself; it reports what happened, and the test checks every
attempt failed while its proxy (a real chat completion) and gateway (MCP initialize) answered. It runs
cold and forked from the sandboxed warm pool. Where no sandbox can be made the runtime refuses to start.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest
from conftest import ScriptAdapter, orchestrator_settings, plan, run_with
from live_stack import live_stack

from rollwire import sandbox
from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.orchestrator.lifecycle import RolloutBook
from rollwire.orchestrator.runtimes.local import LocalRuntime
from rollwire.orchestrator.scheduler import Endpoints, Scheduler
from rollwire.orchestrator.scoring import ExitCodeScorer
from rollwire.orchestrator.suite_run import sqlite_path
from rollwire.stack import StackInfo
from rollwire.store.db import open_engine

needs_sandbox = pytest.mark.skipif(
    sandbox.probe("bwrap") is not None, reason=f"no sandbox here: {sandbox.probe('bwrap')} (.ci/run installs it)"
)

PROBE = r"""
import json, os, resource, socket, sys, urllib.error, urllib.request
targets = json.load(open("targets.json"))
report = {}

def attempt(name, fn):
    try:
        report[name] = ["ok", repr(fn())]
    except BaseException as exc:  # every way a door can be shut
        report[name] = ["failed", f"{exc.__class__.__name__}: {exc}"]

def http(url, body=None, headers=None):
    request = urllib.request.Request(url, data=body, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read(300).decode(errors="replace")

def connect(host, port, timeout=3):
    socket.create_connection((host, port), timeout=timeout).close()
    return "connected"

def write(path):
    with open(path, "w") as handle:
        handle.write("escaped")
    return path

def listing(path):
    return sorted(os.listdir(path))

key = os.environ["OPENAI_API_KEY"]
chat = json.dumps({"model": "any", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
attempt("proxy_chat", lambda: http(os.environ["OPENAI_BASE_URL"] + "/chat/completions", chat,
                                   {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}))
init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}).encode()
attempt("gateway_initialize", lambda: http(os.environ["MCP_URL"], init, {"Content-Type": "application/json",
                                           "Accept": "application/json, text/event-stream"}))
proxy_root = targets["proxy"]  # the relayed proxy address: what a rollout reaches besides its own /r/<token> routes
finish = json.dumps({"reward": 1.0}).encode()
for key_name, bearer in (("own_token", key), ("no_key", None)):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {bearer}"} if bearer else {})}
    attempt(f"admin_finish_{key_name}", lambda headers=headers: http(
        f"{proxy_root}/admin/v1/rollouts/{os.environ['ROLLOUT_ID']}/finish", finish, headers))
    attempt(f"admin_stream_{key_name}", lambda headers=headers: http(
        f"{proxy_root}/admin/v1/trajectories/stream?run={os.environ['RUN_ID']}&wait=0", None, headers))
attempt("viewer_via_proxy", lambda: http(f"{proxy_root}/ui"))
attempt("metrics_via_proxy", lambda: http(f"{proxy_root}/metrics"))
attempt("admin_port", lambda: connect(*targets["admin"]))
attempt("engine", lambda: http(targets["engine"] + "/v1/models"))
attempt("env_server", lambda: http(targets["env_server"] + "/"))
attempt("other_loopback_port", lambda: connect("127.0.0.1", targets["listener_port"]))
attempt("off_machine", lambda: connect("192.0.2.1", 80, timeout=2))
attempt("read_store", lambda: open(targets["store"], "rb").read(16))
attempt("list_env_state", lambda: listing(targets["state"]) or 1 / 0)
attempt("read_other_workspace", lambda: open(targets["other_secret"]).read())
attempt("read_home_secret", lambda: open(targets["home_secret"]).read())
attempt("list_host_home", lambda: listing(targets["host_home"]))
attempt("write_project", lambda: write(targets["project_file"]))
attempt("write_etc", lambda: write("/etc/rollwire-sandbox-probe"))
attempt("read_shadow", lambda: open("/etc/shadow").read(8) or 1 / 0)
attempt("write_host_tmp", lambda: write(targets["host_tmp_file"]))
attempt("signal_orchestrator", lambda: os.kill(targets["orchestrator_pid"], 0))
attempt("write_workspace", lambda: write("mine.txt"))
attempt("write_tmp", lambda: write("/tmp/mine.txt"))
attempt("read_system", lambda: len(open(sys.executable, "rb").read(4)))
attempt("workspace_root", lambda: listing(targets["workspace_root"]))
report["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
report["data"] = resource.getrlimit(resource.RLIMIT_DATA)[0]
report["processes_seen"] = len([p for p in os.listdir("/proc") if p.isdigit()])
open("final_answer.txt", "w").write(json.dumps(report))
"""

MUST_FAIL = [
    "admin_finish_own_token", "admin_finish_no_key", "admin_stream_own_token", "admin_stream_no_key",
    "viewer_via_proxy", "metrics_via_proxy", "admin_port", "engine", "env_server", "other_loopback_port", "off_machine", "read_store", "list_env_state", "read_other_workspace",
    "read_home_secret", "write_project", "write_etc", "read_shadow", "signal_orchestrator",
]  # fmt: skip
"""A write to the host's temp folder lands in the rollout's own /tmp (checked on the host, not by the probe)."""
MUST_WORK = ["proxy_chat", "gateway_initialize", "write_workspace", "write_tmp", "read_system", "workspace_root"]


class ProbeAdapter:
    """The probe as ``python harness.py`` (cold) or ``python -m harness`` (forked from the warm pool)."""

    name = "probe"

    def __init__(self, targets: dict[str, object], module: bool) -> None:
        self.targets, self.module = targets, module

    def launch(self, ctx: RolloutContext) -> Launch:
        env = {"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.token, "MCP_URL": ctx.mcp_url,
               "ROLLOUT_ID": ctx.rollout_id, "RUN_ID": ctx.run_id}  # fmt: skip
        files = {"harness.py": PROBE, "targets.json": json.dumps(self.targets)}
        argv = (sys.executable, "-m", "harness") if self.module else (sys.executable, "harness.py")
        return Launch(argv=argv, env=env, files=files)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[StackInfo]:
    with live_stack(tmp_path_factory.mktemp("sandbox-stack"), tiny_model_dir) as info:
        yield info


def _home_secret() -> str:
    """A file that exists in this user's home (read only by the probe, never written); a made-up path if none."""
    home = Path.home()
    files = sorted(p for p in home.iterdir() if p.is_file()) if home.is_dir() else []
    return str(files[0] if files else home / ".ssh" / "id_ed25519")


@needs_sandbox
@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "warm-pool"])
def test_every_way_out_fails_and_the_rollout_still_works(stack: StackInfo, tmp_path: Path, pooled: bool) -> None:
    workspaces = tmp_path / "ws"
    other = workspaces / "rollwire-other-rollout" / "workspace"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("another rollout's work")
    project_file = Path(__file__).with_name(f".sandbox-probe-{os.getpid()}")
    listener = socket.create_server(("127.0.0.1", 0))
    admin = urlsplit(stack.admin_url)
    targets = {
        "proxy": stack.proxy_url.rstrip("/"),
        "admin": [admin.hostname, admin.port],
        "engine": stack.engine_url,
        "env_server": stack.env_url,
        "listener_port": listener.getsockname()[1],
        "store": sqlite_path(stack.db_url),
        "state": stack.state_root,
        "other_secret": str(other / "secret.txt"),
        "home_secret": _home_secret(),
        "host_home": str(Path.home()),
        "project_file": str(project_file),
        "host_tmp_file": str(tmp_path / "escaped.txt"),
        "orchestrator_pid": os.getpid(),
        "workspace_root": str(workspaces),
    }
    settings = orchestrator_settings(
        workspace_root=str(workspaces), keep_workspaces=True, warm_pool=pooled, warm_preload=["json"],
        sandbox_max_processes=300, sandbox_max_memory_mb=4096, deadline_s=120,
    )  # fmt: skip
    book = RolloutBook(open_engine(stack.db_url))
    hidden = [Path(stack.state_root), Path(sqlite_path(stack.db_url) or "").parent]

    async def run() -> None:
        async with LocalRuntime(settings, host_env=dict(os.environ), hidden=hidden) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=ProbeAdapter(targets, pooled), scorer=ExitCodeScorer(),
                settings=settings, endpoints=Endpoints(stack.proxy_url, stack.gateway_url),
            )  # fmt: skip
            await scheduler.run(plan(f"sandbox-{pooled}", 1, 1))

    try:
        with listener:
            anyio.run(run)
        (row,) = book.rollouts(f"sandbox-{pooled}")
        assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
        report = json.loads(row.final_answer or "{}")
        escaped = {name: report[name] for name in MUST_FAIL if report[name][0] != "failed"}
        assert not escaped, escaped
        broken = {name: report[name] for name in MUST_WORK if report[name][0] != "ok"}
        assert not broken, broken
        assert "200" in report["proxy_chat"][1] and "200" in report["gateway_initialize"][1]
        (own,) = ast.literal_eval(report["workspace_root"][1])  # no other rollout's folder in sight: only its own
        assert own == f"rollwire-{row.id}" or (pooled and own.startswith("rollwire-slot-")), own  # a slot: as made
        home = ast.literal_eval(report["list_host_home"][1]) if report["list_host_home"][0] == "ok" else []
        assert Path(targets["home_secret"]).name not in home and ".ssh" not in home  # only what it runs from shows
        assert report["nproc"] == 300 and report["data"] == 4096 << 20
        assert report["processes_seen"] < 10  # its own pid namespace: no host process is visible
        assert not project_file.exists() and not (tmp_path / "escaped.txt").exists()
        assert (workspaces / f"rollwire-{row.id}" / "workspace" / "mine.txt").read_text() == "escaped"
    finally:
        project_file.unlink(missing_ok=True)


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
    command = [sys.executable, "-m", "rollwire.cli", "rollouts", *args]
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
