"""run_suite against the real stack on loopback: the reference harness as subprocesses, rewards from the suite's checker."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import anyio
import pytest
from sqlmodel import func, select

from rollwire.errors import InvalidRequest, NotFound
from rollwire.harness_adapters.reference import ReferenceAgentAdapter
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.orchestrator.suite_run import build_adapter, run_suite, select_tasks
from rollwire.sandbox import SandboxUnavailable
from rollwire.settings import OrchestratorSettings, Settings
from rollwire.store import ModelCall, session_scope
from rollwire.store.db import open_engine
from tests.orchestrator.live_stack import live_stack


@pytest.mark.slow
def test_reference_harness_two_tasks_group_of_two(tmp_path: Path, tiny_model_dir: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="rollwire.orchestrator.runtimes.local")
    seen: list[int] = []
    with live_stack(tmp_path, tiny_model_dir) as stack:
        result = anyio.run(
            lambda: run_suite(
                stack, suite="tiny", harness="reference", group_size=2, task_ids=["write-cat", "write-dog"],
                concurrency=2, deadline_s=120, run_name="suite-run-test",
                harness_options={"max_turns": 2, "max_tokens": 24}, on_progress=lambda p: seen.append(p.done),
            )
        )  # fmt: skip
    rows = result.rollouts
    assert Counter(row.task_id for row in rows) == {"write-cat": 2, "write-dog": 2}
    assert result.progress.done == 4 and seen[-1] == 4
    engine = open_engine(stack.db_url)
    criteria = {c.name or f"{c.kind}" for c in load_suite("tiny").task("write-cat").checker}
    for row in rows:
        assert row.status == "finished", (row.status, row.error, row.log_tail)
        assert row.meta["suite"] == "tiny" and row.exit_code == 0
        assert row.reward is not None and 0.0 <= row.reward <= 1.0
        assert len(row.reward_breakdown) == len(criteria), row.reward_breakdown  # the checker's per-criterion breakdown
        with session_scope(engine) as session:
            calls = session.exec(select(func.count()).select_from(ModelCall).where(ModelCall.rollout_id == row.id)).one()
        assert calls >= 1, f"no model call recorded for {row.id}: {row.log_tail}"
    assert result.progress.mean_reward == pytest.approx(sum(row.reward or 0.0 for row in rows) / 4)
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rollout started")]
    assert len(started) == 4 and all(m.endswith("(warm pool)") for m in started), started  # the default: forked warm


def test_task_selection_and_its_errors() -> None:
    train = select_tasks("tiny", "train")
    held = select_tasks("tiny", "heldout")
    assert train and held and {t.id for t in train}.isdisjoint({t.id for t in held})
    assert all(t.meta == {"suite": "tiny"} and t.prompt for t in train + held)
    assert [t.id for t in select_tasks("tiny", task_ids=["write-dog", "write-cat"])] == ["write-dog", "write-cat"]
    with pytest.raises(InvalidRequest, match="unknown split 'test'"):
        select_tasks("tiny", "test")
    with pytest.raises(NotFound, match="no task 'nope'"):
        select_tasks("tiny", task_ids=["nope"])
    with pytest.raises(NotFound, match="no suite 'missing'"):
        select_tasks("missing")


def test_a_harness_is_a_registry_name_with_options_or_an_adapter_object_as_it_is() -> None:
    named = build_adapter("reference", {"max_turns": 2})
    assert isinstance(named, ReferenceAgentAdapter) and named.max_turns == 2
    own = ReferenceAgentAdapter(max_turns=3)
    assert build_adapter(own) is own
    with pytest.raises(InvalidRequest, match="harness options go to a harness named from the registry"):
        build_adapter(own, {"max_turns": 2})
    with pytest.raises(InvalidRequest, match="does not take these options"):
        build_adapter("reference", {"turns": 2})


@pytest.mark.slow
def test_where_no_sandbox_can_be_made_the_reference_harness_runs_and_others_refuse(
    tmp_path: Path, tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A machine without bubblewrap (here: its path names nothing): the reference harness, whose only actions are
    MCP calls, runs its rollouts unsandboxed and says so in one line, once however many runs follow (the demo
    runs one a phase); a harness with built-in tools refuses."""
    missing = Settings(orchestrator=OrchestratorSettings(bwrap_path=str(tmp_path / "no-bwrap")))
    with live_stack(tmp_path, tiny_model_dir) as stack:
        result = anyio.run(
            lambda: run_suite(
                stack, suite="tiny", harness="reference", task_ids=["write-cat"], deadline_s=120, settings=missing,
                harness_options={"max_turns": 2, "max_tokens": 24},
            )
        )  # fmt: skip
        again = anyio.run(
            lambda: run_suite(stack, suite="tiny", harness="reference", task_ids=["write-dog"], deadline_s=120,
                              settings=missing, harness_options={"max_turns": 2, "max_tokens": 24})
        )  # fmt: skip
        with pytest.raises(SandboxUnavailable) as refused:
            anyio.run(lambda: run_suite(stack, suite="tiny", harness="codex", task_ids=["write-cat"], settings=missing))
    for row in (*result.rollouts, *again.rollouts):
        assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("no sandbox here")]
    assert len(said) == 1 and "\n" not in said[0] and "apt-get install bubblewrap" in said[0], said
    assert "\n" not in refused.value.message and "--no-sandbox" in refused.value.message
