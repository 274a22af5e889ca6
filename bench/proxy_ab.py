"""Two builds of `rollwire proxy` measured in one run, side by side: a git revision and the working tree.

    python bench/proxy_ab.py                          # HEAD against the working tree, 3,000 calls each a round
    python bench/proxy_ab.py --base main~3 --rounds 4 --modes json stream

A change worth a few percent of a call's CPU hides in the machine's drift. Rows of ``bench/proxy.py`` for the same
build, run minutes apart, differ by ±3% (a shared machine's speed moves by more within the hour), so a change
that saves 2% cannot be told from none there. Here both builds serve at once: two proxies pinned to the same
core, in front of one stub on another, and one conversation at a time (concurrency 1, the cost that drift hides
most) whose calls alternate between them, turn by turn. Whatever slows the machine slows both builds' calls alike.

Each round starts both proxies anew, gives each the same conversations (``bench/proxy_load.py``'s multi-turn tool
calls, recording on) and reads each proxy's CPU time from /proc. Two processes of one build can differ by a
percent or two, and in A/A runs (no change in the tree) the build started and called second in a round ran
~1-2% cheaper. So every round has new processes, rounds alternate which build goes first, and the closing line
averages them: run an even number of rounds (an A/A run's mean came within 0.5% of 1 in four rounds). An A/A run
is also the way to see this machine's noise.

The two proxies share one core's caches, so a call here costs more CPU than in ``bench/proxy.py``'s rows
(~1.1-1.3 against ~1.05 ms a json call at concurrency 1): read the ratio, not the absolute figures.

Each build runs from a copy laid out as the installed package is (each component's folder inside ``rollwire/``),
so the base revision must still run with the flags ``bench/proxy.py`` starts the proxy with.
"""

from __future__ import annotations

import argparse
import ast
import io
import math
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import event_loop
from proxy_load import Conn, Conversation, harness_tools, system_prompt

from proxy import HERE, Server, _cores, _port, cpu_seconds, process, rollouts, rollwire_argv, stub_argv, tool_call_ids

ROOT = HERE.parent
TURNS = 3
"""Calls a conversation makes (``bench/proxy.py``'s default ``--turns``)."""
WARM_CALLS = 60
"""Calls each proxy answers before its first round (imports, first connections, caches)."""


def package_folders(root: Path) -> dict[str, str]:
    """Subpackage -> folder: ``rollwire/`` alone where it links to the component folders (the copy follows the
    links), or the mapping a revision's ``setup.py`` made before the links (``FOLDERS``, read without running it)."""
    setup = root / "setup.py"
    if not setup.is_file():
        return {"rollwire": "rollwire"}
    for node in ast.parse(setup.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FOLDERS" for t in node.targets):
            folders: dict[str, str] = ast.literal_eval(node.value)
            return folders
    raise SystemExit(f"{setup} has no FOLDERS mapping")


def lay_out(source: Path, dest: Path) -> Path:
    """``source``'s packages copied under ``dest`` as installed (``rollwire/proxy`` from ``proxy/``, ...): a
    folder to put first on PYTHONPATH. Returns ``dest``."""
    skip = shutil.ignore_patterns("__pycache__")
    for package, folder in sorted(package_folders(source).items()):  # "rollwire" first: the others go inside it
        shutil.copytree(source / folder, dest / package.replace(".", "/"), ignore=skip, dirs_exist_ok=True)
    return dest


def cli_module(folder: Path) -> str:
    """The module that runs the build's CLI (``python -m``): the application layer's, or the core's before it."""
    return "rollwire.app.cli" if (folder / "rollwire" / "app" / "cli").is_dir() else "rollwire.cli"


def export(revision: str, dest: Path) -> Path:
    """The files of ``revision`` (any name git knows) in ``dest``."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision], capture_output=True, check=False
    )
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise SystemExit(f"cannot read revision {revision!r} from git: {why[-1] if why else 'no output'}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def has_admin_listener(folder: Path) -> bool:
    """Whether the build in ``folder`` (``lay_out``'s) serves its admin API on a port of its own (``--admin-port``);
    a build that does not serves it on its main port, and is started without the flag."""
    return "--admin-port" in (folder / cli_module(folder).replace(".", "/") / "proxy.py").read_text()


def build_env(folder: Path) -> dict[str, str]:
    """The environment that runs a build from ``folder`` (``lay_out``'s): first on PYTHONPATH, and the working
    directory kept off the path (PYTHONSAFEPATH), where the project's own ``rollwire/`` would come first."""
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONSAFEPATH": "1"}


@dataclass
class Measured:
    cpu_ms: float
    """CPU time a call (user + system, the proxy process and its children)."""
    p50_ms: float


async def alternate(ports: list[int], paths: list[list[str]], conversations: int, stream: bool) -> list[list[float]]:
    """``conversations`` conversations for each port, one at a time, each turn sent to every port in turn; each
    port's call latencies in ms."""
    conns = [Conn("127.0.0.1", port, "") for port in ports]
    latencies: list[list[float]] = [[] for _ in ports]
    tools, system = harness_tools(0), system_prompt(0)
    try:
        for n in range(conversations):
            talks = [Conversation(p[n], system, tools, stream) for p in paths]
            for _ in range(TURNS):
                for conn, talk, spent in zip(conns, talks, latencies):
                    start = time.perf_counter()
                    data = await conn.post(talk.path, talk.body())
                    spent.append((time.perf_counter() - start) * 1e3)
                    talk.answered(data)
    finally:
        for conn in conns:
            if conn.writer is not None:
                conn.writer.close()
    return latencies


def round_of(servers: list[Server], calls: int, stream: bool) -> list[Measured]:
    conversations = math.ceil(calls / TURNS)
    paths = [[f"/{p}/chat/completions" for p in rollouts(s.admin, conversations)] for s in servers]
    before = [cpu_seconds(s.pid) for s in servers]
    latencies = event_loop.run(alternate([s.port for s in servers], paths, conversations, stream))
    return [
        Measured((cpu_seconds(s.pid) - b) / len(spent) * 1e3, statistics.median(spent))
        for s, b, spent in zip(servers, before, latencies)
    ]


@contextmanager
def stub() -> Iterator[int]:
    """The stub upstream on the load's cores, for the whole run: its port."""
    up = _port()
    with process(stub_argv(up, tool_call_ids()), f"http://127.0.0.1:{up}/v1/models", _cores()[1]):
        yield up


@contextmanager
def proxies(builds: dict[str, Path], up: int, tmp: Path, round_no: int) -> Iterator[dict[str, Server]]:
    """A new proxy per build (started in ``builds``' order) on the server's cores, stopped on the way out."""
    with ExitStack() as stack:
        servers = {}
        for name, folder in builds.items():
            port, admin = _port(), _port() if has_admin_listener(folder) else None
            argv = rollwire_argv(port, up, tmp / f"{name}-{round_no}.db", admin_port=admin, cli=cli_module(folder))
            server = Server(name, argv, port, "", "/health", _cores()[0], build_env(folder), admin_port=admin)
            stack.callback(server.admin.close)
            stack.callback(server.stop)
            server.start()
            servers[name] = server
        yield servers


def warm(servers: dict[str, Server], stream: bool) -> None:
    """``WARM_CALLS`` calls to each, one build at a time (warming is not what a round measures)."""
    for server in servers.values():
        paths = [f"/{p}/chat/completions" for p in rollouts(server.admin, WARM_CALLS // TURNS)]
        event_loop.run(alternate([server.port], [paths], WARM_CALLS // TURNS, stream))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", default="HEAD", help="the git revision to compare the working tree with (default HEAD)"
    )
    parser.add_argument("--calls", type=int, default=3000, help="calls each build answers a round (default 3000)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="rounds, each on new processes, each build first in every other (default 6)",
    )
    parser.add_argument("--modes", nargs="+", default=["json"], choices=["json", "stream"], help="default json")
    args = parser.parse_args()
    if args.calls < 3 or args.rounds < 1:
        parser.error("--calls must be at least 3 (one conversation) and --rounds at least 1")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        print(f"laying out {args.base} and the working tree ...", flush=True)
        builds = {"base": lay_out(export(args.base, tmp / "base-src"), tmp / "base")}
        builds["tree"] = lay_out(ROOT, tmp / "tree")
        with stub() as up:
            os.sched_setaffinity(0, _cores()[1])  # the load beside the stub, off the proxies' core
            table(args, builds, up, tmp)


def table(args: argparse.Namespace, builds: dict[str, Path], up: int, tmp: Path) -> None:
    head = f"{'mode':<6} {'round':>5} {'first':<5} {'base cpu ms':>11} {'tree cpu ms':>11} {'tree/base':>9}"
    print(f"{head} {'base p50':>8} {'tree p50':>8} {'p50 diff':>8}", flush=True)
    ratios: dict[str, list[float]] = {mode: [] for mode in args.modes}
    diffs: dict[str, list[float]] = {mode: [] for mode in args.modes}
    for r in range(args.rounds):
        order = ["base", "tree"] if r % 2 == 0 else ["tree", "base"]
        with proxies({name: builds[name] for name in order}, up, tmp, r) as servers:
            for mode in args.modes:
                warm(servers, mode == "stream")
                measured = dict(zip(order, round_of([servers[n] for n in order], args.calls, mode == "stream")))
                base, tree = measured["base"], measured["tree"]
                ratios[mode].append(tree.cpu_ms / base.cpu_ms if base.cpu_ms else math.nan)
                diffs[mode].append(tree.p50_ms - base.p50_ms)
                cpu = f"{base.cpu_ms:>11.3f} {tree.cpu_ms:>11.3f} {ratios[mode][-1]:>9.3f}"
                p50 = f"{base.p50_ms:>8.3f} {tree.p50_ms:>8.3f} {diffs[mode][-1]:>+8.3f}"
                print(f"{mode:<6} {r + 1:>5} {order[0]:<5} {cpu} {p50}", flush=True)
    odd = "" if args.rounds % 2 == 0 else " (an odd number of rounds: which build goes first is not balanced)"
    for mode in args.modes:
        spread = f"rounds {min(ratios[mode]):.3f}-{max(ratios[mode]):.3f}"
        print(
            f"{mode}: the working tree's CPU a call is {statistics.fmean(ratios[mode]):.3f}x {args.base}'s "
            f"(mean of {args.rounds} rounds, {spread}), its p50 {statistics.fmean(diffs[mode]):+.3f} ms{odd}"
        )


if __name__ == "__main__":
    main()
