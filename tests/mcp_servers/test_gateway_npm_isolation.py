"""Must-show 1 and 5: a stateful third-party server from npm (the knowledge-graph ``server-memory``, state in the
file ``MEMORY_FILE_PATH`` names) behind the gateway, one process per rollout in the rollout's own folder: rollout B
never sees what rollout A wrote, and a rollout's processes close when it ends and when the gateway stops (after
50 rollouts nothing of theirs is left running)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from mcp import Client

from rollwire.mcp_servers.server_config import UpstreamSpec
from rollwire.rollouts import RolloutBook
from rollwire.store import RolloutStatus
from tests.mcp_servers.env_stack import EnvServers, gateway_stack, result_text
from tests.mcp_servers.npm_servers import npm_server, processes_mentioning, rollouts_running
from tests.polling import wait_until


def _memory(tmp_path: Path) -> UpstreamSpec:
    raw = {"command": npm_server("mcp-server-memory"), "env": {"MEMORY_FILE_PATH": "{rollout_dir}/graph.jsonl"}}
    return UpstreamSpec.from_dict("memory", raw)


def test_state_is_per_rollout_and_processes_close_when_it_ends(env_servers: EnvServers, store_url: str, tmp_path: Path) -> None:
    root = tmp_path / "rollouts"
    server, stack = gateway_stack(
        env_servers, store_url, {"memory": _memory(tmp_path)}, rollouts_dir=str(root), reap_interval_s=0.2
    )
    with server:
        token_a = stack.add_rollout("iso-a", servers=["memory"])
        token_b = stack.add_rollout("iso-b", servers=["memory"])

        async def scenario() -> tuple[str, str, str]:
            async with Client(stack.mcp_url(token_a)) as a, Client(stack.mcp_url(token_b)) as b:
                entity = {"name": "secret-of-a", "entityType": "note", "observations": ["only A knows"]}
                assert not (await a.call_tool("create_entities", {"entities": [entity]})).is_error
                seen_by_b = result_text(await b.call_tool("read_graph", {}))
                await b.call_tool("create_entities", {"entities": [{**entity, "name": "b-own", "observations": []}]})
                seen_by_a = result_text(await a.call_tool("read_graph", {}))
                return seen_by_a, seen_by_b, result_text(await b.call_tool("search_nodes", {"query": "secret"}))

        seen_by_a, seen_by_b, b_search = anyio.run(scenario)
        assert "secret-of-a" in seen_by_a and "b-own" not in seen_by_a
        assert "secret-of-a" not in seen_by_b and "secret-of-a" not in b_search
        lines = (root / "iso-a" / "memory" / "graph.jsonl").read_text().splitlines()  # the state sits in A's folder
        assert [json.loads(line)["name"] for line in lines] == ["secret-of-a"]
        assert "b-own" in (root / "iso-b" / "memory" / "graph.jsonl").read_text()
        assert len(processes_mentioning(str(root / "iso-a"))) >= 1 and len(processes_mentioning(str(root / "iso-b"))) >= 1

        RolloutBook(stack.engine).set_status("iso-a", RolloutStatus.FINISHED)
        wait_until(lambda: not processes_mentioning(str(root / "iso-a")), "rollout A's server to close", timeout_s=15)
        assert processes_mentioning(str(root / "iso-b")), "rollout B is still running: its server stays"
    assert not processes_mentioning(str(root)), "the gateway stopped: no server of any rollout is left"


def test_fifty_rollouts_leave_nothing_running(env_servers: EnvServers, store_url: str, tmp_path: Path) -> None:
    root = tmp_path / "rollouts"
    server, stack = gateway_stack(
        env_servers, store_url, {"memory": _memory(tmp_path)}, rollouts_dir=str(root), reap_interval_s=0.2,
        connect_timeout_s=60.0,
    )  # fmt: skip
    book = RolloutBook(stack.engine)
    with server:
        tokens = {f"many-{i:02d}": stack.add_rollout(f"many-{i:02d}", servers=["memory"]) for i in range(50)}

        async def one(rollout_id: str, token: str) -> None:
            async with Client(stack.mcp_url(token)) as client:
                entity = {"name": rollout_id, "entityType": "run", "observations": []}
                assert not (await client.call_tool("create_entities", {"entities": [entity]})).is_error
                assert json.loads(result_text(await client.call_tool("read_graph", {})))["entities"][0]["name"] == rollout_id

        async def scenario() -> None:
            limiter = anyio.Semaphore(5)

            async def run(rollout_id: str, token: str) -> None:
                async with limiter:
                    await one(rollout_id, token)
                    if rollout_id < "many-45":  # the last five are still running when the gateway stops
                        await anyio.to_thread.run_sync(book.set_status, rollout_id, RolloutStatus.FINISHED)

            async with anyio.create_task_group() as tg:
                for rollout_id, token in tokens.items():
                    tg.start_soon(run, rollout_id, token)

        anyio.run(scenario)
        still = {rollout_id for rollout_id in tokens if rollout_id >= "many-45"}
        wait_until(lambda: rollouts_running(root) <= still, "the ended rollouts' servers to close", timeout_s=60)
        assert {p.name for p in root.iterdir()} == set(tokens)
    assert not processes_mentioning(str(root)), "the gateway stopped: no server of any rollout is left"
