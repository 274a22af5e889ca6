"""The Kubernetes runtime: one Pod per rollout, followed by one pod watch (never polled), deleted once it has ended.

With ``warm_pool`` > 0 a rollout claims a ready pod of its image instead (``pool``), skipping the
cluster's pod start; the claimed pod is then followed and deleted like any other.

A rollout's Pod and Secret are named after the rollout id, so a second ``start`` (an orchestrator that
restarted mid-start) adopts the existing Pod instead of creating a duplicate, and ``attach`` re-joins a Pod
a previous orchestrator left running. Every API call goes through ``KubeApi`` (off the loop, with back-off).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
from kubernetes import client

from rollwire.errors import Conflict, NotFound, RollwireError, UpstreamError
from rollwire.orchestrator.runtimes.base import Ended, EndKind, Handle, RolloutJob
from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi, PodWatch
from rollwire.orchestrator.runtimes.kubernetes.mcp_sidecars import RolloutServers
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import (
    HARNESS,
    build_pod,
    build_secret,
    job_sidecars,
    pod_name,
    pod_verdict,
    run_configmap,
    run_configmap_name,
    secret_name,
    selector,
    sidecar_failure,
    sidecars_pending,
)
from rollwire.orchestrator.runtimes.kubernetes.pool import KubePodPool
from rollwire.orchestrator.runtimes.kubernetes.warm_pod import build_claim, claim_patch, claim_secret_name
from rollwire.settings import KubernetesSettings

logger = logging.getLogger(__name__)
SIDECAR_LOG_BYTES = 16 * 1024
"""The most of a failed MCP sidecar's log a rollout's error carries."""


@dataclass(slots=True)
class _Track:
    """What the watch has told us about one Pod."""

    ended: anyio.Event = field(default_factory=anyio.Event)
    verdict: Ended | None = None
    pod: dict[str, Any] | None = None


class KubernetesRuntime:
    """Pods via the official client; ``api.retried`` counts 429/5xx back-offs."""

    name = "kubernetes"

    def __init__(self, settings: KubernetesSettings, api_client: client.ApiClient) -> None:
        self._settings = settings
        self._servers = RolloutServers.from_settings(settings)
        """The mcpServers file's rollout-scoped servers: every rollout pod runs them as sidecars."""
        self.api = KubeApi(api_client, settings)
        self._tracks: dict[str, _Track] = {}
        self._owners: dict[str, dict[str, Any]] = {}
        self._owner_lock = anyio.Lock()
        self._watch = PodWatch(self.api, settings, selector())
        self._group: anyio.abc.TaskGroup | None = None
        self._pool: KubePodPool | None = None

    async def __aenter__(self) -> Self:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._watch.run, self._on_event)
        if self._settings.warm_pool > 0:
            self._pool = KubePodPool(self.api, self._settings, self._group)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._pool is not None:
            await self._pool.close()
        self._watch.stop()
        assert self._group is not None
        self._group.cancel_scope.cancel()
        try:
            await self._group.__aexit__(exc_type, exc, tb)  # raises the caller's error again, grouped
        finally:
            await self.api.aclose()

    def _on_event(self, kind: str, pod: dict[str, Any]) -> None:
        if self._pool is not None and self._pool.observe(kind, pod):
            return
        track = self._tracks.get((pod.get("metadata") or {}).get("name", ""))
        if track is None or track.ended.is_set():
            return
        if kind == "DELETED":
            track.verdict = pod_verdict(pod) or Ended(EndKind.LOST, reason="pod was deleted before it ended")
        else:
            track.pod = pod
            track.verdict = pod_verdict(pod)
        if track.verdict is not None:
            track.ended.set()

    async def _owner(self, run_id: str) -> dict[str, Any]:
        """The run's ConfigMap (created once), whose uid every rollout object names as owner."""
        async with self._owner_lock:
            if run_id not in self._owners:
                body = run_configmap(run_id, self._settings.namespace)
                try:
                    owner = await self.api.call("create_namespaced_config_map", self._settings.namespace, body)
                except Conflict:
                    owner = await self.api.call(
                        "read_namespaced_config_map", run_configmap_name(run_id), self._settings.namespace
                    )
                if not (owner.get("metadata") or {}).get("uid"):
                    raise UpstreamError("the API server returned the run ConfigMap without a uid")
                self._owners[run_id] = owner
            return self._owners[run_id]

    async def prewarm(self, run_id: str, image: str, deadline_s: float) -> None:
        """Fill the warm pool for ``image`` (owned by ``run_id``'s ConfigMap) and wait until its pods are ready."""
        if self._pool is None:
            raise RollwireError("prewarm needs a warm pool (KubernetesSettings.warm_pool > 0)")
        await self._pool.prewarm(image, await self._owner(run_id), deadline_s)

    async def start(self, job: RolloutJob) -> Handle:
        owner = await self._owner(job.run_id)
        sidecars = job_sidecars(job, self._settings, self._servers)
        if self._pool is not None and not sidecars.containers:  # a warm pod was started before its rollout was known
            claimed = await self._claim(job, owner)
            if claimed is not None:
                return claimed
        namespace = self._settings.namespace
        name = pod_name(job.rollout_id)
        self._tracks.setdefault(name, _Track())
        secret = build_secret(job, namespace, owner, sidecars)
        try:
            await self.api.call("create_namespaced_secret", namespace, secret)
        except Conflict:  # left by an interrupted start: it may hold a stale token
            await self.api.call("replace_namespaced_secret", secret_name(job.rollout_id), namespace, secret)
        try:
            await self.api.call("create_namespaced_pod", namespace, build_pod(job, self._settings, owner, sidecars))
        except Conflict:  # adopt: the same rollout's pod already exists (a restart, or a lost create response)
            self._on_event("MODIFIED", await self.api.call("read_namespaced_pod", name, namespace))
        logger.info("rollout pod %s created", name, extra={"rollout_id": job.rollout_id})
        return Handle(job.rollout_id, name)

    async def _claim(self, job: RolloutJob, owner: dict[str, Any]) -> Handle | None:
        """Hand the rollout a ready pool pod (its claim Secret, then the patch); None when none is ready or it vanished."""
        assert self._pool is not None
        image = job.launch.image or self._settings.image
        taken = self._pool.take(image, owner, job.deadline_s)
        if taken is None:
            self._pool.refill(image)
            return None
        name, age = taken
        namespace = self._settings.namespace
        self._tracks[name] = _Track()
        secret = build_claim(job, name, namespace, owner)
        try:
            await self.api.call("create_namespaced_secret", namespace, secret)
        except Conflict:
            await self.api.call("replace_namespaced_secret", claim_secret_name(name), namespace, secret)
        try:
            await self.api.call("patch_namespaced_pod", name, namespace, claim_patch(job, age))
        except NotFound:  # it ended between ready and claimed: start the rollout cold
            self._tracks.pop(name, None)
            await self._delete(claim_secret_name(name), "delete_namespaced_secret")
            return None
        finally:
            self._pool.refill(image)
        logger.info("rollout claimed warm pod %s", name, extra={"rollout_id": job.rollout_id})
        return Handle(job.rollout_id, name)

    async def wait(self, handle: Handle, timeout_s: float) -> Ended:
        track = self._tracks.setdefault(handle.ref, _Track())
        with anyio.move_on_after(max(timeout_s, 0.0)):
            await track.ended.wait()
        pod = track.pod or {}
        if track.verdict is None:
            pending = sidecars_pending(pod)
            if pending:  # the platform's set-up took the deadline: not the policy's time
                why = f"MCP server(s) {', '.join(map(repr, pending))} had not answered initialize at the deadline"
                return Ended(EndKind.FAILED, reason=why)
            return Ended(EndKind.TIMED_OUT, reason=f"deadline of {timeout_s:.1f}s")
        failed = sidecar_failure(pod)
        if failed is not None and failed[1] == track.verdict:
            log = await self._log_tail(handle.ref, failed[0], 20, previous=_restarted(pod, failed[0]), limit=SIDECAR_LOG_BYTES)
            reason = f"{track.verdict.reason}; its log:\n{log}" if log else track.verdict.reason
            return replace(track.verdict, reason=reason)
        return track.verdict

    async def logs_tail(self, handle: Handle, lines: int) -> str:
        return await self._log_tail(handle.ref, HARNESS, lines)

    async def _log_tail(self, pod: str, container: str, lines: int, previous: bool = False, limit: int = 0) -> str:
        """The container's last lines; ``previous``: of its run before the kubelet restarted it (why it stopped);
        ``limit``: at most that many bytes (a third-party server's lines can be of any length)."""
        extra = {"previous": "true"} if previous else {}
        extra |= {"limit_bytes": str(limit)} if limit else {}
        try:
            data = await self.api.raw(
                "read_namespaced_pod_log", pod, self._settings.namespace, container=container, tail_lines=lines,
                **extra,
            )  # fmt: skip
        except RollwireError:  # no logs (never started, already gone): the reason is recorded elsewhere
            return ""
        return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])

    async def stop(self, handle: Handle) -> None:
        warm = handle.ref != pod_name(handle.rollout_id)  # a claimed pool pod: its Secret is named after it
        secret = claim_secret_name(handle.ref) if warm else secret_name(handle.rollout_id)
        with anyio.CancelScope(shield=True):
            await self._delete(handle.ref, "delete_namespaced_pod")
            await self._delete(secret, "delete_namespaced_secret")
        self._tracks.pop(handle.ref, None)

    async def _delete(self, name: str, method: str) -> None:
        body = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        try:
            await self.api.call(method, name, self._settings.namespace, body=body)
        except NotFound:
            pass
        except RollwireError as exc:  # the owner reference still collects it with the run
            logger.warning("could not delete %s: %s", name, exc.message)

    async def attach(self, rollout_id: str, ref: str) -> Handle | None:
        name = ref or pod_name(rollout_id)
        self._tracks.setdefault(name, _Track())
        try:
            pod = await self.api.call("read_namespaced_pod", name, self._settings.namespace)
        except NotFound:
            self._tracks.pop(name, None)
            return None
        self._on_event("MODIFIED", pod)
        return Handle(rollout_id, name)

    async def delete_run(self, run_id: str) -> None:
        """Delete the run's ConfigMap; the garbage collector then removes every Pod and Secret it owns."""
        try:
            await self.api.call(
                "delete_namespaced_config_map",
                run_configmap_name(run_id),
                self._settings.namespace,
                body={"propagationPolicy": "Background"},
            )
        except NotFound:
            pass
        self._owners.pop(run_id, None)


def _restarted(pod: dict[str, Any], container: str) -> bool:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return any(s.get("name") == container and int(s.get("restartCount") or 0) > 0 for s in statuses)


__all__ = ["KubernetesRuntime"]
