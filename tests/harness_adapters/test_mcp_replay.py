"""MCP record/replay: a recorded run played again with every tool call answered from its recording.

The task (office's mail-to-event-0) ends with a calendar event whose id the live server draws at random, and the
agent reads that id back. So the same policy run live twice gives two trajectories; replayed at temperature 0
it gives the recorded one exactly, token for token. A policy that calls something else diverges, and the report
says where (tool call, model turn, the call expected, the call made); from there tools go live, or are refused
(``stop``). ``--rescore`` scores a run with other checkers without running it again. The policy is the demo's
scripted expert behind the real proxy, the harness the reference agent (official ``openai`` and ``mcp``
clients), the servers the shipped env servers behind the real gateway.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlmodel import select

from rollwire.app.cli.__main__ import main
from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.mcp_servers.tasks.schema import Suite
from rollwire.orchestrator.replay_run import replay_report, replay_run
from rollwire.orchestrator.suite_run import run_suite
from rollwire.reconstruct import reconstruct
from rollwire.settings import OrchestratorSettings, Settings
from rollwire.store import Refusal, Rollout, session_scope
from rollwire.store.db import open_engine
from tests.harness_adapters.conftest import scripted_policy_stack

pytestmark = pytest.mark.slow
TASK = "mail-to-event-0"
OPTIONS = {"max_turns": 6, "max_tokens": 256, "temperature": 0.0}


def _settings(tmp_path: Path) -> Settings:
    return Settings(orchestrator=OrchestratorSettings(workspace_root=str(tmp_path / "ws")))


def _run(info: Any, tmp_path: Path, run_id: str) -> None:
    anyio.run(
        lambda: run_suite(
            info, suite="office", harness="reference", task_ids=[TASK], group_size=2, run_id=run_id,
            harness_options={**OPTIONS, "model": info.model}, settings=_settings(tmp_path),
        )
    )  # fmt: skip


def _replay(info: Any, tmp_path: Path, run_id: str, on_divergence: str = "live") -> None:
    anyio.run(
        lambda: replay_run(
            info, recorded="recorded", run_id=run_id, on_divergence=on_divergence,
            harness_options={**OPTIONS, "model": info.model}, settings=_settings(tmp_path),
        )
    )  # fmt: skip


def _tokens(db_url: str, rollout_id: str) -> list[tuple[list[int], list[int], list[float]]]:
    trajectory = reconstruct(open_engine(db_url), rollout_id)
    return [(s.token_ids, s.loss_mask, s.logprobs) for s in trajectory.segments]


def _other_policy() -> Suite:
    """The office suite with the task's second step reading another message than the recorded policy reads."""
    suite = load_suite("office")
    task = suite.task(TASK)
    steps = list(task.reference_solution)
    steps[1] = steps[1].model_copy(update={"arguments": {"message_id": "m-none"}})
    changed = task.model_copy(update={"reference_solution": steps})
    return suite.model_copy(update={"tasks": [changed if t.id == TASK else t for t in suite.tasks]})


def _stricter_checker(tmp_path: Path) -> Path:
    """The office suite with the task checked for the event at 10:00, not the 9:00 the mail asks for."""
    suite = load_suite("office")
    task = suite.task(TASK)
    wrong = task.checker[1].model_copy(update={"args": {"title": "budget review", "start": "2025-03-10T10:00"}})
    changed = task.model_copy(update={"checker": [task.checker[0], wrong]})
    path = tmp_path / "office-stricter.json"
    path.write_text(suite.model_copy(update={"tasks": [changed]}).model_dump_json())
    return path


def test_replay_reproduces_the_recording_and_reports_where_another_policy_diverges(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with scripted_policy_stack(tiny_model_dir, tmp_path, [load_suite("office")]) as (_tap, info):
        _run(info, tmp_path, "recorded")
        _run(info, tmp_path, "live-again")
        _replay(info, tmp_path, "replayed")
        capsys.readouterr()
        for state in Path(info.state_root).iterdir():  # rescoring builds each state again from the recording
            shutil.rmtree(state)
        stack = ["--proxy-url", info.proxy_url, "--gateway-url", info.gateway_url, "--db", info.db_url]
        stack += ["--state-dir", info.state_root]
        assert main(["replay", "recorded", "--rescore", str(_stricter_checker(tmp_path)), "--json", *stack]) == 0
        rescored = json.loads(capsys.readouterr().out)
        elsewhere = [*stack[:-1], str(tmp_path / "not-the-state")]  # a state folder the env servers do not use
        assert main(["replay", "recorded", "--rescore", str(_stricter_checker(tmp_path)), *elsewhere]) == 1
        assert "is not under" in capsys.readouterr().err
    assert [(o["reward"], o["recorded_reward"], o["tool_calls"]) for o in rescored] == [(0.5, 1.0, 3)] * 2
    assert all(o["results_differed"] == 1 for o in rescored)  # the new event's id: drawn at random again
    assert all([c["passed"] for c in o["breakdown"].values()] == [True, False] for o in rescored), rescored
    engine = open_engine(info.db_url)
    replayed = replay_report(engine, "replayed")
    assert len(replayed) == 2
    for outcome in replayed:
        assert outcome.status == "finished" and outcome.reward == outcome.recorded_reward == 1.0
        assert _tokens(info.db_url, outcome.rollout_id) == _tokens(info.db_url, outcome.recorded_id)  # exactly
        assert outcome.divergence is None and outcome.replayed == outcome.tool_calls == 3
        timeline = reconstruct(engine, outcome.rollout_id).metadata["timeline"]  # the trajectory says so
        assert [e["replayed_from"] is not None for e in timeline if e["kind"] == "tool_event"] == [True] * 3
    with session_scope(engine) as session:
        rows = session.exec(select(Rollout)).all()
    recorded_rows = sorted((r for r in rows if r.run_id == "recorded"), key=lambda r: r.sample_index)
    again_rows = sorted((r for r in rows if r.run_id == "live-again"), key=lambda r: r.sample_index)
    assert len(recorded_rows) == len(again_rows) == 2
    for first, second in zip(recorded_rows, again_rows):  # live tools: the event id differs, so the tokens do
        assert first.reward == second.reward == 1.0
        assert _tokens(info.db_url, first.id) != _tokens(info.db_url, second.id)

    with scripted_policy_stack(tiny_model_dir, tmp_path, [_other_policy()]) as (_tap, info):
        _replay(info, tmp_path, "diverged")
        _replay(info, tmp_path, "stopped", on_divergence="stop")
    for run_id, action in (("diverged", "live"), ("stopped", "stop")):
        for outcome in replay_report(engine, run_id):
            d = outcome.divergence
            assert d is not None and (d.tool_call, d.turn, d.server, d.action) == (2, 2, "mail", action), d
            assert json.loads(d.expected_json)["arguments"] != json.loads(d.actual_json)["arguments"]
            assert json.loads(d.actual_json) == {"tool": "read_message", "arguments": {"message_id": "m-none"}}
            assert outcome.replayed == 1  # the first call, from the recording; then live, or refused
            assert outcome.tool_calls == (3 if action == "live" else 1)
    with session_scope(engine) as session:
        refused = [r for r in session.query(Refusal).all() if r.kind == "replay_stopped"]
    assert len(refused) == 4 and all("left the recording" in r.reason for r in refused)  # 2 rollouts x 2 calls

    assert main(["replay", "--report", "diverged", "--db", info.db_url]) == 0
    out = capsys.readouterr().out
    assert "diverged at tool call 2 (model turn 2, server mail); live tools from there" in out
    assert '"message_id": "m-none"' in out
