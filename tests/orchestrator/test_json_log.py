"""The orchestrator's lifecycle lines carry the run, rollout and task ids as fields, so `--log-format json` emits
them as JSON keys a log pipeline can filter on."""

from __future__ import annotations

import json
import logging
import os

import anyio
import pytest

from rollwire.logging import JsonFormatter
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from tests.orchestrator.runs import ScriptAdapter, orchestrator_settings, plan, run_with


@pytest.mark.asyncio
async def test_each_ended_rollout_is_one_json_line_with_its_ids(book, tmp_path, caplog) -> None:
    settings = orchestrator_settings(workspace_root=str(tmp_path))
    caplog.set_level(logging.INFO, logger="rollwire.orchestrator.scheduler")
    with anyio.fail_after(60):
        async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
            await run_with(runtime, book, plan("run-j", 1, 2), settings, ScriptAdapter("import sys; sys.exit(1)"))
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "rollwire.orchestrator.scheduler"]
    ended = [line for line in lines if line["message"] == "rollout failed"]
    rows = book.rollouts("run-j")
    assert sorted(line["rollout_id"] for line in ended) == sorted(row.id for row in rows)
    assert all(line["run_id"] == "run-j" and line["task_id"] == "t0" and line["level"] == "INFO" for line in ended)
