"""A served process raises its soft open-files limit to the hard one at start: each session holds a connection."""

from __future__ import annotations

import subprocess
import sys

import pytest

resource = pytest.importorskip("resource")

from rollwire.app.open_files import raise_open_files_limit  # noqa: E402


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    was = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = was[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"a hard limit of {hard} leaves nothing to raise")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        soft = raise_open_files_limit()
        assert soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 256
        if hard != resource.RLIM_INFINITY:
            assert soft == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, was)


def test_a_low_hard_limit_is_kept_and_said() -> None:
    """Only the operator can raise a hard limit: the process keeps it and logs what it caps (in a child: a hard
    limit once lowered stays so for that process)."""
    code = (
        "import logging, resource, sys\n"
        "logging.basicConfig(stream=sys.stdout, format='%(message)s')\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))\n"
        "from rollwire.app.open_files import raise_open_files_limit\n"
        "print(raise_open_files_limit())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "512"
    assert "open-files limit 512" in out
