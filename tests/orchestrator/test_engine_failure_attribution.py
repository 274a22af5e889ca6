"""An engine that fails during a rollout makes that rollout the platform's failure, whatever its harness did next.

The harness cannot produce this evidence: the proxy records the engine's failure on the rollout's own call
(status ``engine_failed``) before the harness hears of it, and the scheduler reads it when the rollout ends. The
rollout is retried, its retry runs on a healthy engine and scores, and the failed attempt never reaches training.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.responses import JSONResponse

from rollwire.app.stack import StackInfo
from rollwire.orchestrator.runtimes.local.runtime import LocalRuntime
from rollwire.orchestrator.scheduler import Endpoints, Scheduler, live_rows
from rollwire.orchestrator.scoring import ExitCodeScorer
from rollwire.rollouts import RolloutBook
from rollwire.store.db import open_engine
from rollwire.trajectory import failure_cause
from tests.orchestrator.live_stack import live_stack
from tests.orchestrator.runs import ScriptAdapter, orchestrator_settings, plan
from tests.real_parts import needs_sandbox

TWO_CALLS = r"""
import json, os, sys, urllib.error, urllib.request
body = json.dumps({"model": "any", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
for turn in range(2):
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    try:
        urllib.request.urlopen(request, timeout=60).read()
    except urllib.error.HTTPError as exc:
        print("the model call failed:", exc.code)
        sys.exit(1)  # what a harness does when its model fails: the platform's doing, not the policy's
print("both calls answered")
"""


class FailSecondCompletion:
    """The engine answers 503 to the second completion it is asked for (the first rollout's second turn)."""

    def __init__(self, app: Any) -> None:
        self.app, self.completions = app, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/completions":
            self.completions += 1
            if self.completions == 2:
                await JSONResponse({"error": {"message": "engine overloaded"}}, status_code=503)(scope, receive, send)
                return
        await self.app(scope, receive, send)


@pytest.fixture()
def stack(tmp_path: Path, tiny_model_dir: Path) -> Iterator[StackInfo]:
    with live_stack(tmp_path / "stack", tiny_model_dir, wrap_engine=FailSecondCompletion) as info:
        yield info


@needs_sandbox
def test_a_rollout_the_engine_failed_is_infrastructure_and_its_retry_scores(stack: StackInfo, tmp_path: Path) -> None:
    book = RolloutBook(open_engine(stack.db_url))
    settings = orchestrator_settings(workspace_root=str(tmp_path / "ws"), deadline_s=120)  # the runtime at its defaults

    async def run() -> None:
        async with LocalRuntime(settings, host_env=dict(os.environ)) as runtime:
            scheduler = Scheduler(
                book=book, runtime=runtime, adapter=ScriptAdapter(TWO_CALLS), scorer=ExitCodeScorer(),
                settings=settings, endpoints=Endpoints(stack.proxy_url, stack.gateway_url),
            )  # fmt: skip
            await scheduler.run(plan("engine-fault", 1, 1))

    anyio.run(run)
    rows = sorted(book.rollouts("engine-fault"), key=lambda row: row.attempt)
    assert [row.attempt for row in rows] == [0, 1], [(row.status, row.error) for row in rows]
    failed, retry = rows
    assert failed.exit_code == 1 and "the model call failed: 502" in (failed.log_tail or "")
    assert failure_cause(failed.status, failed.error) == "infrastructure", failed.error
    assert "the engine failed its model call" in (failed.error or "") and "503" in (failed.error or "")
    assert retry.status == "finished" and retry.reward == 1.0, (retry.error, retry.log_tail)
    assert live_rows(rows) == [retry]  # the failed attempt is replaced in its group, never trained on
