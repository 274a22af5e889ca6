"""Adapter for Claude Code (``claude -p``): environment variables plus an ``--mcp-config`` file in the workspace.

Claude Code reads its endpoint and key from the environment (``ANTHROPIC_BASE_URL`` is the rollout's
``anthropic_base_url``, without ``/v1``; ``ANTHROPIC_API_KEY`` is the token, sent as ``x-api-key``) and
its settings, sessions and caches from ``$HOME/.claude`` or ``$CLAUDE_CONFIG_DIR``: both are pointed at
the workspace. The MCP server is the rollout's gateway URL, given in a JSON file with
``--strict-mcp-config`` so no other MCP configuration is read, and its tools are allowed up front
(``--allowedTools mcp__rollwire``): print mode has nobody to ask.

Where results land: Claude's answer (stdout in print mode) in ``final_answer.txt`` and, copied, in the
runtime's log after its stderr; session transcripts under ``.claude/projects/``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rollwire.harness_adapters.base import Launch, RolloutContext

MCP_CONFIG = ".rollwire/claude-mcp.json"
FINAL_ANSWER = "final_answer.txt"
DEFAULT_MODEL = "claude-sonnet-4-5"
"""Claude Code insists on a model name; the proxy's alias table maps it to the served model."""
SERVER = "rollwire"
QUIET_ENV = {
    # nothing but the proxy is reachable from a rollout: no update checks, telemetry, error reports or side calls
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "NO_COLOR": "1",
}
WRAPPER = (
    'export HOME="$ROLLWIRE_WORKSPACE" CLAUDE_CONFIG_DIR="$ROLLWIRE_WORKSPACE/.claude"\n'
    f'"$@" > {FINAL_ANSWER}; status=$?\n'
    f"cat {FINAL_ANSWER}; exit $status\n"
)
"""Runs claude with its stdout kept as the final answer, then copies it into the log; keeps claude's exit status."""


def mcp_config(ctx: RolloutContext) -> str:
    """The ``--mcp-config`` file: one streamable-HTTP server, the rollout's gateway URL."""
    return json.dumps({"mcpServers": {SERVER: {"type": "http", "url": ctx.mcp_url}}}, indent=2) + "\n"


class ClaudeCodeAdapter:
    """Runs ``claude -p`` on the task prompt with the rollout's gateway as its only MCP server.

    ``tools`` is Claude Code's ``--tools`` (its built-in tools: ``""`` none, ``"Bash,Read"`` some, None
    its default set); ``system_prompt`` replaces its own. Both trim a prompt of about 60k tokens
    (Claude's own system prompt and tools) for small-context models.
    """

    name = "claude-code"

    def __init__(
        self,
        model: str | None = None,
        max_turns: int = 8,
        max_output_tokens: int | None = 4096,
        tools: str | None = None,
        system_prompt: str | None = None,
        command: str = "claude",
        extra_args: Sequence[str] = (),
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.model = model or DEFAULT_MODEL
        self.max_turns = max_turns
        self.max_output_tokens = max_output_tokens
        self.tools = tools
        self.system_prompt = system_prompt
        self.command = command
        self.extra_args = tuple(extra_args)

    def launch(self, ctx: RolloutContext) -> Launch:
        claude = [
            self.command, "-p", "--model", self.model, "--max-turns", str(self.max_turns),
            "--mcp-config", MCP_CONFIG, "--strict-mcp-config", "--allowedTools", f"mcp__{SERVER}",
            "--output-format", "text",
        ]  # fmt: skip
        if self.tools is not None:
            claude += ["--tools", self.tools]
        if self.system_prompt is not None:
            claude += ["--system-prompt", self.system_prompt]
        claude += [*self.extra_args, "--", ctx.prompt]
        env = {
            **QUIET_ENV,
            "ANTHROPIC_BASE_URL": ctx.anthropic_base_url,
            "ANTHROPIC_API_KEY": ctx.token,
            "MAX_THINKING_TOKENS": "0",
        }
        if self.max_output_tokens is not None:
            env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(self.max_output_tokens)
        return Launch(
            argv=("sh", "-c", WRAPPER, "claude-rollout", *claude),
            env=env,
            files={MCP_CONFIG: mcp_config(ctx)},
            final_answer_path=FINAL_ANSWER,
        )


__all__ = ["ClaudeCodeAdapter", "MCP_CONFIG", "QUIET_ENV", "mcp_config"]
