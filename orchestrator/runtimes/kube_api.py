"""The one place the ``kubernetes`` client is called: off the event loop, with back-off on 429/5xx, errors translated once.

Calls use ``_preload_content=False`` and parse JSON themselves (no model deserialization on the hot
path); ``ApiException``/urllib3 errors become rollwire errors here. ``PodWatch`` runs the client's pod
watch on a worker thread and hands each event to the event loop, reopening it when it drops.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from rollwire.errors import Conflict, InvalidRequest, NotFound, RollwireError, Unauthorized, UpstreamError
from rollwire.settings import KubernetesSettings

logger = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 10.0
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read


def api_client_from_settings(settings: KubernetesSettings, host: str | None = None) -> client.ApiClient:
    """An ApiClient for ``host`` (tests, benchmarks), the kubeconfig in settings, or the in-cluster account."""
    if host is not None:
        configuration = client.Configuration(host=host)
    else:
        configuration = client.Configuration()
        try:
            if settings.kubeconfig:
                config.load_kube_config(settings.kubeconfig, settings.context or None, configuration)
            else:
                try:
                    config.load_incluster_config(configuration)
                except config.ConfigException:
                    config.load_kube_config(None, settings.context or None, configuration)
        except (config.ConfigException, OSError) as exc:
            raise InvalidRequest(f"no usable Kubernetes configuration: {exc}", param="kubeconfig") from exc
    configuration.connection_pool_maxsize = settings.api_concurrency + 4
    return client.ApiClient(configuration)


def _translate(status: int, body: bytes, what: str) -> RollwireError:
    try:
        message = json.loads(body).get("message") or ""
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", errors="replace")
    text = f"{what}: HTTP {status}: {message}".rstrip(": ")
    if status == 404:
        return NotFound(text)
    if status == 409:
        return Conflict(text)
    if status in (401, 403):
        return Unauthorized(text)
    if status in (400, 422):
        return InvalidRequest(text)
    return UpstreamError(text)


class KubeApi:
    """CoreV1 calls with retries; ``retried`` counts back-offs taken (for tests and metrics)."""

    def __init__(self, api_client: client.ApiClient, settings: KubernetesSettings) -> None:
        self.core = client.CoreV1Api(api_client)
        self._settings = settings
        self._limiter = anyio.CapacityLimiter(settings.api_concurrency)
        self.retried = 0

    async def call(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        body = await self.raw(method, *args, **kwargs)
        return dict(json.loads(body)) if body else {}

    async def raw(self, method: str, *args: Any, **kwargs: Any) -> bytes:
        """Call ``CoreV1Api.<method>``; retry transient failures with capped exponential back-off + jitter."""
        fn = partial(getattr(self.core, method), *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        delay = self._settings.api_backoff_s
        for attempt in range(1, self._settings.api_retries + 1):
            try:
                status, body, retry_after = await anyio.to_thread.run_sync(_send, fn, limiter=self._limiter)
            except ApiException as exc:  # this client raises on non-2xx even without preloading
                status, body = int(exc.status or 0), (exc.body if isinstance(exc.body, bytes) else str(exc.body or exc.reason).encode())
                header = (exc.headers or {}).get("Retry-After")
                retry_after = float(header) if header and header.replace(".", "", 1).isdigit() else None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                status, body, retry_after = 0, str(exc).encode(), None
            if 200 <= status < 300:
                return body
            if status and status not in TRANSIENT_STATUSES:
                raise _translate(status, body, method)
            if attempt == self._settings.api_retries:
                raise UpstreamError(f"{method}: Kubernetes API unavailable after {attempt} attempts (last: {status or body[:120]!r})")
            self.retried += 1
            wait = retry_after if retry_after is not None else delay * (0.5 + random.random())
            logger.debug("%s answered %s; retrying in %.2fs", method, status, wait)
            await anyio.sleep(min(wait, MAX_BACKOFF_S))
            delay = min(delay * 2, MAX_BACKOFF_S)
        raise UpstreamError(f"{method}: no attempts configured")  # api_retries < 1


def _send(fn: Callable[[], Any]) -> tuple[int, bytes, float | None]:
    response = fn()
    try:
        data = response.data
        header = response.headers.get("Retry-After")
        retry_after = float(header) if header and header.replace(".", "", 1).isdigit() else None
        return int(response.status), bytes(data or b""), retry_after
    finally:
        response.release_conn()


class PodWatch:
    """Streams pod events matching ``label_selector`` to ``deliver(type, pod)`` on the loop until ``stop()``."""

    def __init__(self, api: KubeApi, settings: KubernetesSettings, label_selector: str) -> None:
        self._api = api
        self._settings = settings
        self._selector = label_selector
        self._stopping = threading.Event()
        self._watch: watch.Watch | None = None
        self.connected = anyio.Event()

    async def run(self, deliver: Callable[[str, dict[str, Any]], None]) -> None:
        """Run until stopped (call from a task group; the worker thread exits at the next event or timeout)."""
        await anyio.to_thread.run_sync(self._loop, deliver, abandon_on_cancel=True)

    def stop(self) -> None:
        self._stopping.set()
        if self._watch is not None:
            self._watch.stop()

    def _loop(self, deliver: Callable[[str, dict[str, Any]], None]) -> None:
        backoff = self._settings.api_backoff_s
        while not self._stopping.is_set():
            self._watch = watch.Watch()
            try:
                stream = self._watch.stream(
                    self._api.core.list_namespaced_pod,
                    self._settings.namespace,
                    label_selector=self._selector,
                    timeout_seconds=self._settings.watch_timeout_s,
                    deserialize=False,
                    _request_timeout=(REQUEST_TIMEOUT[0], self._settings.watch_timeout_s + 5),
                )
                anyio.from_thread.run_sync(self.connected.set)
                for event in stream:
                    if self._stopping.is_set():
                        return
                    anyio.from_thread.run_sync(deliver, event["type"], event["object"])
                backoff = self._settings.api_backoff_s
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self._stopping.is_set():
                    return
                logger.warning("pod watch dropped (%s); reopening in %.1fs", exc.__class__.__name__, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            except anyio.RunFinishedError:  # the event loop is gone
                return


__all__ = ["KubeApi", "PodWatch", "api_client_from_settings"]
