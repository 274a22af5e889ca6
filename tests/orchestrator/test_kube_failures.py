"""Pod failures map to the right final state: image pull -> infrastructure, retried; deadlines -> timed_out; 429 -> retried."""

from __future__ import annotations

import anyio
import pytest

from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from tests.orchestrator.fake_cluster import fake_cluster, live_objects
from tests.orchestrator.runs import ImageAdapter, k8s_settings, orchestrator_settings, plan, run_with


async def _run(adapter: ImageAdapter, book, run_id: str, tasks: int = 1, group: int = 2, **orch: object):
    async with fake_cluster() as (api, url, kubelet):
        settings = k8s_settings()
        with anyio.fail_after(30):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                progress = await run_with(runtime, book, plan(run_id, tasks, group), orchestrator_settings(**orch), adapter)
        assert live_objects(api, "pods") == []
        return book.rollouts(run_id), progress, api, runtime


@pytest.mark.asyncio
async def test_image_pull_failure_is_infrastructure_retried_then_failed(book) -> None:
    rows, progress, _api, _rt = await _run(ImageAdapter("img/missing"), book, "run-pull", max_attempts=2)
    assert sorted((row.attempt, row.status) for row in rows) == [(0, "failed"), (0, "failed"), (1, "failed"), (1, "failed")]
    assert all("image pull failed (ErrImagePull)" in (row.error or "") for row in rows)
    assert all('pull access denied for "img/missing"' in (row.error or "") for row in rows)
    assert all((row.error or "").startswith("infrastructure") for row in rows)  # left out of training, not scored 0
    assert sum("no retry left" in (row.error or "") for row in rows) == 2
    assert progress.retried == 2


@pytest.mark.asyncio
async def test_active_deadline_exceeded_is_timed_out(book) -> None:
    rows, progress, _api, _rt = await _run(ImageAdapter("img/deadline"), book, "run-dl")
    assert [row.status for row in rows] == ["timed_out", "timed_out"]
    assert all("activeDeadlineSeconds" in (row.error or "") for row in rows)
    assert progress.timed_out == 2


@pytest.mark.asyncio
async def test_orchestrator_deadline_stops_a_hanging_pod(book) -> None:
    rows, progress, _api, _rt = await _run(ImageAdapter("img/hang"), book, "run-hang", deadline_s=0.5)
    assert [row.status for row in rows] == ["timed_out", "timed_out"]
    assert all("deadline of" in (row.error or "") for row in rows)


@pytest.mark.asyncio
async def test_harness_failure_is_final_and_never_rerolled(book) -> None:
    rows, progress, _api, _rt = await _run(ImageAdapter("img/fail"), book, "run-fail")
    assert [row.status for row in rows] == ["failed", "failed"]
    assert all(row.exit_code == 3 and "exited with status 3" in (row.error or "") for row in rows)
    assert progress.retried == 0 and len(rows) == 2


@pytest.mark.asyncio
async def test_eviction_is_retried_as_a_new_attempt(book) -> None:
    rows, progress, _api, _rt = await _run(ImageAdapter("img/evict-once"), book, "run-evict", group=1)
    assert sorted((row.attempt, row.status) for row in rows) == [(0, "failed"), (1, "finished")]
    lost = next(row for row in rows if row.attempt == 0)
    assert "infrastructure: pod evicted" in (lost.error or "")
    assert next(row for row in rows if row.attempt == 1).meta["retry_of"] == lost.id
    assert progress.finished == 1 and progress.failed == 0 and progress.retried == 1


@pytest.mark.asyncio
async def test_api_429_is_backed_off_and_retried(book) -> None:
    async with fake_cluster() as (api, url, kubelet):
        for key in (("post", "pods"), ("post", "secrets"), ("delete", "pods"), ("delete", "secrets")):
            api.throttle[key] = 3
        settings = k8s_settings()
        with anyio.fail_after(30):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                progress = await run_with(runtime, book, plan("run-429", 2, 2), orchestrator_settings(concurrency=2), ImageAdapter())
        assert api.throttled == 12 and runtime.api.retried > 0  # (the client retries some 429s itself too)
        assert progress.finished == 4
        assert [row.status for row in book.rollouts("run-429")] == ["finished"] * 4
        assert set(kubelet.seen.values()) == {1} and live_objects(api, "pods") == []
