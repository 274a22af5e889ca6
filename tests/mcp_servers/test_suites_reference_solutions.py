"""Must-show 4: for each suite, the scripted solutions of a sample of tasks score 1.0 through the real servers,
and a wrong or partial solution scores less."""

from __future__ import annotations

import anyio
import pytest

from rollwire.mcp_servers.tasks.checkers import score
from rollwire.mcp_servers.tasks.loader import load_suite, suite_names
from rollwire.mcp_servers.tasks.schema import ToolCall
from rollwire.mcp_servers.tasks.solve import play
from tests.mcp_servers.env_stack import ENV_SECRET, EnvServers


def test_three_suites_ship_with_enough_tasks() -> None:
    names = suite_names()
    assert {"tiny", "office", "ops"} <= set(names)
    rich = sum(len(load_suite(n).tasks) for n in ("office", "ops"))
    assert rich >= 50
    tiny = load_suite("tiny")
    assert len(tiny.split("train")) == 48 and len(tiny.split("held_out")) == 8


def _sample(suite: str) -> list[str]:
    tasks = load_suite(suite).tasks
    # one task of every template (ids share a prefix) plus a held-out one
    seen: dict[str, str] = {}
    for task in tasks:
        seen.setdefault(task.id.rsplit("-", 1)[0], task.id)
    return sorted(set(seen.values()) | {load_suite(suite).split("held_out")[0].id})


@pytest.mark.parametrize("suite", ["tiny", "office", "ops"])
def test_reference_solution_scores_one_and_wrong_scores_less(suite: str, env_servers: EnvServers) -> None:
    for task_id in _sample(suite):
        task = load_suite(suite).task(task_id)
        ref = f"{suite}:{task_id}"
        good, bad = f"good-{suite}-{task_id}", f"bad-{suite}-{task_id}"
        results = anyio.run(play, task.reference_solution, env_servers.server_url, good, ref, ENV_SECRET)
        assert not any(r["is_error"] for r in results), results
        result = score(task, env_servers.folder(good), task.reference_answer)
        assert result.reward == 1.0, (task_id, result.breakdown)
        # wrong: the solution minus its last step, and a wrong final answer
        wrong = task.reference_solution[:-1] or [
            ToolCall(server="workspace", tool="write_file", arguments={"path": "answer.txt", "content": "nope"})
        ]
        anyio.run(play, wrong, env_servers.server_url, bad, ref, ENV_SECRET)
        wrong_result = score(task, env_servers.folder(bad), "I do not know")
        assert wrong_result.reward < 1.0, (task_id, wrong_result.breakdown)
        assert set(wrong_result.breakdown) == set(result.breakdown)
