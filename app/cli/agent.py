"""Run the reference agent on one instruction: the openai client against an OpenAI-compatible base URL
(the proxy's /r/<token>/v1), the mcp client against a streamable-HTTP MCP URL (the gateway's
/r/<token>/mcp). Defaults come from OPENAI_BASE_URL, OPENAI_API_KEY and ROLLWIRE_MCP_URL, as a harness
launched by the orchestrator receives them. The final answer is printed and, with --final-answer,
written to that file. Exit status 0 when the agent ran to its end, 1 on an error.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

HELP = "run the reference MCP agent on one task (the default harness of the demo)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("instruction", help="the task, as the user would say it")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="OpenAI-compatible base URL")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "rollwire"), help="API key (the token)")
    parser.add_argument("--mcp-url", default=os.environ.get("ROLLWIRE_MCP_URL"), help="MCP gateway URL (optional)")
    parser.add_argument("--model", default=os.environ.get("ROLLWIRE_AGENT_MODEL", "default"), help="model name")
    parser.add_argument("--max-turns", type=int, default=8, help="most model calls before giving up (default 8)")
    parser.add_argument("--max-tokens", type=int, default=256, help="most tokens per model call (default 256)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--final-answer", type=Path, default=None, help="file to write the final answer to")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.app.interrupt import run_interruptible
    from rollwire.harness_adapters.reference_agent import AgentConfig, run_agent

    if not args.base_url:
        raise InvalidRequest("no base URL: pass --base-url or set OPENAI_BASE_URL")
    if args.max_turns < 1 or args.max_tokens < 1:
        raise InvalidRequest("--max-turns and --max-tokens must be at least 1")
    config = AgentConfig(
        base_url=args.base_url,
        mcp_url=args.mcp_url or None,
        api_key=args.api_key,
        model=args.model,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
    )
    result = run_interruptible(run_agent, config, args.instruction)
    answer = result.final_answer or ""
    if args.final_answer is not None:
        args.final_answer.write_text(answer)
    print(f"agent: {result.stopped} after {result.turns} turn(s), {result.tool_calls} tool call(s)")
    print(answer)
    return 0
