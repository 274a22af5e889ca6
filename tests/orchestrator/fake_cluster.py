"""A test-side cluster: kmock's Kubernetes emulator (a real HTTP server) plus a fake kubelet that moves pod phases.

The kubelet watches pods over HTTP like a real one and patches ``pods/<name>/status`` according to the
pod's image: ``img/ok`` runs and succeeds with the final answer ``42``, ``img/fail``
exits 3, ``img/missing`` never pulls, ``img/deadline`` hits activeDeadlineSeconds, ``img/hang`` runs
forever, ``img/hold`` runs until ``release`` is set, ``img/evict-once`` is evicted the first time; a pod with a
native sidecar (an MCP server) of image ``img/mcp-crash`` stays Pending with that sidecar restarted, one of
``img/mcp-slow`` stays Pending with it started but not yet ready.
``start_delay_s`` models what a real node spends before a container runs (scheduling, image pull, start),
``run_s`` how long a harness runs.
A warm-pool pod (label ``rollwire.dev/warm``) runs its waiter and starts the harness only once it is
claimed: its claim Secret exists and the pod carries the rollout label.
It also counts what a test asserts on: pods alive at once (peak), create requests per pod name, and when
each harness started (``started``, monotonic clock).

``python fake_cluster.py [--start-delay S] [--run-time S]`` serves one in a process of its own (as an API server is never in
the orchestrator's process), prints ``READY <url>``, answers ``GET /_fake/stats``, and exits when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import kmock

NAMESPACE = "rw-test"
LOG_PATH = re.compile(r"/api/v1/namespaces/[^/]+/pods/[^/]+/log")
STATS_PATH = "/_fake/stats"
WARM_LABEL = "rollwire.dev/warm"
ROLLOUT_LABEL = "rollwire.dev/rollout"


class FakeApiServer(kmock.KubernetesEmulator):
    """The emulator, plus what a real API server adds on create (uid), pod logs, injected 429s, and counters.

    kmock matches every request against its whole request history (quadratic in requests), keeps deleted
    objects and scans all objects to find the one a request names; this fake keeps only the current request,
    forgets deleted objects, finds a named object by key, counts what the tests need itself, and answers logs
    and throttling directly.
    """

    def __init__(self) -> None:
        super().__init__()
        self.posts: Counter[tuple[str, str]] = Counter()
        self.throttle: Counter[tuple[str, str]] = Counter()  # (method, plural) -> 429s still to answer
        self.throttled = 0
        self.log_queries: list[dict[str, str]] = []  # the query of each pod-log read
        self.owners: dict[str, set[str]] = {}  # plural -> owner uids named by created objects
        self.stats: Any = dict  # set by fake_cluster: the kubelet's figures, served at STATS_PATH

    async def _handle(self, request: Any) -> Any:
        self._requests[:] = [request]
        if request.url.path == STATS_PATH:
            return aiohttp.web.json_response(self.stats())
        plural = request.resource.plural if request.resource is not None else ""
        key = (str(request.method.value).lower(), plural)
        if self.throttle[key] > 0:
            self.throttle[key] -= 1
            self.throttled += 1
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests"}
            return aiohttp.web.json_response(body, status=429, headers={"Retry-After": "0"})
        if request.method == kmock.method.GET and LOG_PATH.fullmatch(request.url.path):
            query = request.url.query
            self.log_queries.append(dict(query))
            which = ", previous run" if query.get("previous") == "true" else ""
            text = f"log line 1 of {request.name} ({query.get('container', 'harness')}{which})\nlast line of {request.name}\n"
            if query.get("limitBytes"):  # the API server's own cut
                text = text[: int(query["limitBytes"])]
            return aiohttp.web.Response(text=text)
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("resourceVersion", "1")
            self.posts[(plural, meta.get("name", ""))] += 1
            self.owners.setdefault(plural, set()).update(ref["uid"] for ref in meta.get("ownerReferences", []))
        response = await super()._handle(request)
        if request.action == kmock.action.DELETE and request.resource is not None and request.name is not None:
            self._forget(request.resource, request.namespace, request.name)
        return response

    def _KubernetesEmulator__get_objs(self, request: Any, strict: bool) -> list[Any]:
        """kmock's object lookup scans every object per request; one that names its object is one dict lookup here
        (a miss still scans, so what matches is kmock's own rule)."""
        if request.name is not None and request.namespace is not None:
            found = self._objects._objects.get((request.resource, request.namespace, request.name))
            if found is not None:
                return [found]
        return list(super()._KubernetesEmulator__get_objs(request, strict))  # type: ignore[misc]

    def _forget(self, resource: Any, namespace: str | None, name: str) -> None:
        """Drop a deleted object, as an API server does (kmock keeps it, and scans every object on each request)."""
        key = (resource, namespace, name)
        if key in self._objects and self._objects[key].deleted:
            del self._objects[key]


    def has(self, plural: str, name: str) -> bool:
        return any(res.plural == plural and key == name and not obj.deleted for (res, _ns, key), obj in self._objects.items())


class FakeKubelet:
    def __init__(
        self, handler: FakeApiServer, server: kmock.Server, start_delay_s: float = 0.0, run_s: float = 0.0
    ) -> None:
        self._handler = handler
        self._server = server
        self.start_delay_s = start_delay_s
        self.run_s = run_s
        self.started: dict[str, float] = {}  # pod name -> when its harness started (time.monotonic)
        self._claimed: dict[str, asyncio.Event] = {}  # warm pods waiting for their rollout
        self.release = asyncio.Event()
        self.live: set[str] = set()
        self.peak = 0
        self.seen: Counter[str] = Counter()
        self.running: set[str] = set()
        self.pending_sidecars: set[str] = set()  # pods whose MCP sidecars are still starting (img/mcp-slow)
        self.changed = asyncio.Event()
        self._evicted: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        url = f"/api/v1/namespaces/{NAMESPACE}/pods?watch=true"
        async with self._server.client.get(url, timeout=None) as response:
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                pod = event["object"]
                name = pod["metadata"]["name"]
                if event["type"] == "ADDED" and name not in self.live:
                    self.live.add(name)
                    self.seen[name] += 1
                    self.peak = max(self.peak, len(self.live))
                    task = asyncio.create_task(self._act(pod))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif event["type"] == "DELETED":
                    self.live.discard(name)
                    self.running.discard(name)
                    if name in self._claimed:
                        self._claimed.pop(name).set()
                elif ROLLOUT_LABEL in (pod["metadata"].get("labels") or {}) and name in self._claimed:
                    self._claimed[name].set()
                self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_for(self, predicate: Any) -> None:
        while not predicate():
            await self.changed.wait()

    async def _patch(self, name: str, status: dict[str, Any]) -> None:
        url = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status"
        async with self._server.client.patch(url, json={"status": status}) as response:
            assert response.status in (200, 404), await response.text()

    def stats(self) -> dict[str, Any]:
        return {"peak": self.peak, "started": dict(self.started), "pods": len(self.seen)}

    async def _act(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        image = pod["spec"]["containers"][0]["image"]
        warm = WARM_LABEL in (pod["metadata"].get("labels") or {})
        claimed = self._claimed.setdefault(name, asyncio.Event()) if warm else None
        if self.start_delay_s:
            await asyncio.sleep(self.start_delay_s)  # a modelled cost (pull + start), not a wait for work
        sidecars = [c for c in pod["spec"].get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        if any(c["image"] == "img/mcp-slow" for c in sidecars):  # its startup probe has not passed yet
            starting = [{"name": c["name"], "ready": False, "restartCount": 0, "state": {"running": {}}} for c in sidecars]
            await self._patch(name, {"phase": "Pending", "initContainerStatuses": starting,
                                     "containerStatuses": [_status(waiting={"reason": "PodInitializing"})]})  # fmt: skip
            self.pending_sidecars.add(name)
            self._notify()
            return
        if any(c["image"] == "img/mcp-crash" for c in sidecars):  # its startup probe never passes: restarted
            crashed = [_sidecar_status(c["name"], c["image"] == "img/mcp-crash") for c in sidecars]
            waiting = {"reason": "PodInitializing"}
            await self._patch(name, {"phase": "Pending", "initContainerStatuses": crashed,
                                     "containerStatuses": [_status(waiting=waiting)]})  # fmt: skip
            return
        if image == "img/missing":
            waiting = {"reason": "ErrImagePull", "message": f'pull access denied for "{image}"'}
            await self._patch(name, {"phase": "Pending", "containerStatuses": [_status(waiting=waiting)]})
            return
        await self._patch(name, {"phase": "Running", "containerStatuses": [_status(running={})]})
        if claimed is not None:  # the waiter runs until the pod is claimed; the harness needs its claim Secret
            await claimed.wait()
            self._claimed.pop(name, None)
            if name not in self.live:
                return
            claim = f"{name}-claim"
            if not self._handler.has("secrets", claim):
                terminated = {"exitCode": 97, "reason": "Error", "message": f"claimed without its Secret {claim}"}
                await self._patch(name, {"phase": "Failed", "containerStatuses": [_status(terminated=terminated)]})
                return
        self.started[name] = time.monotonic()
        self.running.add(name)
        self._notify()
        if self.run_s:
            await asyncio.sleep(self.run_s)  # a modelled harness run
        if image == "img/hang":
            return
        if image == "img/hold":
            await self.release.wait()
        if image == "img/deadline":
            await self._patch(name, {"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active too long"})
        elif image == "img/evict-once" and not self._evicted:
            self._evicted.add(name)
            await self._patch(name, {"phase": "Failed", "reason": "Evicted", "message": "node ran out of memory"})
        else:
            code = 3 if image == "img/fail" else 0
            answer = "42"
            terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": answer}
            phase = "Succeeded" if code == 0 else "Failed"
            await self._patch(name, {"phase": phase, "containerStatuses": [_status(terminated=terminated)]})

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _sidecar_status(name: str, crashed: bool) -> dict[str, Any]:
    """A native sidecar's status: started, or exited and restarted by the kubelet (CrashLoopBackOff)."""
    if not crashed:
        return {"name": name, "ready": True, "restartCount": 0, "image": "", "imageID": "", "state": {"running": {}}}
    last = {"terminated": {"exitCode": 1, "reason": "Error"}}
    state = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}}
    return {
        "name": name,
        "ready": False,
        "restartCount": 2,
        "image": "",
        "imageID": "",
        "lastState": last,
        "state": state,
    }


def _status(**state: Any) -> dict[str, Any]:
    return {"name": "harness", "ready": "running" in state, "restartCount": 0, "image": "", "imageID": "", "state": state}


def live_objects(handler: FakeApiServer, plural: str) -> list[str]:
    return [name for (resource, _ns, name), obj in handler.objects.items() if resource.plural == plural and not obj.deleted]


def creates(handler: FakeApiServer, plural: str) -> Counter[str]:
    """POSTs per object name (a retried create after a lost response counts twice)."""
    return Counter({name: count for (kind, name), count in handler.posts.items() if kind == plural})


@contextlib.asynccontextmanager
async def fake_cluster(
    start_delay_s: float = 0.0, run_s: float = 0.0
) -> AsyncIterator[tuple[FakeApiServer, str, FakeKubelet]]:
    """(emulator, API URL, kubelet): a served emulator with a kubelet following its pods."""
    async with FakeApiServer() as handler, kmock.Server(handler) as server:
        for resource in ("v1/pods", "v1/secrets", "v1/configmaps", "batch/v1/jobs"):
            handler.resources[resource] = kmock.ResourceInfo()  # known, with no discovery details
        kubelet = FakeKubelet(handler, server, start_delay_s, run_s)
        handler.stats = kubelet.stats
        watcher = asyncio.create_task(kubelet.run())
        try:
            yield handler, str(server.url).rstrip("/"), kubelet
        finally:
            await kubelet.stop()
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


async def _serve(start_delay_s: float, run_s: float) -> None:
    async with fake_cluster(start_delay_s, run_s) as (_api, url, _kubelet):
        print(f"READY {url}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="serve the fake cluster in this process until stdin closes")
    parser.add_argument("--start-delay", type=float, default=0.0, help="modelled seconds before a container runs")
    parser.add_argument("--run-time", type=float, default=0.0, help="modelled seconds a harness runs")
    args = parser.parse_args()
    asyncio.run(_serve(args.start_delay, args.run_time))
