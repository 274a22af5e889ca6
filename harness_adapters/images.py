"""The container image each built-in adapter's rollouts run in on Kubernetes, and the harness version it holds.

One place for both: the adapters name their image from here, ``rollwire k8s render --rollout-pod`` prints a
Pod with it, and the image build files (``containers/``) are checked against these versions by the tests, so
an image tag always says which harness is inside. The reference agent is the ``rollwire agent`` command, so
its rollout image is the stack image's installation less the task suites (their checker arguments are the
answers; the env servers need them, no rollout does). ``KubernetesSettings.image_registry`` moves every image of
``REGISTRY`` to the registry a deployer pushed them to; an adapter's ``image`` option replaces one outright.
"""

from __future__ import annotations

REGISTRY = "ghcr.io/rollwire"
"""Where the published images live; the prefix ``image_registry`` replaces."""
VERSION = "0.1.0"
"""The rollwire release the images are built from (pyproject's version)."""
STACK_IMAGE = f"{REGISTRY}/rollwire:{VERSION}"
"""proxy, gateway, env servers, trainer."""
AGENT_IMAGE = f"{REGISTRY}/rollout-reference:{VERSION}"
"""The reference agent's rollouts, and the base of the Agents SDK's image: the stack image without the task
suites (``containers/rollwire.Containerfile``'s ``rollout`` target)."""
MCP_RUNNER_IMAGE = f"{REGISTRY}/mcp-runner:{VERSION}"
"""Third-party MCP servers on Kubernetes (``containers/mcp-runner.Containerfile``): the rollout image's rollwire
(``rollwire mcp bridge``, no task suites), Node, and the servers of ``MCP_RUNNER_SERVERS`` preinstalled."""
MCP_RUNNER_SERVERS: dict[str, str] = {
    "@modelcontextprotocol/server-memory": "2026.8.31",  # npm; mcp-server-memory
    "@modelcontextprotocol/server-everything": "2026.8.31",  # npm; mcp-server-everything
    "@modelcontextprotocol/server-filesystem": "2026.8.31",  # npm; mcp-server-filesystem
    "mcp-server-time": "2026.10.19",  # PyPI, in a venv of its own
}
"""What the runner image holds, each on its PATH under the command its package installs."""

HARNESS_VERSIONS: dict[str, str] = {
    "codex": "0.171.0",  # npm @openai/codex
    "claude-code": "2.1.197",  # npm @anthropic-ai/claude-code
    "openai-agents": "0.24.0",  # PyPI openai-agents
    "mini-swe-agent": "2.4.6",  # PyPI mini-swe-agent
}
"""The harness each rollout image pins, at the versions CI tests the adapters against."""


def default_image(adapter: str) -> str:
    """The image a built-in adapter's rollouts run in: ``AGENT_IMAGE`` for the reference agent, else its own."""
    if adapter == "reference":
        return AGENT_IMAGE
    if adapter not in HARNESS_VERSIONS:
        raise KeyError(f"no rollout image for adapter {adapter!r}; known: reference, {', '.join(HARNESS_VERSIONS)}")
    return f"{REGISTRY}/rollout-{adapter}:{VERSION}-{HARNESS_VERSIONS[adapter]}"


def in_registry(image: str, registry: str) -> str:
    """``image`` moved to ``registry`` when it is one of ours (``REGISTRY/...``); any other image as it is."""
    if registry and image.startswith(f"{REGISTRY}/"):
        return f"{registry.rstrip('/')}/{image[len(REGISTRY) + 1 :]}"
    return image


__all__ = [
    "AGENT_IMAGE",
    "HARNESS_VERSIONS",
    "MCP_RUNNER_IMAGE",
    "MCP_RUNNER_SERVERS",
    "REGISTRY",
    "STACK_IMAGE",
    "VERSION",
    "default_image",
    "in_registry",
]
