"""The whole tree passes the type checker and the linter with the project's own settings (``[tool.mypy]`` and
``[tool.ruff]`` in pyproject.toml): every cross-package import resolves to its file, so a renamed function or a
changed signature fails here, before any test that happens to call it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("rollwire", "tests", "bench", *(link.readlink().name for link in (ROOT / "rollwire").iterdir()
                                           if link.is_symlink()))  # fmt: skip
"""The folders ``[tool.mypy] files`` takes in: rollwire/ with each folder it links to, the tests, the benches."""


def _run(*argv: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MYPY_CACHE_DIR": str(ROOT / ".mypy_cache")},
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)  # a first run, with no cache, reads every installed package it follows (~2 min here)
def test_mypy_passes_on_the_whole_tree(tmp_path: Path) -> None:
    done = _run("mypy", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    found = re.search(r"no issues found in (\d+) source files", done.stdout)
    assert found, done.stdout[-2000:]
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    ours = [name for name in tracked.stdout.split() if name.split("/", 1)[0] in CHECKED]
    assert int(found.group(1)) >= len(ours), "mypy checked fewer files than the tree holds"


def test_ruff_passes_on_the_whole_tree(tmp_path: Path) -> None:
    done = _run("ruff", "check", "--no-cache", ".", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
