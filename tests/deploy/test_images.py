"""The image build files: hadolint finds nothing, each pins the harness version its adapter's image tag names (and
CI tests), and every command the stack manifests run in the rollwire image is a command of the CLI."""

from __future__ import annotations

import re
import subprocess
from typing import Any, Protocol, runtime_checkable

import pytest

from rollwire.app.cli.__main__ import build_parser
from rollwire.harness_adapters.images import (
    AGENT_IMAGE,
    HARNESS_VERSIONS,
    MCP_RUNNER_IMAGE,
    MCP_RUNNER_SERVERS,
    REGISTRY,
    STACK_IMAGE,
    VERSION,
    default_image,
)
from rollwire.harness_adapters.registry import BUILTIN, get_adapter
from rollwire.orchestrator.manifests import render
from rollwire.settings import KubernetesSettings
from tests.deploy.tools import ROOT, hadolint

CONTAINERS = ROOT / "containers"
BUILD_FILES = sorted(CONTAINERS.glob("*.Containerfile"))
VERSION_ARG = {
    "codex": "CODEX_VERSION", "claude-code": "CLAUDE_CODE_VERSION", "openai-agents": "OPENAI_AGENTS_VERSION",
    "mini-swe-agent": "MINI_SWE_AGENT_VERSION",
}  # fmt: skip


@runtime_checkable
class _Imaged(Protocol):
    image: str


def _image(name: str, **options: Any) -> str:
    """The rollout image of the adapter registered as ``name`` (every built-in adapter names one)."""
    adapter = get_adapter(name, **options)
    assert isinstance(adapter, _Imaged), name
    return adapter.image


def _arg(text: str, name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", text, re.M)
    assert match, f"no ARG {name}=... line"
    return match.group(1)


def test_hadolint_finds_nothing() -> None:
    assert len(BUILD_FILES) == 6, BUILD_FILES  # the stack, one per adapter that is not the reference agent, MCP runner
    result = subprocess.run(
        [hadolint(), "--failure-threshold", "style", *map(str, BUILD_FILES)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_a_root_unpinned_file(tmp_path) -> None:
    bad = tmp_path / "bad.Containerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    result = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3007" in result.stdout and "DL3013" in result.stdout


def test_every_adapter_names_its_image_at_its_harness_version() -> None:
    assert set(BUILTIN) == {"reference", *HARNESS_VERSIONS}
    assert STACK_IMAGE == f"{REGISTRY}/rollwire:{VERSION}"
    assert _image("reference") == AGENT_IMAGE == f"{REGISTRY}/rollout-reference:{VERSION}"
    stack_file = (CONTAINERS / "rollwire.Containerfile").read_text()
    assert f"-t {STACK_IMAGE} " in stack_file and f"--target rollout -t {AGENT_IMAGE} " in stack_file
    assert _arg((CONTAINERS / "rollout-openai-agents.Containerfile").read_text(), "ROLLWIRE_IMAGE") == AGENT_IMAGE
    for name, version in HARNESS_VERSIONS.items():
        image = _image(name)
        assert image == default_image(name) == f"{REGISTRY}/rollout-{name}:{VERSION}-{version}"
        text = (CONTAINERS / f"rollout-{name}.Containerfile").read_text()
        assert _arg(text, VERSION_ARG[name]) == version, name
        assert f"-t {image} " in text, f"{name}: the build line in its header must tag {image}"
    assert _image("codex", image="reg.local/codex:1") == "reg.local/codex:1"


def test_mcp_runner_image_pins_its_servers_and_holds_no_suites() -> None:
    """The runner image is built from the rollout image (no task suites: a server's tools must not reach the
    answers), holds each server of ``MCP_RUNNER_SERVERS`` at its version, and those CI tests are the same pins."""
    from tests.mcp_servers.npm_servers import PACKAGES

    text = (CONTAINERS / "mcp-runner.Containerfile").read_text()
    assert f"-t {MCP_RUNNER_IMAGE} " in text
    assert _arg(text, "ROLLWIRE_IMAGE") == AGENT_IMAGE
    assert MCP_RUNNER_IMAGE == KubernetesSettings().mcp_runner_image
    for package, version in MCP_RUNNER_SERVERS.items():
        name = package.rsplit("/", 1)[-1].removeprefix("server-").removeprefix("mcp-server-")
        arg = f"MCP_SERVER_{name.upper()}_VERSION"
        assert _arg(text, arg) == version, package
        assert f"{package}@${{{arg}}}" in text or f"{package}==${{{arg}}}" in text, package
    tested = {spec.rsplit("@", 1)[0]: spec.rsplit("@", 1)[1] for spec in PACKAGES.values()}
    assert all(MCP_RUNNER_SERVERS[package] == version for package, version in tested.items()), tested


def test_build_files_pin_what_ci_installs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"@openai/codex@{HARNESS_VERSIONS['codex']}" in ci
    assert f"@anthropic-ai/claude-code@{HARNESS_VERSIONS['claude-code']}" in ci
    assert f"mini-swe-agent=={HARNESS_VERSIONS['mini-swe-agent']}" in ci


@pytest.mark.parametrize("path", BUILD_FILES, ids=lambda p: p.name)
def test_images_are_non_root_and_pinned(path) -> None:
    text = path.read_text()
    bases = re.findall(r"^ARG (?:PYTHON|NODE|ROLLWIRE)_IMAGE=(\S+)$", text, re.M)
    assert bases and all(re.search(r":\d[\w.-]*$", base) for base in bases), bases  # a version tag, never latest
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1] == "10001:10001", users  # the uid the pod specs run as
    assert re.search(r'^ENTRYPOINT \["', text, re.M)


def test_stack_commands_are_cli_commands() -> None:
    """What each stack workload runs in the rollwire image parses as a `rollwire` command line."""
    parser = build_parser()
    seen = []
    for doc in render(KubernetesSettings()):
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []):
            if container["image"] != STACK_IMAGE:
                continue
            command = container["command"]
            assert command[0] == "rollwire", command
            args = parser.parse_args(command[1:])  # exits (SystemExit) on an unknown command or flag
            seen.append(args.command)
    assert sorted(seen) == ["mcp", "mcp", "proxy", "train"], seen
    assert 'ENTRYPOINT ["rollwire"]' in (CONTAINERS / "rollwire.Containerfile").read_text()


def test_rollout_pods_run_the_images_python_and_registry() -> None:
    """A host interpreter path becomes the image's ``python``; image_registry moves our images and no others."""
    import sys

    from rollwire.orchestrator.runtimes.kubernetes.pod_spec import pod_argv, pod_image

    assert pod_argv((sys.executable, "-m", "rollwire.app.cli", "agent")) == ["python", "-m", "rollwire.app.cli", "agent"]
    assert pod_argv(("/opt/venvs/mini/bin/python3.11", "runner.py")) == ["python", "runner.py"]
    assert pod_argv(("sh", "-c", "codex exec")) == ["sh", "-c", "codex exec"]
    moved = KubernetesSettings(image_registry="reg.local/team/")
    assert pod_image(default_image("codex"), moved) == f"reg.local/team/rollout-codex:{VERSION}-0.171.0"
    assert pod_image("busybox:1.36", moved) == "busybox:1.36"
    assert pod_image(None, KubernetesSettings()) == STACK_IMAGE
