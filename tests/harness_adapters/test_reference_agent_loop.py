"""The reference agent's loop, with official clients: tools listed over MCP, tool calls run, the result
sent back, and the answer without a tool call taken as final. The policy is a scripted
OpenAI-compatible server that also records what the agent sent it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rollwire.app.serving import ServerThread
from rollwire.harness_adapters.base import RolloutContext
from rollwire.harness_adapters.reference import ReferenceAgentAdapter
from rollwire.harness_adapters.reference_agent import AgentConfig, run_agent


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def scripted_policy(received: list[dict[str, Any]]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        received.append(body)
        if len(received) == 1:
            call = {"id": "call_1", "type": "function",
                    "function": {"name": "write_note", "arguments": json.dumps({"text": "Paris"})}}  # fmt: skip
            return JSONResponse(_completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"))
        return JSONResponse(_completion({"role": "assistant", "content": "done: Paris"}, "stop"))

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def notes_server(notes: list[str]) -> Starlette:
    server = MCPServer("notes")

    @server.tool()
    def write_note(text: str) -> str:
        """Keep a note."""
        notes.append(text)
        return f"saved {len(text)} characters"

    return server.streamable_http_app()


def test_agent_runs_tool_and_answers() -> None:
    received: list[dict[str, Any]] = []
    notes: list[str] = []
    with ServerThread(scripted_policy(received)) as llm, ServerThread(notes_server(notes)) as tools:
        config = AgentConfig(base_url=f"{llm.url}/v1", mcp_url=f"{tools.url}/mcp", max_turns=4)
        result = anyio.run(run_agent, config, "Note the word Paris.")
    assert (result.stopped, result.final_answer, result.turns, result.tool_calls) == ("answered", "done: Paris", 2, 1)
    assert notes == ["Paris"]
    assert [t["function"]["name"] for t in received[0]["tools"]] == ["write_note"]
    second = received[1]["messages"]
    assert second[2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"text": "Paris"})  # carried back as is
    assert second[3] == {"role": "tool", "tool_call_id": "call_1", "content": "saved 5 characters"}


def test_turn_limit_stops_a_looping_policy() -> None:
    received: list[dict[str, Any]] = []

    async def always_call(request: Request) -> JSONResponse:
        received.append(await request.json())
        call = {"id": f"c{len(received)}", "type": "function", "function": {"name": "nope", "arguments": "{}"}}
        return JSONResponse(_completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"))

    app = Starlette(routes=[Route("/v1/chat/completions", always_call, methods=["POST"])])
    with ServerThread(app) as llm:
        result = anyio.run(run_agent, AgentConfig(base_url=f"{llm.url}/v1", mcp_url=None, max_turns=3), "loop")
    assert (result.stopped, result.turns, len(received)) == ("max_turns", 3, 3)
    assert received[-1]["messages"][-1]["content"] == "Error: no tools are available"


def test_reference_adapter_points_the_agent_at_the_rollout(tmp_path: Path) -> None:
    ctx = RolloutContext(
        run_id="run", rollout_id="ro", task_id="t1", prompt="Write Paris to answer.txt.", token="secret",
        base_url="http://p/r/secret/v1", anthropic_base_url="http://p/r/secret", mcp_url="http://g/r/secret/mcp",
        deadline_s=60,
    )  # fmt: skip
    launch = ReferenceAgentAdapter().launch(ctx)
    assert launch.env == {"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": "secret", "ROLLWIRE_MCP_URL": ctx.mcp_url}
    assert launch.argv[-1] == ctx.prompt and "agent" in launch.argv
