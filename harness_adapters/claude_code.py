"""Adapter for Claude Code (``claude -p``): environment variables plus an ``--mcp-config`` file in the workspace.

Claude Code reads its endpoint and key from the environment (``ANTHROPIC_BASE_URL`` is the rollout's
``anthropic_base_url``, without ``/v1``; ``ANTHROPIC_API_KEY`` is the token, sent as ``x-api-key``) and
its settings, sessions and caches from ``$HOME/.claude`` or ``$CLAUDE_CONFIG_DIR``: both are pointed at
the workspace. The MCP server is the rollout's gateway URL, given in a JSON file with
``--strict-mcp-config`` so no other MCP configuration is read.

Everything else is Claude Code's default: its model name, its whole system prompt and built-in tools, its
thinking mode, its output cap (64000 under its own model names, 32000 under others; the proxy clamps it to
what the context leaves), its betas and its side calls. The one thing print mode cannot keep is the permission prompt: at its defaults ``claude -p``
denies every tool call that would ask (Write and Edit, Bash commands that are not read-only, any MCP tool,
reads outside the working folder) and hands the model "Claude requested permissions to ..., but you haven't
granted it yet". So the adapter answers the prompts up front, as an unattended run must: edits in the
working folder are accepted (``--permission-mode acceptEdits``) and Bash and the gateway's tools allowed
(``--allowedTools Bash mcp__rollwire``). ``bypassPermissions`` would be simpler but Claude Code refuses it
as root, which is how containers usually run. The rollout's runtime, not Claude Code, is the boundary.

Where results land: Claude's answer (stdout in print mode) in ``final_answer.txt`` and, copied, in the
runtime's log after its stderr; session transcripts under ``.claude/projects/``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.harness_adapters.images import default_image

MCP_CONFIG = ".rollwire/claude-mcp.json"
FINAL_ANSWER = "final_answer.txt"
SERVER = "rollwire"
PERMISSIONS = ("--permission-mode", "acceptEdits", "--allowedTools", "Bash", f"mcp__{SERVER}")
"""Print mode's only unavoidable setting (see the module docstring): what a person would approve, approved."""
QUIET_ENV = {
    # nothing but the proxy is reachable from a rollout: no update checks, telemetry or error reports to
    # Anthropic's servers. None of these changes a model call (its side calls stay on: the proxy marks them).
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "NO_COLOR": "1",
}
MIN_COMPACT_WINDOW, MAX_COMPACT_WINDOW = 100_000, 1_000_000
"""What ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` takes: Claude Code ignores values outside it."""
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

    Every option defaults to Claude Code's own behaviour. ``model`` names a model (default: Claude Code's
    own choice; the proxy maps any name). ``tools`` is its ``--tools`` (``""`` none, ``"Bash,Read"`` some)
    and ``system_prompt`` replaces its own: both trim its prompt (about 45k tokens of system prompt and
    tools) for a model served with a short context. ``max_output_tokens`` and ``thinking=False`` set its
    output cap and switch thinking off (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, ``MAX_THINKING_TOKENS=0``).
    ``compact_window`` is the context Claude Code budgets for before it compacts (``CLAUDE_CODE_AUTO_COMPACT_WINDOW``;
    it takes 100000 at least; Claude Code 2.1 compacts at 0.8 x (window - 20000) tokens, 64000 for the smallest):
    compaction stays on either way, and its calls are recorded as side calls (``rollwire.side_calls``).
    """

    name = "claude-code"

    def __init__(
        self,
        model: str | None = None,
        max_turns: int = 8,
        max_output_tokens: int | None = None,
        thinking: bool = True,
        tools: str | None = None,
        system_prompt: str | None = None,
        compact_window: int | None = None,
        command: str = "claude",
        extra_args: Sequence[str] = (),
        image: str | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.model = model
        self.thinking = thinking
        self.max_turns = max_turns
        self.max_output_tokens = max_output_tokens
        self.tools = tools
        self.system_prompt = system_prompt
        if compact_window is not None and not MIN_COMPACT_WINDOW <= compact_window <= MAX_COMPACT_WINDOW:
            raise ValueError(f"compact_window must be from {MIN_COMPACT_WINDOW} to {MAX_COMPACT_WINDOW} tokens")
        self.compact_window = compact_window
        self.command = command
        self.extra_args = tuple(extra_args)
        self.image = image or default_image(self.name)

    def launch(self, ctx: RolloutContext) -> Launch:
        claude = [
            self.command, "-p", "--max-turns", str(self.max_turns), "--mcp-config", MCP_CONFIG, "--strict-mcp-config",
            *PERMISSIONS, "--output-format", "text",
        ]  # fmt: skip
        if self.model is not None:
            claude += ["--model", self.model]
        if self.tools is not None:
            claude += ["--tools", self.tools]
        if self.system_prompt is not None:
            claude += ["--system-prompt", self.system_prompt]
        claude += [*self.extra_args, "--", ctx.prompt]
        env = {
            **QUIET_ENV,
            "ANTHROPIC_BASE_URL": ctx.anthropic_base_url,
            "ANTHROPIC_API_KEY": ctx.token,
        }
        if not self.thinking:
            env["MAX_THINKING_TOKENS"] = "0"
        if self.max_output_tokens is not None:
            env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(self.max_output_tokens)
        if self.compact_window is not None:
            env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(self.compact_window)
        return Launch(
            argv=("sh", "-c", WRAPPER, "claude-rollout", *claude),
            env=env,
            files={MCP_CONFIG: mcp_config(ctx)},
            final_answer_path=FINAL_ANSWER,
            image=self.image,
        )


__all__ = ["MAX_COMPACT_WINDOW", "MCP_CONFIG", "MIN_COMPACT_WINDOW", "PERMISSIONS", "QUIET_ENV", "ClaudeCodeAdapter", "mcp_config"]
