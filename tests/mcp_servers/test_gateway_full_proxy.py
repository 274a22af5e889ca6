"""Must-show 2 and 5: the gateway as a complete MCP proxy, with npm's ``server-everything`` behind it and the
official ``mcp`` client in front: resources (templates, reads, a subscription's updates), prompts, completions,
logging, progress delivered to the client, cancellation, and the server's sampling, elicitation and roots requests
relayed to the harness (which declared them). Every message is recorded, in order, with the ToolEvents.

The first test's harness speaks the 2025 handshake era (``mode="legacy"``), as Codex CLI and Claude Code do today;
the second negotiates 2026-07-28 (the client's default), where a server has no back-channel: the upstream's
requests reach the harness as input-required rounds, and logging is opted into per request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client import ClientRequestContext
from sqlmodel import select

from rollwire.mcp_servers.server_config import UpstreamSpec
from rollwire.store import McpMessage, ToolEvent, session_scope
from tests.mcp_servers.env_stack import EnvServers, GatewayStack, gateway_stack, result_text
from tests.mcp_servers.npm_servers import npm_server
from tests.polling import wait_until, wait_until_async


def _messages(stack: GatewayStack, rollout_id: str) -> list[McpMessage]:
    with session_scope(stack.engine) as session:
        query = select(McpMessage).where(McpMessage.rollout_id == rollout_id).order_by(McpMessage.at_ns, McpMessage.id)  # type: ignore[arg-type]
        return list(session.exec(query))


def _cancelled(events: list[ToolEvent]) -> bool:
    return any(event.error == "cancelled by the harness" for event in events)


async def _cancel_recorded(stack: GatewayStack, rollout_id: str, deadline_s: float = 20.0) -> None:
    await wait_until_async(
        lambda: anyio.to_thread.run_sync(stack.events, rollout_id), "the cancel to be recorded", ok=_cancelled,
        timeout_s=deadline_s,
    )  # fmt: skip


class Harness:
    """What a harness with sampling, elicitation and roots answers, and what it was sent."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.updated: list[str] = []
        self.got_log = anyio.Event()
        self.got_update = anyio.Event()
        self.asked: list[str] = []

    async def sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.asked.append("sampling")
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="harness-sampled"), model="h")

    async def elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"color": "teal"})

    async def roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        self.asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///harness/project", name="harness-root")])

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.got_log.set()

    async def messages(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
            self.got_update.set()

    def client(self, url: str, mode: str = "legacy") -> Client:
        return Client(
            url, mode=mode, sampling_callback=self.sampling, elicitation_callback=self.elicitation,
            list_roots_callback=self.roots, logging_callback=self.logging, message_handler=self.messages,
            log_level="debug",
        )  # fmt: skip


def test_everything_server_through_the_gateway(env_servers: EnvServers, store_url: str, tmp_path: Path) -> None:
    spec = UpstreamSpec.from_dict("everything", {"command": npm_server("mcp-server-everything"), "args": ["stdio"]})
    server, stack = gateway_stack(env_servers, store_url, {"everything": spec}, rollouts_dir=str(tmp_path / "r"))
    harness = Harness()
    with server:
        token = stack.add_rollout("full", servers=["everything", "workspace"])

        async def scenario() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            async with harness.client(stack.mcp_url(token)) as client:
                caps = client.server_capabilities
                seen["caps"] = (caps.resources is not None, caps.prompts is not None, caps.completions is not None, caps.logging is not None)
                names = {t.name for t in (await client.list_tools()).tools}
                seen["tools"] = names
                resources = (await client.list_resources()).resources
                seen["resource"] = (await client.read_resource(str(resources[0].uri))).contents[0]
                seen["templates"] = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
                seen["templated"] = (await client.read_resource("demo://resource/dynamic/text/7")).contents[0]
                seen["prompts"] = [p.name for p in (await client.list_prompts()).prompts]
                prompt = await client.get_prompt("args-prompt", {"city": "Lyon", "state": "FR"})
                seen["prompt"] = prompt.messages[0].content.text  # type: ignore[union-attr]
                ref = types.PromptReference(name="completable-prompt")
                seen["completion"] = (await client.complete(ref, {"name": "department", "value": "Mar"})).completion.values

                steps: list[float] = []

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    steps.append(progress)

                done = await client.call_tool("trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=on_progress)
                seen["progress"], seen["long"] = steps, result_text(done)
                seen["sampled"] = result_text(await client.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5}))
                seen["elicited"] = result_text(await client.call_tool("trigger-elicitation-request", {}))
                seen["roots"] = result_text(await client.call_tool("get-roots-list", {}))

                await client.session.send_request(types.SetLevelRequest(params=types.SetLevelRequestParams(level="debug")), types.EmptyResult)
                await client.call_tool("toggle-simulated-logging", {})
                with anyio.fail_after(20):
                    await harness.got_log.wait()

                uri = "demo://resource/dynamic/text/1"
                await client.session.send_request(types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)), types.EmptyResult)
                await client.call_tool("toggle-subscriber-updates", {})
                with anyio.fail_after(20):
                    await harness.got_update.wait()

                with anyio.CancelScope() as scope:  # the harness gives up on a slow call after its first progress

                    async def cancel_on_progress(progress: float, total: float | None, message: str | None) -> None:
                        scope.cancel()

                    await client.call_tool("trigger-long-running-operation", {"duration": 20, "steps": 20}, progress_callback=cancel_on_progress)
                seen["cancelled"] = scope.cancelled_caught
                await _cancel_recorded(stack, "full")  # with the session still open: the cancel came as a message
            return seen

        seen = anyio.run(scenario)
        assert seen["caps"] == (True, True, True, True)
        assert {"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list", "write_file"} <= seen["tools"]
        assert seen["resource"].text.startswith("#") and seen["templates"] == [
            "demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/{resourceId}",
        ]  # fmt: skip
        assert "Resource 7" in seen["templated"].text
        assert {"simple-prompt", "args-prompt", "completable-prompt"} <= set(seen["prompts"])
        assert "Lyon" in seen["prompt"] and seen["completion"] == ["Marketing"]
        assert seen["progress"] == [1.0, 2.0, 3.0, 4.0] and "completed" in seen["long"]
        assert "harness-sampled" in seen["sampled"] and "teal" in seen["elicited"] and "harness-root" in seen["roots"]
        assert {"sampling", "elicitation", "roots"} <= set(harness.asked)
        assert harness.logs and harness.updated == ["demo://resource/dynamic/text/1"] * len(harness.updated)
        assert seen["cancelled"]

        events = wait_until(lambda: stack.events("full"), "the cancelled call's event", ok=_cancelled)
        assert events[-1].tool == "trigger-long-running-operation" and events[-1].error == "cancelled by the harness"
        messages = wait_until(lambda: _messages(stack, "full"), "the cancellation's message",
                              ok=lambda found: any(m.method == "notifications/cancelled" for m in found))
        _check_order(messages, events)


def _check_order(messages: list[McpMessage], events: list[ToolEvent]) -> None:
    """The long call's messages, in the order they passed, inside its ToolEvent's time span."""
    flow = [(m.direction, m.kind, m.method) for m in messages]
    assert flow[:3] == [
        ("harness->gateway", "request", "initialize"), ("gateway->harness", "response", "initialize"),
        ("harness->gateway", "notification", "notifications/initialized"),
    ]  # fmt: skip
    long_event = next(e for e in events if e.tool == "trigger-long-running-operation")
    start = next(i for i, m in enumerate(messages) if m.method == "tools/call" and "trigger-long" in m.body_json)
    end = next(i for i, m in enumerate(messages) if i > start and m.method == "tools/call" and m.kind == "response")
    inside = messages[start : end + 1]
    progress = [json.loads(m.body_json)["progress"] for m in inside if m.method == "notifications/progress"]
    assert progress == [1.0, 2.0, 3.0, 4.0]
    assert all(long_event.started_ns <= m.at_ns for m in inside[1:])
    assert all(m.at_ns <= long_event.ended_ns for m in inside[:-1])
    sampled = [(m.direction, m.kind, m.method) for m in messages if m.method == "sampling/createMessage"]
    assert sampled == [("upstream->harness", "request", "sampling/createMessage"), ("harness->upstream", "response", "sampling/createMessage")]
    cancel = next(i for i, m in enumerate(messages) if m.method == "notifications/cancelled")
    assert messages[cancel].direction == "harness->gateway"
    assert any(m.kind == "cancelled" and m.method == "tools/call" for m in messages[cancel - 1 :])


def test_a_2026_harness_answers_server_requests_in_rounds(env_servers: EnvServers, store_url: str, tmp_path: Path) -> None:
    spec = UpstreamSpec.from_dict("everything", {"command": npm_server("mcp-server-everything"), "args": ["stdio"]})
    server, stack = gateway_stack(env_servers, store_url, {"everything": spec}, rollouts_dir=str(tmp_path / "r"))
    harness = Harness()
    with server:
        token = stack.add_rollout("modern", servers=["everything"])
        plain = stack.add_rollout("plain", servers=["everything"])

        async def plain_tools() -> set[str]:  # a harness that declares no sampling/elicitation/roots
            async with Client(stack.mcp_url(plain)) as client:
                return {t.name for t in (await client.list_tools()).tools}

        shown = anyio.run(plain_tools)
        assert "echo" in shown and not shown & {"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"}

        async def scenario() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            async with harness.client(stack.mcp_url(token), mode="auto") as client:
                seen["version"] = client.protocol_version
                seen["sampled"] = result_text(await client.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5}))
                seen["elicited"] = result_text(await client.call_tool("trigger-elicitation-request", {}))
                seen["roots"] = result_text(await client.call_tool("get-roots-list", {}))
                steps: list[float] = []

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    steps.append(progress)

                await client.call_tool("trigger-long-running-operation", {"duration": 1, "steps": 2}, progress_callback=on_progress)
                seen["progress"] = steps
                with anyio.CancelScope() as scope:

                    async def cancel_on_progress(progress: float, total: float | None, message: str | None) -> None:
                        scope.cancel()

                    await client.call_tool("trigger-long-running-operation", {"duration": 20, "steps": 20}, progress_callback=cancel_on_progress)
                seen["cancelled"] = scope.cancelled_caught
                await _cancel_recorded(stack, "modern")
            return seen

        seen = anyio.run(scenario)
        assert seen["version"] == "2026-07-28"
        assert "harness-sampled" in seen["sampled"] and "teal" in seen["elicited"] and "harness-root" in seen["roots"]
        assert seen["progress"] == [1.0, 2.0] and seen["cancelled"]
        events = wait_until(lambda: stack.events("modern"), "the cancelled call's event", ok=_cancelled)
        assert [(e.tool, e.is_error) for e in events[:4]] == [
            ("trigger-sampling-request", False), ("trigger-elicitation-request", False), ("get-roots-list", False),
            ("trigger-long-running-operation", False),
        ]  # fmt: skip
        assert events[-1].error == "cancelled by the harness"
        flow = [(m.direction, m.kind, m.method) for m in _messages(stack, "modern") if "sampling" in m.method or m.method == "tools/call"][:4]
        assert flow == [
            ("harness->gateway", "request", "tools/call"), ("upstream->harness", "request", "sampling/createMessage"),
            ("gateway->harness", "response", "tools/call"), ("harness->gateway", "request", "tools/call"),
        ]  # fmt: skip
