"""The Adapter protocol and the Launch it returns: how one harness runs one rollout, for every runtime.

An adapter is pure: given what the orchestrator knows about one rollout (``RolloutContext``) it says
which command to run, with which environment and which config files in the rollout's workspace
(``Launch``). The runtimes (a local subprocess, a Kubernetes Pod) turn a Launch into a process; no
adapter knows which runtime runs it. Writing a new adapter means writing one ``launch`` method.

Conventions every runtime honours:
- ``files`` are written into the rollout's own workspace before the command starts (never the
  user's home); the command runs with the workspace as its working directory and
  ``ROLLWIRE_WORKSPACE`` pointing at it.
- An adapter may carry ``side_call_rules`` (a tuple of ``rollwire.side_calls.SideCallRule``): they
  replace the default rules that tell the harness's side calls (titles, summaries) from its main line.
- The harness ends by exiting; its exit status is recorded. Its final answer is the text it leaves
  in ``final_answer_path`` (relative to the workspace; on Kubernetes it travels back as the
  container's termination message, so keep it under 4 KiB), and the tail of its combined
  stdout/stderr is kept as the log tail.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

WORKSPACE_ENV = "ROLLWIRE_WORKSPACE"
"""Environment variable every runtime sets to the rollout's workspace folder."""

DEFAULT_FINAL_ANSWER = "final_answer.txt"


@dataclass(frozen=True, slots=True)
class RolloutContext:
    """What the orchestrator tells an adapter about one rollout; the token is secret (never log it)."""

    run_id: str
    rollout_id: str
    task_id: str
    prompt: str
    token: str
    base_url: str  # OpenAI-compatible: <proxy>/r/<token>/v1
    anthropic_base_url: str  # Anthropic-compatible: <proxy>/r/<token>
    mcp_url: str  # streamable-HTTP MCP gateway: <gateway>/r/<token>/mcp
    deadline_s: float
    sample_index: int = 0
    task_meta: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Launch:
    """One harness invocation, runtime-neutral: what to run, with what, and where its results land."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)  # workspace-relative path -> text content
    image: str | None = None  # container image for Kubernetes; None means the configured default
    deadline_s: float | None = None  # None means the orchestrator's deadline
    final_answer_path: str = DEFAULT_FINAL_ANSWER  # workspace-relative
    nested_sandbox: bool = False
    """The harness builds a sandbox of its own at its defaults (Codex CLI's bubblewrap): the local runtime's
    sandbox then lets it make namespaces inside (``rollwire/sandbox/seccomp.py``)."""

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("Launch.argv must name a command")
        for path in (*self.files, self.final_answer_path):
            if path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"workspace path must be relative and stay inside the workspace: {path!r}")


def runs_model_code(adapter: object) -> bool:
    """Whether the harness runs what the model chooses on the machine it runs on (a shell, file or code tool):
    such a harness needs a sandbox. An adapter that does not say is taken to."""
    return bool(getattr(adapter, "runs_model_code", True))


@runtime_checkable
class Adapter(Protocol):
    """Runs one harness: ``launch`` builds the Launch for one rollout (pure, no side effects)."""

    name: str

    def launch(self, ctx: RolloutContext) -> Launch: ...


__all__ = ["DEFAULT_FINAL_ANSWER", "WORKSPACE_ENV", "Adapter", "Launch", "RolloutContext", "runs_model_code"]
