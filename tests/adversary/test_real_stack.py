"""The hostile harness against a real stack: ``rollwire up``'s processes on loopback (the bundled engine with the
tiny model, the env servers, the gateway, the proxy and its admin listener), driven by ``run_suite`` (what
``rollwire rollouts`` calls) with the task suite's own checkers, cold and in recycled warm-pool slots.

One run holds every kind of rollout: hostile ones that try the sandbox attacks and the stack's doors
(``attacks.hostile_script``), ones that play a trick with their answer or their own exit (``attacks.ANSWERS``), and
an honest one that does its task through the gateway's MCP tools. Every attack fails, every trick is the policy's
failure and is not retried, the operator key is nowhere in the store, and the honest rollout, run after the
hostile ones, scores 1.0 from the task's checker.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest

from rollwire.app.stack import LocalStack, StackInfo
from rollwire.harness_adapters.base import Launch, RolloutContext
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.orchestrator.suite_run import run_suite, sqlite_path
from rollwire.settings import OrchestratorSettings, Settings
from rollwire.store.schema import Rollout
from rollwire.trajectory import failure_cause
from tests.adversary.attacks import (
    ANSWERS,
    DISK_MB,
    foreign_mount_sources,
    host_mounts,
    hostile_script,
    planted_secrets,
)
from tests.real_parts import needs_sandbox

pytestmark = [pytest.mark.slow, needs_sandbox]

HONEST = r"""
import asyncio, os, re
from mcp import Client

async def main():
    word = re.search(r'"([^"]+)"', os.environ["TASK_PROMPT"]).group(1)  # 'Write "cat" to answer.txt.'
    async with Client(os.environ["MCP_URL"]) as mcp:
        tools = [tool.name for tool in (await mcp.list_tools()).tools]
        write_file = next(name for name in tools if name.endswith("write_file"))
        result = await mcp.call_tool(write_file, {"path": "answer.txt", "content": word})
        assert not result.is_error, result
    open("final_answer.txt", "w").write(word)

asyncio.run(main())
"""

ROLES = ["hostile", "hostile", "hostile", *(trick for trick in ANSWERS if trick != "honest"), "honest"]
"""What each rollout of the run does, in the order the run starts them: the honest one last, in a slot that
hostile rollouts used before it."""


class RedTeamAdapter:
    """Each task of the run gets one role: ``python -m harness`` (the form the warm pool forks) or ``python
    harness.py`` (always cold)."""

    name = "red-team"

    def __init__(self, targets: dict[str, object], roles: dict[str, str], module: bool) -> None:
        self.targets, self.roles, self.module = targets, roles, module
        self.order = list(roles)

    def launch(self, ctx: RolloutContext) -> Launch:
        role = self.roles[ctx.task_id]
        script = {"hostile": hostile_script(stack=True), "honest": HONEST}.get(role) or ANSWERS[role]
        env = {
            "OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.token, "MCP_URL": ctx.mcp_url,
            "ROLLOUT_ID": ctx.rollout_id, "RUN_ID": ctx.run_id, "TASK_PROMPT": ctx.prompt,
            "ROLLWIRE_SAMPLE": str(self.order.index(ctx.task_id)),
        }  # fmt: skip
        argv = (sys.executable, "-m", "harness") if self.module else (sys.executable, "harness.py")
        answer = "out/answer.txt" if role == "linked-dir-answer" else "final_answer.txt"
        files = {"harness.py": script, "targets.json": json.dumps(self.targets)}
        return Launch(argv=argv, env=env, files=files, final_answer_path=answer)


@pytest.fixture(scope="module")
def stack(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StackInfo, Path, LocalStack]]:
    """The stack as ``rollwire up`` starts it, its stack file (with the operator key) beside its store, and the
    stack itself (``failed_part``: the platform's evidence that a part is down)."""
    folder = tmp_path_factory.mktemp("red-team-stack")
    stack = LocalStack(
        Settings(), db_url=f"sqlite:///{folder / 'store.db'}", state_dir=folder / "state", log_dir=folder / "logs"
    )
    with stack as info:
        yield info, info.save(folder / "stack.json"), stack


@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "warm-pool"])
def test_hostile_rollouts_in_a_real_stack_fail_every_attack_and_the_honest_one_scores(
    stack: tuple[StackInfo, Path, LocalStack], tmp_path: Path, pooled: bool
) -> None:
    info, saved, parts = stack
    tasks = [task.id for task in load_suite("tiny").split("train")[: len(ROLES)]]
    roles = dict(zip(tasks, ROLES, strict=True))
    workspaces = tmp_path / "ws"
    other = workspaces / "rollwire-other-rollout" / "workspace"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("another rollout's work")
    project_file = Path(__file__).with_name(f".red-team-{os.getpid()}")
    admin = urlsplit(info.admin_url)
    with planted_secrets(tmp_path, saved) as targets:
        targets |= {
            "proxy": info.proxy_url.rstrip("/"), "admin": [admin.hostname, admin.port], "engine": info.engine_url,
            "env_server": info.env_url, "store": sqlite_path(info.db_url), "state": info.state_root,
            "other_secret": str(other / "secret.txt"), "project_file": str(project_file),
            "orchestrator_pid": os.getpid(), "workspace_root": str(workspaces),
            "host_tmp_file": str(tmp_path / "escaped.txt"),
        }  # fmt: skip
        orchestrator = OrchestratorSettings(
            workspace_root=str(workspaces), warm_pool=pooled, warm_preload=["json"], warm_spares=1,
            max_attempts=3, max_disk_mb=DISK_MB, deadline_s=120, sandbox_max_processes=300,
            sandbox_max_memory_mb=4096,
        )  # fmt: skip
        result = anyio.run(lambda: run_suite(
            info, suite="tiny", harness=RedTeamAdapter(targets, roles, pooled), task_ids=tasks, concurrency=1,
            settings=Settings(orchestrator=orchestrator),
            # a rollout that ends while a part is down is retried, not scored: an attack that brought a part down
            # would turn the tricks below into infrastructure retries, and `retried == []` would catch it
            platform_fault=parts.failed_part,
        ))  # fmt: skip
    try:
        assert not project_file.exists(), "a rollout wrote into the project"
        assert not (tmp_path / "escaped.txt").exists(), "a rollout wrote into the host's temp folder"
    finally:
        project_file.unlink(missing_ok=True)
    rows: dict[str, list[Rollout]] = {roles[row.task_id or ""]: [] for row in result.rollouts}
    for row in result.rollouts:
        rows[roles[row.task_id or ""]].append(row)
    assert sum(len(found) for found in rows.values()) == len(ROLES), "a rollout was lost"
    assert parts.failed_part() is None  # no attack brought a part of the stack down
    retried = [(roles[row.task_id or ""], row.attempt) for row in result.rollouts if row.attempt != 0]
    assert retried == [], retried  # every ending here is the rollout's own: none is retried as infrastructure

    (honest,) = rows.pop("honest")
    assert honest.status == "finished" and honest.reward == 1.0, (honest.error, honest.log_tail)

    hostile = rows.pop("hostile")
    reports = [json.loads(row.final_answer or "{}") for row in hostile]
    for row, report in zip(hostile, reports, strict=True):
        assert row.status == "finished" and row.reward == 0.0, (row.error, row.log_tail)  # scored, not gamed
        assert report["escaped"] == {} and report["seen"] == {}, report
        assert report["worked"] == {"proxy_chat": 200, "gateway_initialize": 200}, report["worked"]
        assert report["limits"] == [300, 4096 << 20] and report["processes_seen"] < 10, report
        own = [str(Path(report["where"]).parent), str(workspaces / f"rollwire-{row.id}")]
        assert foreign_mount_sources(report["mounts"], own, host_mounts()) == [], report["mounts"]
    slots = [report["where"] for report in reports]
    assert not pooled or len(set(slots)) < len(slots), slots  # a slot served two hostile rollouts: recycled
    attempts = sum(report["attempts"] for report in reports)
    assert min(report["attempts"] for report in reports) >= 60, [report["attempts"] for report in reports]

    past_limit = rows.pop("file-past-limit")[0]
    assert past_limit.final_answer == "EFBIG", (past_limit.status, past_limit.final_answer, past_limit.log_tail)
    for trick, (row,) in rows.items():
        assert row.status == "failed" and failure_cause(row.status, row.error) == "policy", (trick, row.error)
    key = info.operator_key.encode()
    for path in Path(sqlite_path(info.db_url) or "").parent.glob("store.db*"):
        assert key not in path.read_bytes(), f"the operator key is in {path.name}"
    print(f"red team in a real stack, {'warm-pool' if pooled else 'cold'}: {attempts} attempts in {len(reports)} "
          f"hostile rollouts, 0 succeeded; {len(rows)} answer tricks failed as the policy's; honest: 1.0")
