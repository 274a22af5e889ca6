"""The Kubernetes warm pool: ``size`` ready pods per image, kept topped up, each claimed by one rollout.

A new pod costs a rollout what the cluster spends before its container runs (scheduling, image pull,
container start: seconds on a real node); a claimed pod has already paid it. The pool learns which pods are
ready from the runtime's one pod watch (``observe``), never by polling; a pod taken is replaced at once, in
the background. Pool pods are owned by the run ConfigMap of the run that first asked for the image, so
deleting that run collects them; ``close`` deletes those still idle. Objects come from ``warm_pod``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from rollwire.errors import NotFound, RollwireError, UpstreamError
from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi
from rollwire.orchestrator.runtimes.kubernetes.pod_spec import pod_is_running, pod_verdict
from rollwire.orchestrator.runtimes.kubernetes.warm_pod import WARM_LABEL, build_warm_pod, warm_pod_name
from rollwire.settings import KubernetesSettings

logger = logging.getLogger(__name__)

CLAIM_MARGIN_S = 60.0
"""A pod this close to its idle lifetime is not handed out (its deadline could no longer be shortened to fit)."""
HOLD_S = 30.0
"""After a pool pod ended unclaimed (an image that cannot be pulled, a node lost), its image is not refilled for this
long: rollouts start cold meanwhile and report the reason themselves."""


@dataclass(slots=True)
class _Image:
    owner: Mapping[str, Any]
    deadline_s: float
    pending: set[str] = field(default_factory=set)  # created, not yet running
    ready: list[str] = field(default_factory=list)  # running, unclaimed (oldest first)
    changed: anyio.Event = field(default_factory=anyio.Event)
    hold_until: float = 0.0  # monotonic; no new pool pods before it
    failure: str = ""  # why the last pool pod ended unclaimed


class KubePodPool:
    """Ready pods per image for one ``KubernetesRuntime``; all calls go through its ``KubeApi``."""

    def __init__(self, api: KubeApi, settings: KubernetesSettings, group: anyio.abc.TaskGroup) -> None:
        self._api = api
        self._settings = settings
        self._group = group
        self._images: dict[str, _Image] = {}
        self._image_of: dict[str, str] = {}  # pool pod name -> image
        self._born: dict[str, float] = {}  # pool pod name -> when it was created (monotonic)

    def observe(self, kind: str, pod: Mapping[str, Any]) -> bool:
        """A watch event; True when it was about an unclaimed pool pod (the runtime then ignores it)."""
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        image = self._image_of.get(name)
        if image is None or (meta.get("labels") or {}).get(WARM_LABEL) == "claimed":
            return False
        state = self._images[image]
        if kind == "DELETED" or pod_verdict(pod) is not None:  # gone, or ended idle: the next take refills
            self._drop(name)
            if kind != "DELETED":
                state.hold_until = time.monotonic() + HOLD_S
                state.failure = str(getattr(pod_verdict(pod), "reason", "") or "ended before it was claimed")
                self._group.start_soon(self._delete, name)
        elif pod_is_running(pod) and name in state.pending:
            state.pending.discard(name)
            state.ready.append(name)
        state.changed.set()
        state.changed = anyio.Event()
        return True

    def take(self, image: str, owner: Mapping[str, Any], deadline_s: float) -> tuple[str, float] | None:
        """A ready pod for ``image`` and its age in seconds, or None. Call ``refill`` once the claim's calls are made
        (replacements created before would queue ahead of them for the API connections)."""
        state = self._images.setdefault(image, _Image(owner, deadline_s))
        while state.ready:
            name = state.ready.pop(0)
            age = time.monotonic() - self._born[name]
            self._image_of.pop(name, None)
            self._born.pop(name, None)
            if age < self._settings.warm_pool_idle_s - CLAIM_MARGIN_S:
                return name, age
            self._group.start_soon(self._delete, name)
        return None

    def refill(self, image: str) -> None:
        """Create pods (in the background) until ``image`` has ``warm_pool`` of them ready or starting."""
        if image in self._images:
            self._fill(image)

    async def prewarm(self, image: str, owner: Mapping[str, Any], deadline_s: float) -> None:
        """Fill the pool for ``image`` and wait until every pod of it is ready."""
        state = self._images.setdefault(image, _Image(owner, deadline_s))
        self._fill(image)
        while len(state.ready) < self._settings.warm_pool:
            if time.monotonic() < state.hold_until:
                raise UpstreamError(f"warm pool for {image}: a pod ended before it was ready: {state.failure}")
            await state.changed.wait()

    def _fill(self, image: str) -> None:
        state = self._images[image]
        if time.monotonic() < state.hold_until:
            return
        for _ in range(self._settings.warm_pool - len(state.pending) - len(state.ready)):
            name = warm_pod_name()
            state.pending.add(name)
            self._image_of[name] = image
            self._born[name] = time.monotonic()
            self._group.start_soon(self._create, name, image)

    async def _create(self, name: str, image: str) -> None:
        state = self._images[image]
        body = build_warm_pod(name, image, self._settings, state.owner, state.deadline_s)
        try:
            await self._api.call("create_namespaced_pod", self._settings.namespace, body)
        except RollwireError as exc:  # not refilled here: the next take retries, and a broken image fails cold
            logger.warning("warm pod %s could not be created: %s", name, exc.message)
            self._drop(name)

    def _drop(self, name: str) -> None:
        image = self._image_of.pop(name, None)
        self._born.pop(name, None)
        if image is not None:
            state = self._images[image]
            state.pending.discard(name)
            if name in state.ready:
                state.ready.remove(name)

    async def _delete(self, name: str) -> None:
        try:
            await self._api.call(
                "delete_namespaced_pod", name, self._settings.namespace, body={"gracePeriodSeconds": 0}
            )
        except NotFound:
            pass
        except RollwireError as exc:  # the run's ConfigMap still collects it
            logger.warning("could not delete warm pod %s: %s", name, exc.message)

    async def close(self) -> None:
        """Delete every pool pod not claimed (idle or still starting)."""
        names = list(self._image_of)
        self._images.clear()
        self._image_of.clear()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for name in names:
                    group.start_soon(self._delete, name)


__all__ = ["KubePodPool"]
