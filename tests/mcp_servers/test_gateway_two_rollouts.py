"""Must-show 1: the official mcp Client through the gateway for two rollouts at once: tools listed, calls made,
each rollout sees only its own state, every call is recorded; an unknown token gets 401."""

from __future__ import annotations

import anyio
import httpx
from mcp import Client

from rollwire.mcp_servers.tasks.checkers import score
from rollwire.mcp_servers.tasks.loader import resolve_task
from tests.mcp_servers.env_stack import EnvServers, GatewayStack, first_text, gateway_stack


async def _drive(stack: GatewayStack, token: str, word: str, seen: dict[str, tuple[set[str], str, str]]) -> None:
    async with Client(stack.mcp_url(token)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        await client.call_tool("write_file", {"path": "answer.txt", "content": word})
        listed = await client.call_tool("list_files", {})
        read = await client.call_tool("read_file", {"path": "answer.txt"})
        seen[word] = (names, first_text(read), first_text(listed))


def test_two_rollouts_at_once_each_see_their_own_state(env_servers: EnvServers, store_url: str) -> None:
    server, stack = gateway_stack(env_servers, store_url)
    with server:
        tok_a = stack.add_rollout("ra", servers=["workspace"])  # every workspace tool (tiny tasks show only write_file)
        tok_b = stack.add_rollout("rb", "office:agenda-0")  # needs calendar + workspace
        seen: dict[str, tuple[set[str], str, str]] = {}

        async def both() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_drive, stack, tok_a, "cat", seen)
                tg.start_soon(_drive, stack, tok_b, "dog", seen)

        anyio.run(both)
        names_a, text_a, files_a = seen["cat"]
        names_b, text_b, _ = seen["dog"]
        assert {"write_file", "read_file"} <= names_a and "list_events" not in names_a
        assert {"write_file", "list_events", "create_event"} <= names_b
        assert (text_a, text_b) == ("cat", "dog")
        assert files_a == "answer.txt"
        assert score(resolve_task("tiny:write-cat"), env_servers.folder("ra")).reward == 1.0
        assert score(resolve_task("tiny:write-cat"), env_servers.folder("rb")).reward == 0.5  # exists, wrong word
        events = stack.events("ra")
        assert [e.tool for e in events] == ["write_file", "list_files", "read_file"]
        assert all(e.server == "workspace" and not e.is_error and e.ended_ns >= e.started_ns for e in events)
        assert '"cat"' in events[0].arguments_json and "cat" in events[2].result_json
        reply = httpx.post(stack.url + "/r/not-a-token/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert reply.status_code == 401 and "unknown rollout token" in reply.text
