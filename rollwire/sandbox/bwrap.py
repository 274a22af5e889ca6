"""The bubblewrap (``bwrap``) command line of one sandbox: what the local runtime runs each rollout's harness in, and
what the MCP gateway runs each rollout's third-party stdio server in (one sandbox per rollout, per server).

A harness at its defaults runs shell commands a policy in training chose; a stdio MCP server runs code others
wrote, which a rollout's tool calls reach. Inside the sandbox:

- the host file system is read-only; the sandbox's working folder (a rollout's workspace, a server's folder) and
  its own ``/tmp`` are the only writable places;
- hidden behind empty tmpfs mounts: every home folder (``/root``, ``/home``, the user's own), the folders of
  other rollouts (the caller names their root in ``hidden``), the project's state folders (the store, env state,
  the task suites: the caller names them), ``/run`` and ``/var/tmp`` (host unix sockets: a socket on a read-only
  mount still accepts connections); what the command itself needs from under them (the interpreter, the
  installed project, the command's binary) is shown again read-only;
- an empty network namespace (unless the caller keeps the host's, ``network=True``): only loopback, on which
  ``sandbox_init`` listens at each relayed ``host:port`` (a harness's proxy and gateway) and relays to unix
  sockets the caller bound into the sandbox (``orchestrator/runtimes/local/relay.py``); nothing else (engine, env
  servers, other ports, the internet) is reachable;
- its own user, pid, ipc and uts namespaces, no capabilities (even when the caller is root), the sandbox
  killed with its caller (``--die-with-parent``), rlimits on processes, memory and CPU, and a seccomp filter
  (``seccomp``) passed as ``--seccomp FD``.

A harness's own bubblewrap sandbox nests inside this one (Codex's default read-only sandbox): user namespaces
stay allowed inside, and run as root the sandbox's user is not uid 0 (``ROOT_RUN_UID``), which a nested bwrap
could not map. A nested ``--proc /proc`` mounts a fresh procfs only when this one's /proc is fully visible; run
as root, bwrap covers /proc/irq and /proc/bus read-only (host root is mapped, so they count as writable), the
kernel then refuses the nested proc mount, and Codex falls back to binding this sandbox's /proc (its own pid
namespace: the rollout's processes only). Run as another user there are no covers and the nested mount works.

``probe`` says once per bwrap path whether a sandbox can be made here (bwrap present, namespaces
allowed); each user refuses to start without one unless the user turned its sandbox off (``require``).
"""

from __future__ import annotations

import functools
import importlib.util
import ipaddress
import json
import math
import os
import shutil
import site
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rollwire.errors import InvalidRequest

INIT_SCRIPT = Path(__file__).with_name("sandbox_init.py")
SOCKET_DIR = "/run/rollwire"
"""Where the endpoints' unix sockets appear inside the sandbox (a fresh, read-only folder of the sandbox's root)."""
CONTROL_SOCKET = f"{SOCKET_DIR}/control.sock"
"""Where a warm-pool slot's fork server finds the orchestrator's one-use control socket (``warm_pool``)."""
SYSTEM_TREES = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The host's system trees, shown read-only (or as the symlinks they are on a merged-/usr system)."""
PACKAGES = ("rollwire", *(f"rollwire.{name}" for name in ("app", "engine", "proxy", "harness_adapters", "mcp_servers",
                                                          "orchestrator", "trainer")))  # fmt: skip
"""rollwire's packages (each component a folder of its own, linked from rollwire/): a harness may import them, so
their folders are shown; nothing else of a source checkout is (its tests, its git history, its state)."""
SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
NAMESPACES = ("--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "--as-pid-1")
ROOT_RUN_UID = 1000
"""The sandbox's uid when its caller runs as root: seen as root, a harness would take root's paths (nested bwrap
writes uid maps it may not, Claude Code refuses to skip permissions); the files stay the caller's."""
PROBE_TIMEOUT_S = 20.0
SHEBANG_BYTES = 256
NODE_SCRIPTS = (".js", ".mjs", ".cjs")


class SandboxUnavailable(InvalidRequest):
    """No sandbox can be made here; the message is one line that says why and how to go on without one."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A loopback ``host:port`` the harness may reach, relayed through a unix socket."""

    host: str
    port: int


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    processes: int = 0
    memory_bytes: int = 0
    cpu_s: int = 0
    file_bytes: int = 0
    """RLIMIT_FSIZE: a write past it fails (SIGXFSZ ends the writer), so no one file outgrows the rollout's disk."""


@functools.cache
def probe(bwrap: str) -> str | None:
    """None when ``bwrap`` can build this runtime's sandbox here, else one line saying why not."""
    path = shutil.which(bwrap)
    if path is None:
        return f"bubblewrap ({bwrap!r}) is not installed; install Debian's 'bubblewrap' package"
    try:
        done = subprocess.run(
            [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *NAMESPACES, "true"],
            capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap ({path}) could not run: {exc}"
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot create namespaces here ({detail[-1] if detail else f'exit {done.returncode}'})"
    return None


def require(bwrap: str, *, what: str, hint: str) -> str:
    """The bwrap path to use, or SandboxUnavailable in one line: ``cannot sandbox <what>: <why>; <hint>`` (the
    hint is the caller's way out: the switch that turns its sandbox off)."""
    reason = probe(bwrap)
    if reason is not None:
        raise SandboxUnavailable(f"cannot sandbox {what}: {reason}; {hint}", param="sandbox")
    return shutil.which(bwrap) or bwrap


def relayed_endpoints(urls: Iterable[str]) -> list[Endpoint]:
    """The distinct loopback ``host:port`` of ``urls``; others cannot be relayed (the sandbox has no route out)."""
    found: dict[Endpoint, None] = {}
    for url in urls:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        hosts = ["127.0.0.1", "::1"] if host == "localhost" else [host]
        for one in hosts:
            try:
                if ipaddress.ip_address(one).is_loopback:
                    found[Endpoint(one, port)] = None
            except ValueError:
                continue
    return list(found)


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _installation() -> list[Path]:
    """Where this interpreter and its packages are installed: the only ``sys.path`` entries a sandbox shows. The
    others (the folder the CLI was started from, a ``PYTHONPATH`` entry) may be a home or a project with secrets."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix)}
    roots.update(Path(p) for p in site.getsitepackages())
    return [root.resolve() for root in roots]


def _package_folders() -> list[Path]:
    """Each rollwire package's folder: in an editable install these sit in a source checkout, shown folder by folder."""
    folders = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        folders += [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec else []
    return folders


def _interpreter(path: str, search: str | None) -> str | None:
    """The interpreter a script's ``#!`` line names (``/usr/bin/env node``: node found on PATH), if any."""
    try:
        with open(path, "rb") as script:
            head = script.read(SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if words and Path(words[0]).name == "env":  # the first word that is not an option nor an assignment
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not names:
            return None
        return names[0] if "/" in names[0] else shutil.which(names[0], path=search)
    return words[0] if words else None


def _node_package(real: Path) -> Path | None:
    """The npm package a JavaScript file belongs to (its nearest folder with a ``package.json``): ``npx`` and a
    server's ``bin`` entry load the rest of their package (and its ``node_modules``) from there."""
    if real.suffix not in NODE_SCRIPTS:
        return None
    for folder in real.parents:
        if (folder / "package.json").is_file():
            return folder
    return None


def _found(word: str, search: str | None) -> str | None:
    """A command by name (found on PATH) or a file by absolute path (a script, another venv's python)."""
    found = shutil.which(word, path=search) if word and "/" not in word else None
    return found or (word if word.startswith("/") and Path(word).is_file() else None)


def _file_paths(found: str) -> list[Path]:
    """A command's folder, its real file's, the venv it belongs to and the npm package it is part of, if any."""
    real = Path(found).resolve()
    paths = [Path(found).parent, real.parent]
    if (Path(found).parent.parent / "pyvenv.cfg").is_file():
        paths.append(Path(found).parent.parent)
    package = _node_package(real)
    return [*paths, package] if package is not None else paths


def _command_paths(word: str, search: str | None) -> list[Path]:
    """What a command needs: its own files (``_file_paths``) and those of the interpreter its ``#!`` line names."""
    found = _found(word, search)
    if found is None:
        return []
    interpreter = _interpreter(found, search)
    inner = _found(interpreter, search) if interpreter else None
    return [*_file_paths(found), *(_file_paths(inner) if inner else [])]


def _needed_paths(commands: Sequence[str], env: Mapping[str, str]) -> list[Path]:
    """What the launch needs beyond the system trees: this interpreter, its installed packages, rollwire's package
    folders, and each of ``commands`` (by name on PATH, or by absolute path) with what it needs (``_command_paths``).
    Never a home folder itself, nor anything that holds one or the root."""
    installation = _installation()
    paths = [Path(sys.executable).resolve().parent, *installation, *_package_folders()]
    paths += [Path(p).resolve() for p in sys.path if p and Path(p).is_dir() and _under(Path(p).resolve(), installation)]
    for word in commands:
        paths += _command_paths(word, env.get("PATH"))
    homes = {Path.home().resolve(), Path("/home"), Path("/root"), Path("/")}
    return [path for path in paths if not any(home == path or home.is_relative_to(path) for home in homes)]


@functools.cache
def _unreadable_in_etc() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Files and folders of /etc that others may not read: run as root, the sandbox's user is the host's root
    mapped, and would read them (keys, credentials a package keeps there); they are covered instead."""
    files, folders = set(SECRET_FILES), set()
    for top, dirs, names in os.walk("/etc", onerror=lambda _exc: None):
        for name in list(dirs):
            path = os.path.join(top, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and (mode & 0o005) != 0o005:
                folders.add(path)
                dirs.remove(name)
        for name in names:
            path = os.path.join(top, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) and not mode & 0o004:
                files.add(path)
    return tuple(sorted(f for f in files if os.path.isfile(f))), tuple(sorted(folders))


def _cover(path: Path, read_only_later: list[str]) -> list[str]:
    """Hide ``path`` under an empty mount: nothing to read. A folder's cover is made read-only once every mount
    is in place (a workspace may be bound below it), so nothing can be left there for a later rollout."""
    if path.is_dir():
        read_only_later.append(str(path))
        return ["--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def bwrap_command(
    bwrap: str,
    *,
    argv: Sequence[str],
    env: Mapping[str, str],
    workspace: Path,
    tmp: Path,
    sockets: Mapping[Endpoint, Path],
    hidden: Sequence[Path],
    limits: SandboxLimits,
    writable: Sequence[Path] = (),
    control: Path | None = None,
    seccomp_fd: int | None = None,
    commands: Sequence[str] | None = None,
    network: bool = False,
    exact_env: bool = False,
) -> list[str]:
    """The full command line: bwrap's mounts and namespaces, then ``sandbox_init`` running ``argv``.

    The sandbox's root is empty but for what is listed (an allowlist): the system trees read-only (minus what
    others may not read), this interpreter and its packages, rollwire's package folders (minus what ``hidden``
    covers: the local runtime names the task suites there, whose checker arguments are the answers), the
    commands ``argv`` names; the workspace and ``tmp`` writable, a fresh ``/dev/shm``. Everything else is
    read-only, the root included, so a recycled sandbox keeps nothing of a rollout but what its host empties.
    ``hidden``: state folders to cover where a shown folder holds them. ``writable``: more host paths bound
    read-write at their own path (a pooled sandbox's log file). ``control``: the host's one-use control socket
    of a warm-pool slot. ``seccomp_fd``: the filter for ``--seccomp``. ``commands``: the words of ``argv`` whose
    files are shown (default: every word). ``network``: keep the host's network namespace (no relay needed).
    ``exact_env``: the command gets ``env`` and nothing else (``sandbox_init`` drops every other variable the
    process was started with, e.g. what a client library adds on its own)."""
    command, covers = [bwrap], ["/dev", "/"]
    for tree in SYSTEM_TREES:
        if os.path.islink(tree):
            command += ["--symlink", os.readlink(tree), tree]
        elif os.path.isdir(tree):
            command += ["--ro-bind", tree, tree]
    files, folders = _unreadable_in_etc()
    for unreadable in (*files, *folders):
        command += _cover(Path(unreadable), covers)
    command += ["--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc", "--bind", str(tmp), "/tmp"]
    system = [Path(tree) for tree in SYSTEM_TREES]
    shown: list[Path] = []
    needed = _needed_paths(argv if commands is None else commands, env)
    for path in sorted({p.resolve() for p in needed if p.exists()}, key=lambda p: len(p.parts)):
        if not _under(path, [*system, *shown]):
            shown.append(path)
            command += ["--ro-bind", str(path), str(path)]
    for path in dict.fromkeys(Path(p).resolve() for p in hidden):
        if path.exists() and any(path != s and path.is_relative_to(s) for s in shown) and not path.is_symlink():
            command += _cover(path, covers)
    for link, target in _links_on_the_way(needed):
        if not _under(link, [*system, *shown]):  # a link inside a shown folder is there already
            command += ["--symlink", target, str(link)]
    command += ["--bind", str(workspace), str(workspace), "--dir", SOCKET_DIR]
    for path in writable:
        command += ["--bind", str(path), str(path)]
    relay = []
    for index, (endpoint, path) in enumerate(sockets.items()):
        inside = f"{SOCKET_DIR}/{index}.sock"
        command += ["--ro-bind", str(path), inside]
        relay.append([endpoint.host, endpoint.port, inside])
    if control is not None:
        command += ["--ro-bind", str(control), CONTROL_SOCKET]
    for cover in covers:
        command += ["--remount-ro", cover]
    command += [*NAMESPACES, *(["--share-net"] if network else []), "--chdir", str(workspace)]
    if seccomp_fd is not None:
        command += ["--seccomp", str(seccomp_fd)]
    if os.geteuid() == 0:
        command += ["--unshare-user", "--uid", str(ROOT_RUN_UID), "--gid", str(ROOT_RUN_UID)]
    spec: dict[str, Any] = {
        "relay": relay,
        "limits": {
            "nproc": limits.processes, "data": limits.memory_bytes, "cpu": limits.cpu_s, "fsize": limits.file_bytes
        },
        "argv": list(argv),
        "unset": [] if "PWD" in env else ["PWD"],  # bwrap sets PWD; the harness gets the launch's env only
    }
    if exact_env:
        spec["keep"] = sorted(env)
    return [*command, "--", sys.executable, "-I", "-S", str(INIT_SCRIPT), json.dumps(spec)]


def _links_on_the_way(paths: Iterable[Path]) -> list[tuple[Path, str]]:
    """The symlinks on the way to each path as the launch names it (a venv reached through a linked folder): the
    sandbox shows the real folders, and these links make the named paths lead there too."""
    links: dict[Path, str] = {}
    for path in paths:
        current = Path(path.anchor)
        for part in path.parts[1:]:
            current = current / part
            if current.is_symlink() and current not in links:
                links[current] = os.readlink(current)
            if current in links:
                current = current.resolve()  # the rest of the path lies under the link's target
    return sorted(links.items(), key=lambda item: len(item[0].parts))


def mount_points(command: Sequence[str], under: Path) -> list[Path]:
    """Where a bwrap command line mounts something at or below ``under`` (the destinations of its binds)."""
    found = []
    for i, word in enumerate(command[:-2]):
        if word in ("--bind", "--ro-bind"):
            destination = Path(command[i + 2])
            if destination != under and destination.is_relative_to(under):
                found.append(destination)
    return found


def cpu_seconds(deadline_s: float) -> int:
    """A CPU-time cap per process that a harness within its wall-clock deadline cannot reach on one core."""
    return max(1, math.ceil(deadline_s)) + 5


def state_folders(paths: Iterable[str | os.PathLike[str] | None]) -> list[Path]:
    """Existing folders among ``paths`` (a file stands for its folder, e.g. a SQLite store)."""
    found = []
    for raw in paths:
        if not raw:
            continue
        path = Path(raw).expanduser()
        path = path if path.is_dir() else path.parent
        if path.is_dir() and path != Path("/"):
            found.append(path.resolve())
    return found


__all__ = [
    "CONTROL_SOCKET",
    "INIT_SCRIPT",
    "ROOT_RUN_UID",
    "SOCKET_DIR",
    "Endpoint",
    "SandboxLimits",
    "SandboxUnavailable",
    "bwrap_command",
    "cpu_seconds",
    "mount_points",
    "probe",
    "relayed_endpoints",
    "require",
    "state_folders",
]
