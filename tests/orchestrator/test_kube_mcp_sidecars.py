"""The Kubernetes runtime with an mcpServers file (kmock's API server and a fake kubelet): each rollout pod it
creates carries the file's rollout-scoped servers as sidecars, and its own key in its Secret; a sidecar that
cannot start fails the rollout as set-up (never scored, never retried), naming the server, with its log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from rollwire.harness_adapters.base import Launch
from rollwire.mcp_servers.placement import sidecar_key
from rollwire.orchestrator.runtimes.base import EndKind, RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings
from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import SERVERS_ANNOTATION
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import pod_verdict, sidecars_pending
from rollwire.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
from rollwire.settings import KubernetesSettings
from tests.orchestrator.fake_cluster import NAMESPACE, FakeApiServer, fake_cluster, live_objects
from tests.orchestrator.runs import ImageAdapter, k8s_settings, orchestrator_settings, plan, run_with


def _settings(tmp_path: Path, image: str, **overrides: object) -> KubernetesSettings:
    path = tmp_path / "mcp.json"
    memory = {"command": "mcp-server-memory", "image": image, "env": {"MEMORY_FILE_PATH": "{rollout_dir}/g.jsonl"}}
    path.write_text(json.dumps({"mcpServers": {"memory": memory, "time": {"command": "t", "scope": "shared"}}}))
    return k8s_settings(mcp_config=str(path), mcp_sidecar_secret="deploy-secret", **overrides)


def _stored(api: FakeApiServer, plural: str, name: str) -> dict[str, Any]:
    """An object as the API server holds it."""
    found = [h for (res, _ns, key), h in api.objects.items() if res.plural == plural and key == name]
    assert len(found) == 1, (plural, name)
    return json.loads(json.dumps(found[0].raw))


def _job(rollout_id: str, image: str) -> RolloutJob:
    return RolloutJob(
        "run-mcp", rollout_id, Launch(argv=("harness",), env={"OPENAI_API_KEY": "tok"}, image=image), 30.0
    )


@pytest.mark.asyncio
async def test_each_rollout_pod_gets_the_servers_and_its_own_key(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "img/mcp-ok", warm_pool=1)  # a pool pod predates its rollout: not used here
    async with fake_cluster() as (api, url, kubelet):
        with anyio.fail_after(30):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                handles = [await runtime.start(_job(rid, "img/hold")) for rid in ("ro-a", "ro-b")]
                pods = [await runtime.api.call("read_namespaced_pod", h.ref, NAMESPACE) for h in handles]
                secrets = [_stored(api, "secrets", f"{h.ref}-env") for h in handles]
                kubelet.release.set()
                ended = [await runtime.wait(h, 30) for h in handles]
                for handle in handles:
                    await runtime.stop(handle)
    assert [e.kind for e in ended] == [EndKind.EXITED, EndKind.EXITED]
    assert [h.ref for h in handles] == ["rw-ro-a", "rw-ro-b"]  # cold pods: named after their rollout
    for pod, secret, rollout in zip(pods, secrets, ("ro-a", "ro-b"), strict=True):
        (sidecar,) = pod["spec"]["initContainers"]
        assert (
            sidecar["name"] == "mcp-memory"
            and sidecar["image"] == "img/mcp-ok"
            and sidecar["restartPolicy"] == "Always"
        )
        assert secret["stringData"]["mcp-key-memory"] == sidecar_key("deploy-secret", "rollout", rollout, "memory")
        harness_env = json.dumps(pod["spec"]["containers"][0]["env"])
        assert "mcp-key-" not in harness_env and "ROLLWIRE_MCP_SIDECAR_KEY" not in harness_env


@pytest.mark.asyncio
async def test_a_sidecar_that_cannot_start_fails_the_rollout_as_set_up(book, tmp_path: Path) -> None:
    settings = _settings(tmp_path, "img/mcp-crash")
    async with fake_cluster() as (api, url, _kubelet):
        with anyio.fail_after(30):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                progress = await run_with(
                    runtime, book, plan("run-crash", 1, 2), orchestrator_settings(), ImageAdapter()
                )
        assert live_objects(api, "pods") == []
    rows = book.rollouts("run-crash")
    assert [row.status for row in rows] == ["failed", "failed"] and progress.retried == 0
    for row in rows:
        error = row.error or ""
        assert "MCP server 'memory' (mcp-memory) did not start: exit 1 (Error)" in error, error
        assert "(mcp-memory, previous run)" in error  # the log of the run that failed, read from the API
        assert row.reward is None
    sidecar_reads = [q for q in api.log_queries if q.get("container") == "mcp-memory"]
    assert sidecar_reads and all(q["limitBytes"] == "16384" and q["previous"] == "true" for q in sidecar_reads)


def test_no_file_no_secret_needed(tmp_path: Path) -> None:
    """Without an mcpServers file the runtime needs no sidecar secret; with rollout-scoped servers it does."""
    from rollwire.errors import InvalidRequest
    from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import RolloutServers

    assert RolloutServers.from_settings(KubernetesSettings()).specs == {}
    no_secret = _settings(tmp_path, "x").model_copy(update={"mcp_sidecar_secret": ""})
    with pytest.raises(InvalidRequest, match="sidecar secret"):
        RolloutServers.from_settings(no_secret)


def _pod(init: list[dict[str, Any]], harness: dict[str, Any]) -> dict[str, Any]:
    placed = json.dumps({"mcp-memory": {"server": "memory", "port": 8400}})
    status = {"phase": "Pending", "initContainerStatuses": init, "containerStatuses": [{"name": "harness", "state": harness}]}
    return {"metadata": {"annotations": {SERVERS_ANNOTATION: placed}}, "status": status}


@pytest.mark.parametrize(
    ("sidecar", "kind", "says"),
    [
        ({"state": {"waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}}, EndKind.LOST,
         "MCP server 'memory' (mcp-memory): image pull failed (ErrImagePull): pull access denied"),
        ({"state": {"waiting": {"reason": "InvalidImageName", "message": "bad"}}}, EndKind.FAILED,
         "MCP server 'memory' (mcp-memory): image pull failed (InvalidImageName)"),
        ({"state": {"waiting": {"reason": "CreateContainerConfigError", "message": "no key"}}}, EndKind.FAILED,
         "MCP server 'memory' (mcp-memory) could not start (CreateContainerConfigError): no key"),
        ({"restartCount": 1, "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}, "state": {"running": {}}},
         EndKind.FAILED, "MCP server 'memory' (mcp-memory) did not start: exit 1 (Error)"),
    ],
)  # fmt: skip
def test_each_way_a_sidecar_fails_names_the_server(sidecar: dict[str, Any], kind: EndKind, says: str) -> None:
    pod = _pod([{"name": "mcp-memory", "restartCount": 0, **sidecar}], {"waiting": {"reason": "PodInitializing"}})
    ended = pod_verdict(pod)
    assert ended is not None and ended.kind == kind and says in (ended.reason or ""), ended


def test_a_sidecar_that_stops_after_the_harness_started_is_not_a_set_up_failure() -> None:
    crashed = {"name": "mcp-memory", "restartCount": 2, "lastState": {"terminated": {"exitCode": 1}}, "state": {}}
    pod = _pod([crashed], {"running": {}})
    pod["status"]["phase"] = "Running"
    assert pod_verdict(pod) is None  # the harness runs on; its tool calls to the server fail meanwhile
    assert sidecars_pending(pod) == []
    assert sidecars_pending(_pod([], {"waiting": {"reason": "PodInitializing"}})) == ["memory"]


@pytest.mark.asyncio
async def test_servers_still_starting_at_the_deadline_are_set_up_not_a_timeout(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "img/mcp-slow")
    async with fake_cluster() as (_api, url, kubelet):
        with anyio.fail_after(30):
            async with KubernetesRuntime(settings, api_client_from_settings(settings, host=url)) as runtime:
                handle = await runtime.start(_job("ro-slow", "img/ok"))
                await kubelet.wait_for(lambda: handle.ref in kubelet.pending_sidecars)
                ended = await runtime.wait(handle, 0.5)
                await runtime.stop(handle)
    assert ended.kind == EndKind.FAILED and "MCP server(s) 'memory' had not answered initialize" in (ended.reason or "")
