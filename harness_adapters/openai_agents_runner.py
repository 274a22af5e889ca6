"""A small OpenAI Agents SDK harness: one ``Agent`` with the rollout's MCP gateway, run to its end.

Run as ``python -m rollwire.harness_adapters.openai_agents_runner INSTRUCTION``. The SDK's own pieces do
all the work: ``MCPServerStreamableHttp`` lists and calls the gateway's tools, and
``OpenAIChatCompletionsModel`` with an ``AsyncOpenAI`` client on the proxy's base URL makes the model
calls (Chat Completions, so the proxy can splice every turn). Tracing is off: its exporter would call
OpenAI's servers, which a rollout cannot reach. URLs and the key come from the same environment
variables as the reference agent (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``ROLLWIRE_MCP_URL``).

Exit status 0 when the agent ran to its end (an answer, or the turn limit); 1 on an error, with the
reason on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rollwire.harness_adapters.reference_agent import SYSTEM_PROMPT


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    base_url: str
    api_key: str
    mcp_url: str | None
    model: str
    max_turns: int
    max_tokens: int
    temperature: float


async def run_sdk_agent(config: RunnerConfig, instruction: str) -> tuple[str, str]:
    """Run the task with the SDK; returns (how it stopped, the final answer)."""
    from contextlib import AsyncExitStack

    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.exceptions import MaxTurnsExceeded
    from agents.mcp import MCPServerStreamableHttp
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    async with AsyncExitStack() as stack:
        # no client retries: a retried call would be recorded twice
        client = await stack.enter_async_context(
            AsyncOpenAI(base_url=config.base_url, api_key=config.api_key, max_retries=0)
        )
        servers = []
        if config.mcp_url:
            server = MCPServerStreamableHttp(
                {"url": config.mcp_url, "timeout": 30.0},
                name="rollwire",
                cache_tools_list=True,
                client_session_timeout_seconds=60,
            )
            servers.append(await stack.enter_async_context(server))
        agent = Agent(
            name="rollwire",
            instructions=SYSTEM_PROMPT,
            mcp_servers=servers,
            model=OpenAIChatCompletionsModel(model=config.model, openai_client=client),
            model_settings=ModelSettings(max_tokens=config.max_tokens, temperature=config.temperature),
        )
        try:
            result = await Runner.run(agent, instruction, max_turns=config.max_turns)
        except MaxTurnsExceeded:
            return "max_turns", ""
        return "answered", str(result.final_output or "")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rollwire.harness_adapters.openai_agents_runner",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("instruction", help="the task, as the user would say it")
    parser.add_argument("--model", default="default", help="model name sent to the proxy (default: default)")
    parser.add_argument("--max-turns", type=int, default=8, help="most model calls (default 8)")
    parser.add_argument("--max-tokens", type=int, default=256, help="most tokens per model call (default 256)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--final-answer", type=Path, default=Path("final_answer.txt"), help="file for the answer")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import anyio

    args = _parser().parse_args(argv)
    base_url = os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        print("openai-agents runner: OPENAI_BASE_URL is not set", file=sys.stderr)
        return 2
    if args.max_turns < 1 or args.max_tokens < 1:
        print("openai-agents runner: --max-turns and --max-tokens must be at least 1", file=sys.stderr)
        return 2
    config = RunnerConfig(
        base_url=base_url,
        api_key=os.environ.get("OPENAI_API_KEY", "rollwire"),
        mcp_url=os.environ.get("ROLLWIRE_MCP_URL") or None,
        model=args.model,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
    )
    try:
        stopped, answer = anyio.run(run_sdk_agent, config, args.instruction)
    except Exception as exc:  # the harness failed: say why in one line, exit 1 (the log keeps the rest)
        print(f"openai-agents runner: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 1
    args.final_answer.write_text(answer)
    print(f"openai-agents: {stopped}")
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
