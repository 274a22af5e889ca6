"""What a hostile harness tries from inside a rollout: the scripts the red-team tests run as harnesses, and the
host-side rules their reports are held to.

``hostile_script`` is one probe: the attacks on the sandbox itself (``SANDBOX``) and, where the rollout runs
against a real stack, the attacks on the stack's doors (``STACK``). Each attack is an ``attempt``: it has
succeeded when it returns something truthy, and the report names it under ``escaped``; what an earlier rollout in
the same slot left is reported under ``seen``; what a rollout must still be able to do is reported under
``worked``. ``ANSWERS`` are the tricks played with the final answer and the rollout's own exit.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from rollwire.mcp_servers.tasks.loader import SUITES_DIR

PRELUDE = r"""
import ctypes, errno, json, os, pathlib, re, socket, sys, urllib.error, urllib.request
targets = json.load(open("targets.json"))
mark = os.environ["ROLLWIRE_SAMPLE"]
libc = ctypes.CDLL(None, use_errno=True)
report = {"escaped": {}, "seen": {}, "worked": {}, "attempts": 0}

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

def write(path):
    with open(path, "w") as handle:
        handle.write("planted")
    return path

def http(url, body=None, headers=None):
    request = urllib.request.Request(url, data=body, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read(300).decode(errors="replace")

def connect(host, port, timeout=3):
    socket.create_connection((host, port), timeout=timeout).close()
    return "connected"

"""

SANDBOX = r"""
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
attempt("other_loopback_port", lambda: socket.create_connection(("127.0.0.1", targets["listener_port"]), timeout=3))
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
"""

STACK = r"""
# 5. the real stack's doors: what the rollout is handed must work, nothing else may answer
key = os.environ["OPENAI_API_KEY"]
json_headers = {"Content-Type": "application/json"}
chat = json.dumps({"model": "any", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
report["worked"]["proxy_chat"] = http(os.environ["OPENAI_BASE_URL"] + "/chat/completions", chat,
                                      {"Authorization": f"Bearer {key}", **json_headers})[0]
init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}).encode()
report["worked"]["gateway_initialize"] = http(os.environ["MCP_URL"], init, {
    "Accept": "application/json, text/event-stream", **json_headers})[0]
proxy_root = targets["proxy"]  # the relayed proxy address: what a rollout reaches besides its own /r/<token> routes
finish = json.dumps({"reward": 1.0}).encode()
for key_name, bearer in (("own_token", key), ("no_key", None)):
    headers = {**json_headers, **({"Authorization": f"Bearer {bearer}"} if bearer else {})}
    attempt(f"admin_finish_{key_name}", lambda headers=headers: http(
        f"{proxy_root}/admin/v1/rollouts/{os.environ['ROLLOUT_ID']}/finish", finish, headers))
    attempt(f"admin_stream_{key_name}", lambda headers=headers: http(
        f"{proxy_root}/admin/v1/trajectories/stream?run={os.environ['RUN_ID']}&wait=0", None, headers))
attempt("viewer_via_proxy", lambda: http(f"{proxy_root}/ui/"))
attempt("metrics_via_proxy", lambda: http(f"{proxy_root}/metrics"))
attempt("admin_port", lambda: connect(*targets["admin"]))
attempt("engine", lambda: http(targets["engine"] + "/v1/models"))
attempt("env_server", lambda: http(targets["env_server"] + "/"))
attempt("off_machine", lambda: connect("192.0.2.1", 80, timeout=2))
attempt("read_store", lambda: read(targets["store"]))
attempt("list_env_state", lambda: os.listdir(targets["state"]))
attempt("read_other_workspace", lambda: read(targets["other_secret"]))
attempt("write_project", lambda: write(targets["project_file"]))
attempt("read_shadow", lambda: read("/etc/shadow"))
attempt("signal_orchestrator", lambda: os.kill(targets["orchestrator_pid"], 0) or "signalled")
attempt("other_workspaces", lambda: [n for n in os.listdir(targets["workspace_root"])
                                     if n != os.path.basename(os.path.dirname(os.getcwd()))])
attempt("list_home", lambda: os.listdir(os.path.dirname(os.path.dirname(targets["home_secret"]))))
try:  # the host's temp folder is not the sandbox's /tmp: the host checks that nothing landed there
    write(targets["host_tmp_file"])
except OSError:
    pass
import resource
report["limits"] = [resource.getrlimit(resource.RLIMIT_NPROC)[0], resource.getrlimit(resource.RLIMIT_DATA)[0]]
report["processes_seen"] = len([p for p in os.listdir("/proc") if p.isdigit()])
"""

REPORT = r"""
def unescaped(field):  # mountinfo writes a space, tab, newline or backslash as \ooo
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
mounts = []
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    mounts.append([unescaped(fields[3]), unescaped(fields[4]), fields[fields.index("-") + 1]])
report["mounts"] = mounts
report["where"] = os.getcwd()
pathlib.Path("final_answer.txt").write_text(json.dumps(report))
"""


def hostile_script(*, stack: bool) -> str:
    """The probe: the sandbox attacks, the stack's doors too where a real stack runs, then the report."""
    return PRELUDE + SANDBOX + (STACK if stack else "") + REPORT


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


@contextmanager
def planted_secrets(folder: Path, stack_file: Path) -> Iterator[dict[str, object]]:
    """The probe's targets on the host: ``stack_file`` (holding an operator key), a home folder with a key whose
    path is on ``sys.path`` (as when the CLI is started from the home folder), a port listening on the host's
    loopback, and a file name in the installation, checked afterwards: no rollout may have written it."""
    home = folder / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
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
            "host_paths": [str(folder), str(Path.home())] if Path.home() != Path("/") else [str(folder)],
            "private_paths": [str(home), str(stack_file.parent)],
        }
    finally:
        sys.path.remove(str(home))
        listener.close()
        planted = installation_file.exists()
        installation_file.unlink(missing_ok=True)
        assert not planted, "a rollout wrote into the installation"


FRESH_FILE_SYSTEMS = {"devtmpfs", "proc", "devpts", "mqueue", "sysfs"}
"""Kernel file systems whose mount roots are names the kernel gives (``/null``, ``/irq``), not a host's layout."""


def host_mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every mount this process sees: the host's own layout, which the sandbox inherits
    where it shows a tree that has mounts inside (a container's ``/etc/hosts``, a project bound in from elsewhere)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        found.append((_unescaped(fields[3]), _unescaped(fields[4])))
    return found


def foreign_mount_sources(
    mounts: Iterable[Sequence[str]], own: Iterable[str], host: Iterable[tuple[str, str]] = ()
) -> list[list[str]]:
    """The mounts whose source (mountinfo's root field) tells the rollout a host path it is not shown anyway.

    A source is told already when it is what the host itself shows at the path the mount is shown at (``host``:
    the same path, or its tail on a file system of its own, or the host's own mount there), the root of a file
    system made for the sandbox (``/``, bubblewrap's own root, a kernel file system), or within one of ``own``:
    the rollout's own folders (its workspace's folder, which it sees as its working folder, holds its ``/tmp``
    and its sockets)."""
    own_paths = [PurePosixPath(path) for path in own]
    host_sources = {(PurePosixPath(point), PurePosixPath(root)) for root, point in host}
    found = []
    for root, point, fstype in mounts:
        source = PurePosixPath(root)
        if root == "/" or point == "/" or fstype in FRESH_FILE_SYSTEMS or point.endswith(root):
            continue
        if _as_the_host_shows(source, PurePosixPath(point), host_sources):
            continue
        if any(source == path or source.is_relative_to(path) or _tail_of(source, path) for path in own_paths):
            continue
        found.append([root, point, fstype])
    return found


def _as_the_host_shows(
    source: PurePosixPath, point: PurePosixPath, host: set[tuple[PurePosixPath, PurePosixPath]]
) -> bool:
    """``source`` is what the host's own mounts give at ``point``: the deepest host mount at or above ``point``,
    followed down to it."""
    above = [(h_point, h_root) for h_point, h_root in host if point == h_point or point.is_relative_to(h_point)]
    if not above:
        return False
    deepest = max(len(h_point.parts) for h_point, _ in above)
    return any(
        source == h_root / point.relative_to(h_point) for h_point, h_root in above if len(h_point.parts) == deepest
    )


def _unescaped(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _tail_of(source: PurePosixPath, folder: PurePosixPath) -> bool:
    """``source`` lies within a tail of ``folder`` (the folder seen from the root of the file system it is on)."""
    return any(source.is_relative_to(PurePosixPath("/", *folder.parts[i:])) for i in range(2, len(folder.parts)))


__all__ = ["ANSWERS", "DISK_MB", "foreign_mount_sources", "host_mounts", "hostile_script", "planted_secrets"]
