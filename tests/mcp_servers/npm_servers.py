"""Third-party MCP servers from npm (``.ci/run`` installs them, pinned) and what the tests need around them: where
they are, and which of their processes are alive."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

PACKAGES = {
    "mcp-server-memory": "@modelcontextprotocol/server-memory@2026.8.31",
    "mcp-server-everything": "@modelcontextprotocol/server-everything@2026.8.31",
}


def npm_server(command: str) -> str:
    """The installed server's path; under CI (``CI`` set) a missing one fails the test, elsewhere it skips."""
    found = shutil.which(command)
    if found is None:
        why = f"{command} is not installed (npm install -g {PACKAGES[command]}; .ci/run does)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def rollouts_running(root: Path) -> set[str]:
    """The rollouts under ``root`` (``<root>/<rollout>/<server>`` folders) that some live process still names: a
    sandboxed server is three processes (bwrap, the sandbox's init, the server), each counted once here."""
    names: set[str] = set()
    for pid in processes_mentioning(str(root)):
        try:
            proc = Path("/proc") / str(pid)
            text = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        names.update(part.split(b"/", 1)[0].decode() for part in text.split(f"{root}/".encode())[1:])
    return names - {""}


def processes_mentioning(marker: str) -> list[int]:
    """Live processes whose command line or environment contains ``marker`` (a test's own temporary path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in text and state != "Z":
            found.append(int(entry.name))
    return found
