"""The reference harness: an MCP-native agent loop, readable in one sitting.

It is what a custom harness looks like to rollwire: the official ``openai`` client talks to the proxy
(Chat Completions), the official ``mcp`` client talks to the gateway, and nothing in it knows about
token ids or recording. The loop: list the gateway's tools, then ask the model; run every tool call it
makes and send the results back; stop when it answers without a tool call (that text is the final
answer) or when the turn limit is reached.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = "You are an agent. Use the tools to complete the task, then reply with a short final answer."


@dataclass(frozen=True, slots=True)
class AgentConfig:
    base_url: str
    """OpenAI-compatible base URL (the proxy's ``/r/<token>/v1``)."""
    mcp_url: str | None
    """Streamable-HTTP MCP URL (the gateway's ``/r/<token>/mcp``); None runs without tools."""
    api_key: str = "rollwire"
    model: str = "default"
    max_turns: int = 8
    max_tokens: int = 256
    temperature: float = 1.0
    system_prompt: str = SYSTEM_PROMPT


@dataclass(slots=True)
class AgentResult:
    final_answer: str | None
    turns: int
    tool_calls: int
    stopped: str
    """'answered', 'max_turns' or 'length' (the last reply was cut off)."""
    messages: list[dict[str, Any]] = field(default_factory=list)


def openai_tools(mcp_tools: list[Any]) -> list[dict[str, Any]]:
    """MCP tool descriptions -> Chat Completions ``tools``."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.input_schema or {"type": "object", "properties": {}},
            },
        }
        for tool in mcp_tools
    ]


def tool_result_text(result: Any) -> str:
    """Flatten an MCP CallToolResult to the text the model reads; errors say so."""
    parts = [getattr(block, "text", None) or json.dumps(block.model_dump(mode="json")) for block in result.content]
    text = "\n".join(parts)
    return f"Error: {text}" if result.is_error else text


async def _call_tool(client: Any, name: str, raw_arguments: str) -> str:
    try:
        arguments = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"Error: the arguments are not valid JSON ({exc.msg})"
    if not isinstance(arguments, dict):
        return "Error: the arguments must be a JSON object"
    return tool_result_text(await client.call_tool(name, arguments))


async def run_agent(config: AgentConfig, instruction: str) -> AgentResult:
    """Drive one task to its end; every model call goes through ``config.base_url``."""
    from contextlib import AsyncExitStack

    from mcp import Client
    from openai import AsyncOpenAI

    async with AsyncExitStack() as stack:
        llm = await stack.enter_async_context(AsyncOpenAI(base_url=config.base_url, api_key=config.api_key))
        mcp = await stack.enter_async_context(Client(config.mcp_url)) if config.mcp_url else None
        tools = openai_tools((await mcp.list_tools()).tools) if mcp else []
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": config.system_prompt},
            {"role": "user", "content": instruction},
        ]
        calls = 0
        for turn in range(1, config.max_turns + 1):
            completion = await llm.chat.completions.create(
                model=config.model,
                messages=messages,  # type: ignore[arg-type]
                tools=tools or None,  # type: ignore[arg-type]
                max_tokens=config.max_tokens,
                temperature=config.temperature,
            )
            choice = completion.choices[0]
            # Send the assistant message back exactly as received, so the proxy can splice its tokens.
            messages.append(choice.message.model_dump(exclude_none=True))
            if not choice.message.tool_calls:
                stopped = "length" if choice.finish_reason == "length" else "answered"
                return AgentResult(choice.message.content, turn, calls, stopped, messages)
            for call in choice.message.tool_calls:
                calls += 1
                if mcp is None:
                    text = "Error: no tools are available"
                elif call.type != "function":  # a custom (free-form) tool call: only function tools are offered
                    text = f"Error: no custom tool {call.custom.name} is available"
                else:
                    text = await _call_tool(mcp, call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return AgentResult(None, config.max_turns, calls, "max_turns", messages)


__all__ = ["AgentConfig", "AgentResult", "SYSTEM_PROMPT", "openai_tools", "run_agent", "tool_result_text"]
