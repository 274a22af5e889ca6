"""bench/proxy.py runs end to end with a tiny N and prints its table (direct, rollwire and pass-through rows, both
modes), with the stub answering at once or paced like an engine (one token per HTTP chunk: the proxy reads a
chunked stream)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "proxy.py"


@pytest.mark.parametrize("pace_ms", ["0", "1"])
def test_bench_prints_the_table(pace_ms: str) -> None:
    argv = [sys.executable, str(BENCH), "--requests", "4", "--concurrency", "1", "2", "--turns", "2", "--no-litellm"]
    argv += ["--pace-ms", pace_ms, "--passthrough"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split() for line in done.stdout.splitlines()]
    rows = [r for r in lines if r[2:3] in (["direct"], ["rollwire"], ["passthrough"])]
    assert [tuple(r[:3]) for r in rows] == [  # each kind of row direct, then through the proxy, then passed through
        (c, mode, name)
        for c in ("1", "2")
        for mode in ("json", "stream")
        for name in ("direct", "rollwire", "passthrough")
    ]
    assert all(float(r[5]) > 0 for r in rows)  # requests/s measured
    assert all(float(r[6]) >= 0 for r in rows if r[2] != "direct")  # each server's CPU time per request
    assert all(len(r) == 11 and float(r[10]) > 0 for r in rows if r[2] == "rollwire")  # what its store keeps a call
    assert all(len(r) == 10 for r in rows if r[2] == "passthrough")  # it keeps no store
    split = [" ".join(r[:2]) for r in lines if "rollwire's own work:" in " ".join(r)]
    assert split == ["1 json", "1 stream", "2 json", "2 stream"]  # the closing lines split rollwire's row


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_proxy", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH.parent))  # its sibling modules (the stub, the load generator)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
    return module


def test_a_row_that_cannot_run_says_why_and_the_summary_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A server that closes or refuses the load generator's connections fails its row with the reason; the bench
    goes on, and the closing comparison says a row failed rather than printing a ratio."""
    bench = _bench()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    spec = {"host": "127.0.0.1", "port": port, "kind": "direct", "paths": ["/v1/completions"], "prompt": [1]}
    spec |= {"concurrency": 1, "requests": 2, "turns": 1, "stream": False}
    with pytest.raises(bench.LoadFailed, match="exited 1: .*Connect"):
        bench.load(spec, os.sched_getaffinity(0))
    args = argparse.Namespace(concurrency=[1], modes=["json"], workers=[1], rounds=1)
    failed = bench.LoadFailed("load generator exited 1: ConnectionResetError")
    bench.summary({(1, "json", "rollwire"): [bench.Row([1.0], 1.0, 0.001)], (1, "json", "litellm"): [failed]}, args)
    assert "a row failed (see above)" in capsys.readouterr().out


def test_rounds_are_pooled_request_by_request_and_their_range_shown(capsys: pytest.CaptureFixture[str]) -> None:
    """``--rounds``: the closing ratio is over every request of every round (not a mean of the rounds' ratios),
    and the rounds' own range follows it; so does the added p50, against each round's direct row."""
    bench = _bench()
    args = argparse.Namespace(concurrency=[1], modes=["json"], workers=[1], rounds=2)
    ours = [bench.Row([1.0] * 100, 1.0, 0.1), bench.Row([1.5] * 300, 1.0, 0.3)]  # 1 CPU ms a call in both
    lite = [bench.Row([9.0] * 100, 1.0, 0.8), bench.Row([9.0] * 100, 1.0, 1.2)]  # 8, then 12 CPU ms a call
    direct = [bench.Row([0.1] * 100, 1.0, None), bench.Row([0.1] * 100, 1.0, None)]
    bench.summary({(1, "json", "rollwire"): ours, (1, "json", "litellm"): lite, (1, "json", "direct"): direct}, args)
    out = capsys.readouterr().out
    assert "requests per CPU-second: 10.0x (rounds: 8.00-12.00x)" in out
    assert "added p50, pooled: 1.40 ms (rounds: 0.90-1.40 ms)" in out  # 300 of the 400 calls took 1.5 ms


FLAKY_SERVER = """
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MARKER = Path(os.environ["FLAKY_MARKER"])
ANSWER = json.dumps({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "run_shell", "arguments": "{}"}}]}}]}).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, body):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer(b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        if not MARKER.exists():  # the first instance dies on its first call
            MARKER.touch()
            os.kill(os.getpid(), signal.SIGSEGV)
        self._answer(ANSWER)


port = int(sys.argv[sys.argv.index("--port") + 1])
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_a_server_that_dies_under_a_row_is_named_and_started_again(tmp_path: Path) -> None:
    """A stand-in for LiteLLM that segfaults on its first call: its first row fails, the bench says how it exited
    and starts it again, and the next row measures the new one."""
    fake = tmp_path / "litellm"
    fake.write_text(f"#!{sys.executable}\n{FLAKY_SERVER}")
    fake.chmod(0o755)
    argv = [sys.executable, str(BENCH), "--requests", "4", "--concurrency", "1", "2", "--turns", "2"]
    argv += ["--modes", "json", "--litellm", str(fake)]
    env = {**os.environ, "FLAKY_MARKER": str(tmp_path / "died-once")}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split(None, 3) for line in done.stdout.splitlines()]
    lite = [r for r in lines if "litellm" in r[:3]]
    assert lite[0][:2] == ["1", "json"] and lite[0][3].startswith("failed: "), done.stdout
    assert lite[1] == ["litellm", "exited", "on", "SIGSEGV: started again"], done.stdout
    assert lite[2][:3] == ["2", "json", "litellm"] and float(lite[2][3].split()[2]) > 0, done.stdout  # req/s


def test_the_loopback_floor_prints_a_row_per_layout_and_transport() -> None:
    """bench/loopback.py measures a round trip on one core and, where the process may use two, across them."""
    loopback = BENCH.parent / "loopback.py"
    argv = [sys.executable, str(loopback), "--round-trips", "200", "--bytes", "64"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    layouts = ["one core", "two cores"] if len(os.sched_getaffinity(0)) > 1 else ["one core"]
    assert [(f"{r[0]} {r[1]}", r[2]) for r in rows] == [(lay, t) for t in ("tcp", "unix") for lay in layouts]
    assert all(float(r[3]) > 0 for r in rows)  # a round trip's wall time was measured
    assert all(float(r[7]) == 1.0 for r in rows if r[1] == "core")  # each one-core row is its own baseline


def test_the_loopback_floor_refuses_an_empty_run() -> None:
    loopback = BENCH.parent / "loopback.py"
    argv = [sys.executable, str(loopback), "--round-trips", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--round-trips and --bytes must be at least 1" in done.stderr


AB = BENCH.parent / "proxy_ab.py"


def test_the_ab_bench_prints_a_row_per_round_and_mode_and_a_closing_line_per_mode() -> None:
    """bench/proxy_ab.py runs HEAD's proxy and the working tree's side by side, each build first in every other
    round, and averages the rounds."""
    argv = [sys.executable, str(AB), "--calls", "6", "--rounds", "2", "--modes", "json", "stream"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split() for line in done.stdout.splitlines()]
    rows = [r for r in lines if r[:1] in (["json"], ["stream"])]
    assert [tuple(r[:3]) for r in rows] == [("json", "1", "base"), ("stream", "1", "base")] + [
        ("json", "2", "tree"),
        ("stream", "2", "tree"),
    ]
    assert all(float(r[6]) > 0 and float(r[7]) > 0 for r in rows)  # each build's p50 was measured
    closing = [" ".join(r) for r in lines if r[:1] in (["json:"], ["stream:"])]
    assert [c.split()[0] for c in closing] == ["json:", "stream:"]
    assert all("x HEAD's (mean of 2 rounds" in c for c in closing)


def test_the_ab_bench_says_which_revision_git_cannot_read() -> None:
    argv = [sys.executable, str(AB), "--base", "no-such-revision", "--calls", "3", "--rounds", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "cannot read revision 'no-such-revision' from git:" in done.stderr.strip().splitlines()[-1]


LAYOUT_PROBE = """
import subprocess
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import proxy_ab
dest = proxy_ab.lay_out(proxy_ab.export("HEAD", Path(sys.argv[2]) / "src"), Path(sys.argv[2]) / "built")
probe = "import rollwire.proxy.app as app, rollwire.store as store; print(app.__file__); print(store.__file__)"
where = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=proxy_ab.build_env(dest))
print(dest)
print(where.stdout, where.stderr)
"""


def test_a_laid_out_revision_is_what_the_proxy_imports(tmp_path: Path) -> None:
    """A build's copy holds the revision's files as installed subpackages, and a process with it first on
    PYTHONPATH imports rollwire from it, not from the project's own install (else both builds would be one)."""
    done = subprocess.run(
        [sys.executable, "-c", LAYOUT_PROBE, str(BENCH.parent), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    built, *imported = done.stdout.split()
    head = subprocess.run(
        ["git", "-C", str(BENCH.parents[1]), "show", "HEAD:proxy/app.py"], capture_output=True, check=True
    ).stdout
    assert (Path(built) / "rollwire" / "proxy" / "app.py").read_bytes() == head
    assert len(imported) == 2 and all(Path(f).is_relative_to(built) for f in imported), done.stdout
