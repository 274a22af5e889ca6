"""Adapter for the OpenAI Agents SDK: runs the small runner script (``openai_agents_runner``) in the rollout.

The SDK has no config file of its own: the runner is its configuration (Chat Completions model on the
rollout's base URL, the rollout's gateway as a streamable-HTTP MCP server), and the rollout's URLs come
in the environment.

Where results land: the agent's final output in ``final_answer.txt``; the SDK's logs and the runner's
summary in the runtime's log.
"""

from __future__ import annotations

import sys

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.harness_adapters.images import default_image

FINAL_ANSWER = "final_answer.txt"
RUNNER = "rollwire.harness_adapters.openai_agents_runner"


class OpenAIAgentsAdapter:
    """Runs ``python -m rollwire.harness_adapters.openai_agents_runner`` with the rollout's URLs in the environment."""

    name = "openai-agents"
    runs_model_code = False
    """The runner gives the agent the gateway's MCP tools and nothing else: no shell, file or code tool."""

    def __init__(
        self,
        model: str | None = None,
        max_turns: int = 8,
        max_tokens: int = 256,
        temperature: float = 1.0,
        image: str | None = None,
    ) -> None:
        if max_turns < 1 or max_tokens < 1:
            raise ValueError("max_turns and max_tokens must be at least 1")
        self.model = model or "default"
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.image = image or default_image(self.name)

    def launch(self, ctx: RolloutContext) -> Launch:
        argv = (
            sys.executable, "-m", RUNNER,
            "--model", self.model,
            "--max-turns", str(self.max_turns),
            "--max-tokens", str(self.max_tokens),
            "--temperature", str(self.temperature),
            "--final-answer", FINAL_ANSWER,
            "--", ctx.prompt,
        )  # fmt: skip
        env = {"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.token, "ROLLWIRE_MCP_URL": ctx.mcp_url}
        return Launch(argv=argv, env=env, final_answer_path=FINAL_ANSWER, image=self.image)


__all__ = ["OpenAIAgentsAdapter"]
