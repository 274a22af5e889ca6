"""A non-editable install (a wheel, as the stack image's ``pip install``) carries every file the packages read at run
time: the tiny model's template and weights, the viewer's static files, the shipped task suites. Their folders hold
no ``__init__.py``, so setuptools leaves them out unless ``pyproject.toml`` names them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.deploy.tools import ROOT

FOLDERS = {"rollwire": "rollwire"} | {
    link.readlink().name: f"rollwire/{link.name}" for link in (ROOT / "rollwire").iterdir() if link.is_symlink()
}
"""Each source folder and where the wheel carries it: the core, and each component rollwire/ links to."""


def _tracked() -> list[str]:
    result = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return result.stdout.split()


@pytest.mark.slow
def test_the_wheel_carries_every_data_file(tmp_path: Path) -> None:
    tracked = _tracked()
    source = tmp_path / "source"  # a copy: the build writes build/ and egg-info beside the sources
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name, follow_symlinks=False)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = tmp_path.glob("rollwire-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        carried = set(archive.namelist())
    expected = set()
    for name in tracked:
        folder, _, rest = name.partition("/")
        if folder in FOLDERS and rest and not (ROOT / name).is_symlink():
            expected.add(f"{FOLDERS[folder]}/{rest}")
    missing = sorted(expected - carried)
    assert not missing, f"the wheel leaves out {missing}"
    assert "rollwire/mcp_servers/tasks/suites/tiny.json" in carried
