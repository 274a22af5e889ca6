"""`rollwire up` starts the local stack, and the lines it prints work when pasted, as the README shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sampling import SAMPLE_SEED_ENV


def _wait_for(process: subprocess.Popen[str], marker: str, timeout: float) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} in time; output so far: {lines[-20:]}")


def _after(lines: list[str], label: str) -> str:
    return lines[lines.index(f"  # {label}") + 1].strip()


@pytest.mark.slow
def test_up_serves_the_reference_agent_and_the_openai_client(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "ROLLWIRE_HOME": str(home), "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1", **SAMPLE_SEED_ENV}
    ports = [f"--{part}-port=0" for part in ("proxy", "admin", "engine", "env", "gateway")]
    process = subprocess.Popen(
        [sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "up", *ports],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        lines = _wait_for(process, "then: rollwire traces", timeout=240)
        stack = json.loads((home / "stack.json").read_text())
        urls = ("proxy_url", "admin_url", "gateway_url", "env_url", "engine_url")
        assert all(stack[k].startswith("http://127.0.0.1:") for k in urls) and len({stack[k] for k in urls}) == 5
        assert f"viewer: {stack['admin_url']}/ui/?key={stack['operator_key']}" in "\n".join(lines)
        for pid in stack["pids"].values():  # the key reached the proxy through its environment, not its argv
            assert stack["operator_key"].encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        base_url = next(line for line in lines if line.strip().startswith("base URL")).split()[-1]
        assert base_url.startswith(stack["proxy_url"] + "/r/")  # the rollout is handed the main listener only

        agent = subprocess.run(shlex.split(_after(lines, "reference agent")), capture_output=True, text=True, env=env,
                               timeout=120, cwd=tmp_path)  # fmt: skip
        assert agent.returncode == 0, agent.stderr[-2000:]
        assert re.search(r"agent: \w+ after \d+ turn", agent.stdout + agent.stderr), agent.stdout[-500:]
        client = subprocess.run(shlex.split(_after(lines, "openai client")), capture_output=True, text=True, env=env,
                                timeout=120, cwd=tmp_path)  # fmt: skip
        assert client.returncode == 0, client.stderr[-2000:]

        traces = subprocess.run(
            [sys.executable, "-m", "rollwire.app.cli", "traces", "--db", stack["db_url"], "ls"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert traces.returncode == 0, traces.stderr
        ready = next(line.split()[2] for line in lines if line.startswith("ready rollout "))
        row = next(line.split() for line in traces.stdout.splitlines() if line.startswith(ready))
        assert int(row[-2]) >= 2  # the agent's call(s) and the client's call, recorded on the ready rollout
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, rest[-2000:]
    assert "stopping" in rest and not (home / "stack.json").exists()
    for pid in stack["pids"].values():  # every part stopped with it
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_up_unknown_task_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "ROLLWIRE_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-m", "rollwire.app.cli", "up", "--task", "no-such-task"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and "no-such-task" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "home" / "stack.json").exists()
