"""The one place the Kubernetes API is called: async HTTP with keep-alive, back-off on 429/5xx, errors translated once.

Calls are plain REST on one ``aiohttp`` session (a kept-alive connection pool, no thread per call): the
configuration (host, TLS, credentials, refreshed by the client's own hooks) comes from the official
``kubernetes`` client, which also runs the pod watch (``PodWatch``, on a worker thread, reopened when it
drops). At 256 rollouts in flight the client's per-call thread hop, urllib3 and model serialization cost more
CPU than the rest of a rollout's lifecycle (httpx's pool, tried too, scans its connections per request); the
REST paths are the CoreV1 ones the client's methods of the same name use.
"""

from __future__ import annotations

import json
import logging
import random
import ssl
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
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

_NS = "/api/v1/namespaces/{namespace}"
_JOBS = "/apis/batch/v1/namespaces/{namespace}/jobs"
ROUTES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # the official client's method name -> (HTTP method, path, its positional arguments)
    "create_namespaced_pod": ("POST", _NS + "/pods", ("namespace", "body")),
    "read_namespaced_pod": ("GET", _NS + "/pods/{name}", ("name", "namespace")),
    "patch_namespaced_pod": ("PATCH", _NS + "/pods/{name}", ("name", "namespace", "body")),
    "delete_namespaced_pod": ("DELETE", _NS + "/pods/{name}", ("name", "namespace")),
    "read_namespaced_pod_log": ("GET", _NS + "/pods/{name}/log", ("name", "namespace")),
    "create_namespaced_secret": ("POST", _NS + "/secrets", ("namespace", "body")),
    "replace_namespaced_secret": ("PUT", _NS + "/secrets/{name}", ("name", "namespace", "body")),
    "delete_namespaced_secret": ("DELETE", _NS + "/secrets/{name}", ("name", "namespace")),
    "create_namespaced_config_map": ("POST", _NS + "/configmaps", ("namespace", "body")),
    "read_namespaced_config_map": ("GET", _NS + "/configmaps/{name}", ("name", "namespace")),
    "delete_namespaced_config_map": ("DELETE", _NS + "/configmaps/{name}", ("name", "namespace")),
    # BatchV1Api: the trainer Job of `rollwire rl`
    "create_namespaced_job": ("POST", _JOBS, ("namespace", "body")),
    "read_namespaced_job": ("GET", _JOBS + "/{name}", ("name", "namespace")),
    "delete_namespaced_job": ("DELETE", _JOBS + "/{name}", ("name", "namespace")),
}
QUERY = {
    "container": "container", "tail_lines": "tailLines", "previous": "previous", "limit_bytes": "limitBytes",
    "propagation_policy": "propagationPolicy",
}  # fmt: skip
"""Keyword arguments sent as query parameters (client name -> API name)."""


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


def _tls(configuration: client.Configuration) -> ssl.SSLContext | bool:
    """The client configuration's TLS settings as one SSL context (verification, CA, client certificate)."""
    if not configuration.host.startswith("https"):
        return True  # plain HTTP: nothing to verify
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


def _retry_after(value: str | None) -> float | None:
    return float(value) if value and value.replace(".", "", 1).isdigit() else None


class KubeApi:
    """API calls (``ROUTES``) with retries; ``retried`` counts back-offs taken (for tests and metrics)."""

    def __init__(self, api_client: client.ApiClient, settings: KubernetesSettings) -> None:
        self.core = client.CoreV1Api(api_client)  # the watch's client
        self._configuration = api_client.configuration
        self._settings = settings
        self._base = self._configuration.host.rstrip("/")
        self._http: aiohttp.ClientSession | None = None
        self.retried = 0

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:  # made on the event loop that uses it
            connector = aiohttp.TCPConnector(limit=self._settings.api_concurrency, ssl=_tls(self._configuration))
            timeout = aiohttp.ClientTimeout(sock_connect=REQUEST_TIMEOUT[0], sock_read=REQUEST_TIMEOUT[1])
            self._http = aiohttp.ClientSession(connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",))
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "rollwire"}
        for auth in self._configuration.auth_settings().values():  # runs the client's token refresh hooks
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        return headers

    async def _send(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, bytes, float | None]:
        verb, path, names = ROUTES[method]
        values = dict(zip(names, args, strict=False))
        body = values.pop("body", kwargs.pop("body", None))
        params = {QUERY[key]: str(value) for key, value in kwargs.items() if key in QUERY}
        unknown = set(kwargs) - set(QUERY)
        if unknown:
            raise TypeError(f"{method}: unsupported arguments {sorted(unknown)}")
        headers = self._headers()
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json" if verb == "PATCH" else "application/json"
        url = self._base + path.format(**values)
        proxy = self._configuration.proxy or None
        async with self._client().request(verb, url, params=params, data=content, headers=headers, proxy=proxy) as response:
            return response.status, await response.read(), _retry_after(response.headers.get("Retry-After"))

    async def call(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        body = await self.raw(method, *args, **kwargs)
        return dict(json.loads(body)) if body else {}

    async def raw(self, method: str, *args: Any, **kwargs: Any) -> bytes:
        """``<method>`` of the official client (CoreV1Api, BatchV1Api)'s request; retry transient failures with capped exponential back-off + jitter."""
        delay = self._settings.api_backoff_s
        for attempt in range(1, self._settings.api_retries + 1):
            try:
                status, body, retry_after = await self._send(method, args, dict(kwargs))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                status, body, retry_after = 0, (str(exc) or exc.__class__.__name__).encode(), None
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
