"""Adapter for the Codex CLI (``codex exec``) at Codex's defaults, configured only by a ``config.toml`` in the
rollout's workspace.

Codex reads its configuration from ``$CODEX_HOME/config.toml``; the adapter points ``CODEX_HOME`` at a
folder inside the workspace (a relative path, resolved against the workspace, which every runtime makes
the working directory), so nothing is read from or written to a developer's ``~/.codex``. The config
names one model provider (the rollout's base URL, Responses wire API, the token taken from an
environment variable) and one MCP server (the rollout's gateway URL over streamable HTTP, its tools
approved up front, since nobody is there to approve them; ``mcp=False`` leaves Codex its own tools only).
Nothing else: Codex's own model (the proxy serves any name), tools (hosted ``web_search`` included, which the
proxy leaves out and records), sandbox (``codex exec``: read-only) and approval policy (``never``).

What Codex sends depends on the model name. Its default model gets no top-level ``tools``: an
``additional_tools`` input item carries them, the main one the freeform ``exec`` (JavaScript that calls the
other tools, the MCP server's among them as ``tools.mcp__rollwire__<tool>(...)``), answered by
``custom_tool_call`` items. Another name gets classic function tools, the MCP server's as one ``namespace``
tool, and ``web_search``. The proxy serves both (``proxy/dialects/responses_tools.py``).

Where results land: the last agent message in ``final_answer.txt`` (``--output-last-message``); Codex's
session transcript under ``.codex/sessions/``; its stdout/stderr in the runtime's log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.harness_adapters.images import default_image

CODEX_HOME = ".codex"
"""Workspace-relative CODEX_HOME."""
TOKEN_ENV = "ROLLWIRE_TOKEN"
FINAL_ANSWER = "final_answer.txt"
SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")
WRAPPER = 'export TMPDIR="${ROLLWIRE_WORKSPACE:-$PWD}/.tmp"; mkdir -p "$TMPDIR" && exec "$@"\n'
"""Codex runs each shell command of its (default) sandbox through a ``codex-linux-sandbox`` link it makes under
CODEX_HOME, and refuses to make it when CODEX_HOME lies in the system temp folder, where local workspaces
live: every command then fails (``bwrap: execvp codex-linux-sandbox``). Its temp folder inside the
workspace fixes that, and keeps its temp files in the workspace; no Codex setting changes."""


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML escapes)."""
    return json.dumps(value, ensure_ascii=True)


def codex_config(
    ctx: RolloutContext,
    *,
    model: str | None = None,
    sandbox: str | None = None,
    mcp: bool = True,
    mcp_startup_timeout_s: float = 20.0,
    tool_timeout_s: float = 60.0,
) -> str:
    """The whole ``config.toml`` for one rollout: Codex at its defaults, told only where the model and the
    gateway are. Its model, tools (hosted ``web_search`` included: the proxy leaves it out and records that),
    sandbox and approval policy are Codex's own unless an option names them."""
    head = f"model = {_toml(model)}\n" if model else ""  # unset: Codex's default model, served like any name
    if sandbox:
        head += f"sandbox_mode = {_toml(sandbox)}\n"  # unset: `codex exec`'s default (read-only)
    config = f"""\
{head}model_provider = "rollwire"

[model_providers.rollwire]
name = "rollwire"
base_url = {_toml(ctx.base_url)}
wire_api = "responses"
env_key = "{TOKEN_ENV}"              # the rollout token, sent as a Bearer key
request_max_retries = 0              # a retried call would be recorded twice (a branch the policy never took)
stream_max_retries = 0
"""
    if mcp:
        config += f"""
[mcp_servers.rollwire]
url = {_toml(ctx.mcp_url)}
bearer_token_env_var = "{TOKEN_ENV}"
startup_timeout_sec = {mcp_startup_timeout_s:g}
tool_timeout_sec = {tool_timeout_s:g}
default_tools_approval_mode = "approve"  # `codex exec` never asks: an MCP call not approved up front is refused
"""
    return config


class CodexAdapter:
    """Runs ``codex exec`` on the task prompt with a per-rollout CODEX_HOME."""

    name = "codex"
    uses_default_model = True
    """Codex's default model is served like any name (the proxy's alias table): tools as its users get them."""

    def __init__(
        self,
        model: str | None = None,
        sandbox: str | None = None,
        command: str = "codex",
        extra_args: Sequence[str] = (),
        mcp: bool = True,
        mcp_startup_timeout_s: float = 20.0,
        tool_timeout_s: float = 60.0,
        image: str | None = None,
    ) -> None:
        if sandbox is not None and sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, not {sandbox!r}")
        self.model = model
        self.sandbox = sandbox
        self.command = command
        self.extra_args = tuple(extra_args)
        self.mcp = mcp
        self.mcp_startup_timeout_s = mcp_startup_timeout_s
        self.tool_timeout_s = tool_timeout_s
        self.image = image or default_image(self.name)

    def launch(self, ctx: RolloutContext) -> Launch:
        config = codex_config(
            ctx,
            model=self.model,
            sandbox=self.sandbox,
            mcp=self.mcp,
            mcp_startup_timeout_s=self.mcp_startup_timeout_s,
            tool_timeout_s=self.tool_timeout_s,
        )
        # --skip-git-repo-check: a rollout's workspace is no git repository, and `codex exec` refuses to run
        # outside one without it; --color never and --output-last-message only shape the log and the answer
        argv = (
            self.command, "exec", "--skip-git-repo-check", "--color", "never",
            "--output-last-message", FINAL_ANSWER, *self.extra_args, "--", ctx.prompt,
        )  # fmt: skip
        env = {"CODEX_HOME": CODEX_HOME, TOKEN_ENV: ctx.token, "NO_COLOR": "1"}
        return Launch(
            argv=("sh", "-c", WRAPPER, "codex-rollout", *argv),
            env=env,
            files={f"{CODEX_HOME}/config.toml": config},
            final_answer_path=FINAL_ANSWER,
            image=self.image,
            nested_sandbox=True,  # at its defaults Codex runs each command in a bubblewrap sandbox of its own
        )


__all__ = ["CODEX_HOME", "CodexAdapter", "codex_config"]
