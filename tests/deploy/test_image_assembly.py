"""CI builds the stack image and the reference agent's rollout image from ``containers/rollwire.Containerfile``, the
file users build, without a daemon (``containers/assemble-stack.sh``: buildah, on a Debian base from mmdebstrap and
a wheelhouse from this machine's pip) and checks the config (entrypoint ``rollwire``, uid 10001),
that every command the stack manifests run in it is a working CLI command, by running each in the image's root
filesystem (chroot as uid 10001; containers cannot run here), and that the rollout image holds no task suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollwire.harness_adapters.images import STACK_IMAGE
from rollwire.orchestrator.manifests import render
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import IMAGE_SUITES
from rollwire.settings import KubernetesSettings
from tests.deploy.tools import ROOT

SCRIPT = ROOT / "containers" / "assemble-stack.sh"
TAG = "rollwire:ci"
ROLLOUT_TAG = "rollout-reference:ci"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the assembly: minutes (torch and all)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "assembling a root filesystem needs root (mmdebstrap's root mode and chroot)"
    missing = [tool for tool in ("mmdebstrap", "buildah", "chroot") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install mmdebstrap buildah; .ci/run does)"
    return None


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    why = _why_not()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("image")
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run([str(SCRIPT), str(out), TAG, ROLLOUT_TAG], capture_output=True, text=True, timeout=1500, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    yield out
    shutil.rmtree(out, ignore_errors=True)


def _blob(layout: Path, digest: str) -> Path:
    algo, _, hexa = digest.partition(":")
    return layout / "blobs" / algo / hexa


def _manifest(layout: Path, tag: str) -> dict[str, Any]:
    index = json.loads((layout / "index.json").read_text())
    refs = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    assert len(refs) == 1, index
    return dict(json.loads(_blob(layout, refs[0]["digest"]).read_text()))


def _config(layout: Path, tag: str = TAG) -> dict[str, Any]:
    return dict(json.loads(_blob(layout, _manifest(layout, tag)["config"]["digest"]).read_text()))


def _files(layout: Path, tag: str) -> set[str]:
    """Every path in the image's layers (uncompressed tars: the script commits without compression)."""
    names: set[str] = set()
    for layer in _manifest(layout, tag)["layers"]:
        with tarfile.open(_blob(layout, layer["digest"])) as archive:
            names.update(member.name.lstrip("./") for member in archive)
    return names


def _run_in(rootfs: Path, config: dict[str, Any], argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` in the image's files as its user, with its env (not a container: no namespaces, no limits)."""
    env = [item for item in config["config"]["Env"]]
    command = ["chroot", f"--userspec={config['config']['User']}", str(rootfs), "/usr/bin/env", "-i", *env]
    return subprocess.run([*command, *argv], capture_output=True, text=True, timeout=300)


def test_image_config_is_the_cli_as_non_root(image: Path) -> None:
    config = _config(image / "oci")
    assert config["config"]["Entrypoint"] == ["rollwire"]
    assert config["config"]["Cmd"] == ["--help"]
    assert config["config"]["User"] == "10001:10001"
    steps = [step.get("created_by", "") for step in config["history"]]  # built from the file users build:
    user = "useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp/home"  # its final stage's own step
    assert user in (SCRIPT.parent / "rollwire.Containerfile").read_text() and any(user in s for s in steps), steps
    result = _run_in(image / "rootfs", config, [*config["config"]["Entrypoint"], *config["config"]["Cmd"]])
    assert result.returncode == 0, result.stderr[-2000:]
    assert all(command in result.stdout for command in ("proxy", "mcp", "train", "agent"))


def test_the_suites_sit_where_rollout_pods_cover_them(image: Path) -> None:
    """Rollout pods of the stack image hide its task suites under an empty volume (``pod_spec.IMAGE_SUITES``): that
    only holds while the image keeps them at one of those folders."""
    found = [path for path in IMAGE_SUITES if (image / "rootfs" / path.lstrip("/") / "tiny.json").is_file()]
    assert found, f"the assembled image keeps the suites elsewhere than {IMAGE_SUITES}"


def test_the_rollout_image_holds_no_task_suite(image: Path) -> None:
    """The reference agent's (and the Agents SDK's) rollout image is the stack's installation less the suites."""
    site = "opt/rollwire/lib/python3.11/site-packages/rollwire"
    suites, agent = f"{site}/mcp_servers/tasks/suites/", f"{site}/harness_adapters/reference.py"
    stack, rollout = _files(image / "oci", TAG), _files(image / "oci", ROLLOUT_TAG)
    assert f"{suites}tiny.json" in stack and agent in stack
    assert agent in rollout
    assert not [name for name in rollout if name.startswith(suites.rstrip("/"))]
    assert _config(image / "oci", ROLLOUT_TAG)["config"]["User"] == "10001:10001"


def test_every_stack_command_runs_in_the_image(image: Path) -> None:
    """``rollwire proxy``, ``rollwire mcp gateway``, ``rollwire mcp serve``, ``rollwire train``: each answers --help."""
    config = _config(image / "oci")
    commands = []
    for doc in render(KubernetesSettings()):
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container["image"] == STACK_IMAGE:
                words = [word for word in container["command"] if not word.startswith("-")]
                commands.append(words[:3] if words[1] == "mcp" else words[:2])
    assert sorted(map(tuple, commands)) == [
        ("rollwire", "mcp", "gateway"), ("rollwire", "mcp", "serve"), ("rollwire", "proxy"), ("rollwire", "train")
    ]  # fmt: skip
    for command in commands:
        result = _run_in(image / "rootfs", config, [*command, "--help"])
        assert result.returncode == 0, (command, result.stderr[-2000:])
        assert result.stdout.startswith(f"usage: {' '.join(command)}"), result.stdout[:200]
