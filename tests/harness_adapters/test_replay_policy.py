"""``rollwire replay RUN --policy VERSION --checkpoints DIR``: the replay starts a stack of its own on the run's
store, its bundled engine serving that training checkpoint, and every call of the replay is sampled from it and
recorded as that policy version (the recorded run's calls were version 0). The tiny model, the reference agent,
the real proxy, gateway and env servers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlmodel import col, select

from rollwire.app.cli.__main__ import main
from rollwire.app.stack import StackInfo
from rollwire.store import ModelCall, Rollout, open_engine, session_scope
from tests.harness_adapters.conftest import run_one_task

pytestmark = pytest.mark.slow
OPTIONS: dict[str, object] = {"max_turns": 1, "max_tokens": 8, "temperature": 0.0}


def _versions(db_url: str, run_id: str) -> list[int]:
    with session_scope(open_engine(db_url)) as session:
        ids = select(Rollout.id).where(col(Rollout.run_id) == run_id)
        return [c.policy_version for c in session.exec(select(ModelCall).where(col(ModelCall.rollout_id).in_(ids)))]


def test_a_replay_samples_from_the_checkpoint_it_names(
    engine_stack: StackInfo, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = run_one_task(
        engine_stack,
        "reference",
        tmp_path / "ws",
        deadline_s=60,
        model=engine_stack.model,
        max_turns=1,
        max_tokens=8,
        temperature=0.0,
    )
    assert row.status == "finished", (row.error, row.log_tail)
    checkpoint = tmp_path / "train" / "step-000003"  # what the trainer writes: HF files + its state
    shutil.copytree(tiny_model_dir, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 3, "policy_version": 3}))
    options = [arg for key, value in OPTIONS.items() for arg in ("--option", f"{key}={value}")]
    where = ["--db", engine_stack.db_url, "--state-dir", engine_stack.state_root]
    code = main(["replay", row.run_id, "--policy", "3", "--checkpoints", str(tmp_path / "train"), "--run-id", "v3",
                 "--json", *options, *where])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (outcome,) = json.loads(captured.out)
    assert outcome["recorded_id"] == row.id and outcome["status"] == "finished", outcome
    assert set(_versions(engine_stack.db_url, row.run_id)) == {0}
    assert _versions(engine_stack.db_url, "v3") and set(_versions(engine_stack.db_url, "v3")) == {3}

    missing = main(["replay", row.run_id, "--policy", "7", "--checkpoints", str(tmp_path / "train"), *where])
    assert missing == 1 and "no checkpoint of policy version 7" in capsys.readouterr().err
