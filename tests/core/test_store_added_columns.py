"""A store written before a column was added (ModelCall.sampling) still opens: the column is added, with its default."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from rollwire.store import ModelCall, Rollout, Run, open_engine, session_scope


def test_an_older_store_gains_the_new_column(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = open_engine(url)
    with engine.begin() as connection:  # as an older rollwire left it
        connection.execute(text("ALTER TABLE modelcall DROP COLUMN sampling"))
    with session_scope(engine) as session:
        session.add(Run(id="run"))
    with session_scope(engine) as session:
        session.add(Rollout(id="r", run_id="run", token_hash="h"))
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO modelcall (rollout_id, dialect, requested_model, served_model, "
                                "request_json, response_json, prompt_ids, completion_ids, completion_logprobs, "
                                "choice_index, policy_version, segment_index, reused_prefix_len, status, latency_ms, "
                                "started_ns, ended_ns) VALUES ('r', 'chat', '', '', '', '', x'', x'', x'', 0, 0, 0, 0, "
                                "'complete', 0, 1, 1)"))
    engine.dispose()

    reopened = open_engine(url)
    with session_scope(reopened) as session:
        old = session.get(ModelCall, 1)
        assert old is not None and old.sampling == {}
        session.add(ModelCall(rollout_id="r", sampling={"temperature": 0.5}))
    with session_scope(reopened) as session:
        assert session.get(ModelCall, 2).sampling == {"temperature": 0.5}  # type: ignore[union-attr]
