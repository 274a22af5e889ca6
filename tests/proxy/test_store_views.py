"""The store readable without rollwire: a real proxy records a spliced multi-turn rollout (continuing calls keep
their request as an edit and their prompt as a tail), and plain SQL over the ``call_requests`` and
``call_prompts`` views gives every call's whole request and whole prompt back, on SQLite and PostgreSQL, equal
to what rollwire's own readers rebuild; pandas reads the same views straight from the SQLite file, and DuckDB and
pandas read ``rollwire export --flavor calls --format parquet`` as it is."""

from __future__ import annotations

import json
import sqlite3
from array import array
from collections.abc import Callable
from pathlib import Path

import duckdb
import openai
import pandas
import pytest
from openai.types.chat import ChatCompletionMessageParam
from sqlalchemy import create_engine, text

from rollwire.app.cli.__main__ import main
from rollwire.reconstruct import load_calls
from rollwire.store import open_engine
from rollwire.store.prompts import whole_prompts
from rollwire.store.requests import whole_requests
from tests.proxy.conftest import Proxy

GUIDANCE = "You are a careful assistant. " * 40  # long enough that a continuing call's request is kept as an edit


def _record(proxy: Proxy, model: str, turns: int = 4) -> str:
    rollout = proxy.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": GUIDANCE},
        {"role": "user", "content": "Name a colour."},
    ]
    for turn in range(turns):
        out = client.chat.completions.create(model=model, messages=messages, max_tokens=6)
        messages += [{"role": "assistant", "content": out.choices[0].message.content or ""},
                     {"role": "user", "content": f"And another, number {turn}?"}]  # fmt: skip
    return str(rollout["id"])


def _ids(data: bytes) -> list[int]:
    return array("i", bytes(data)).tolist()  # the documented layout: little-endian int32 (this machine's order)


def test_views_give_whole_requests_and_prompts_back_in_plain_sql(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str, any_store_url: str
) -> None:
    proxy = start_proxy(engine_url, store_url=any_store_url)
    rollout_id = _record(proxy, served_model)
    calls = load_calls(open_engine(any_store_url, read_only=True), rollout_id)
    assert any(c.request_base is not None for c in calls) and any(c.prompt_base is not None for c in calls)
    raw = create_engine(any_store_url)  # plain SQLAlchemy: no rollwire model, just SQL
    with raw.connect() as conn:
        requests: dict[int, str] = dict(conn.execute(
            text("SELECT call_id, request_json FROM call_requests WHERE rollout_id = :r"), {"r": rollout_id}
        ).all())  # fmt: skip
        query = text("SELECT call_id, prompt_ids, completion_ids FROM call_prompts WHERE rollout_id = :r")
        prompts = {row[0]: (bytes(row[1]), bytes(row[2])) for row in conn.execute(query, {"r": rollout_id})}
    raw.dispose()
    ids: list[int] = []
    for call in calls:  # read back from the store: each has its id
        assert call.id is not None
        ids.append(call.id)
    assert sorted(requests) == sorted(prompts) == sorted(ids)
    assert [requests[i] for i in ids] == whole_requests(calls)
    assert [prompts[i][0] for i in ids] == whole_prompts(calls)
    for call_id in ids:  # each whole request is JSON, the conversation as that call sent it
        body = json.loads(requests[call_id])
        assert body["messages"][0]["content"] == GUIDANCE
    first, last = prompts[ids[0]], prompts[ids[-1]]
    assert _ids(last[0])[: len(_ids(first[0]) + _ids(first[1]))] == _ids(first[0]) + _ids(first[1])  # spliced


def test_pandas_reads_the_views_from_the_sqlite_file(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str, tmp_path: Path
) -> None:
    """What a user without rollwire does: Python's sqlite3 and pandas over the file, the views' columns as named."""
    store = tmp_path / "store.db"
    proxy = start_proxy(engine_url, store_url=f"sqlite:///{store}")
    rollout_id = _record(proxy, served_model, turns=3)
    calls = load_calls(open_engine(f"sqlite:///{store}", read_only=True), rollout_id)
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        frame = pandas.read_sql_query(
            "SELECT r.call_id, r.request_json, p.prompt_ids FROM call_requests r JOIN call_prompts p USING (call_id) "
            "WHERE r.rollout_id = ? ORDER BY r.call_id", db, params=(rollout_id,),
        )  # fmt: skip
    assert frame["request_json"].tolist() == whole_requests(calls)
    assert [bytes(b) for b in frame["prompt_ids"]] == whole_prompts(calls)
    assert all(json.loads(request)["messages"][0]["content"] == GUIDANCE for request in frame["request_json"])


def test_the_calls_export_is_flat_whole_rows_duckdb_and_pandas_read(
    start_proxy: Callable[..., Proxy], engine_url: str, served_model: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``rollwire export --flavor calls --format parquet``: one row per call, the whole request and prompt in
    columns of plain types; DuckDB's SQL and pandas read the file as it is, and agree with the store."""
    store = tmp_path / "store.db"
    proxy = start_proxy(engine_url, store_url=f"sqlite:///{store}")
    rollout_id = _record(proxy, served_model, turns=3)
    proxy.admin.post(f"/admin/v1/rollouts/{rollout_id}/finish", json={"reward": 0.5}).raise_for_status()
    out = tmp_path / "calls.parquet"
    argv = ["export", "--db", f"sqlite:///{store}", "--flavor", "calls", "--format", "parquet", "--out", str(out)]
    assert main(argv) == 0
    assert "wrote 3 rows (calls, parquet) from 1 rollouts" in capsys.readouterr().err
    calls = load_calls(open_engine(f"sqlite:///{store}", read_only=True), rollout_id)
    frame = pandas.read_parquet(out)
    assert frame["request_json"].tolist() == whole_requests(calls)
    assert [list(ids) for ids in frame["prompt_ids"]] == [_ids(p) for p in whole_prompts(calls)]
    assert set(frame["reward"]) == {0.5} and set(frame["rollout_id"]) == {rollout_id}
    with duckdb.connect() as db:
        found = db.execute(
            "SELECT call_id, len(prompt_ids), len(completion_ids), json_extract_string(request_json, '$.model') "
            f"FROM read_parquet('{out}') ORDER BY call_id"
        ).fetchall()
    expected = [(c.id, len(_ids(p)), len(_ids(c.completion_ids))) for c, p in zip(calls, whole_prompts(calls))]
    assert [row[:3] for row in found] == expected and {row[3] for row in found} == {served_model}
    assert main(["export", "--input", str(out), "--flavor", "calls", "--out", str(tmp_path / "x.jsonl")]) == 1
    assert "give --db URL" in capsys.readouterr().err
