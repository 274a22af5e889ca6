"""Adapter for the reference agent (``rollwire agent``): the default harness of the demo."""

from __future__ import annotations

import sys

from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.harness_adapters.images import default_image


class ReferenceAgentAdapter:
    """Runs ``python -m rollwire.app.cli agent`` with the rollout's URLs in the environment."""

    name = "reference"
    runs_model_code = False
    """Its only actions are MCP calls through the gateway: nothing the model chooses runs on the host."""

    def __init__(
        self,
        max_turns: int = 4,
        max_tokens: int = 128,
        temperature: float = 1.0,
        model: str | None = None,
        image: str | None = None,
    ) -> None:
        self.image = image or default_image(self.name)  # Kubernetes: `rollwire agent` without the task suites
        self.model = model  # None: the agent's own default name (the proxy's alias table maps it)
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.temperature = temperature

    def launch(self, ctx: RolloutContext) -> Launch:
        argv = (
            sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "agent",
            "--max-turns", str(self.max_turns),
            "--max-tokens", str(self.max_tokens),
            "--temperature", str(self.temperature),
            "--final-answer", "final_answer.txt",
            *(("--model", self.model) if self.model else ()),
            "--", ctx.prompt,
        )  # fmt: skip
        env = {"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.token, "ROLLWIRE_MCP_URL": ctx.mcp_url}
        return Launch(argv=argv, env=env, final_answer_path="final_answer.txt", image=self.image)


__all__ = ["ReferenceAgentAdapter"]
