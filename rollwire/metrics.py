"""Prometheus metrics every service shares: a registry per app, HTTP request counts and latencies by a bounded
route label, time spent waiting on an upstream, and the ``/metrics`` endpoint.

Each app gets its own ``CollectorRegistry`` (never the process-global one): tests and ``rollwire up`` run several
services in one process, and each must report only its own traffic. Label values are always from a small fixed
set (a dialect, a server name, an HTTP status): never a token, a rollout id or anything a client makes up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollwire.errors import InvalidRequest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds: from a millisecond of added latency to a five-minute generation."""
SMALL_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Seconds of overhead a service adds on top of its upstream (well under a second when healthy)."""


@dataclass(slots=True)
class Timing:
    """One request's time spent waiting on its upstream (the engine, for the proxy), added by the code that waits."""

    upstream_s: float = 0.0


_TIMING: ContextVar[Timing | None] = ContextVar("rollwire_request_timing", default=None)


def add_upstream_time(seconds: float) -> None:
    """Charge ``seconds`` of the current request to its upstream (a no-op outside a measured request)."""
    timing = _TIMING.get()
    if timing is not None:
        timing.upstream_s += seconds


class HttpMetrics:
    """``<prefix>_http_requests_total{route, code}``, ``..._request_duration_seconds{route}``,
    ``..._requests_in_flight{route}``; with ``upstream`` also the upstream's share of each request and the rest
    (``..._upstream_duration_seconds``, ``..._added_latency_seconds``)."""

    def __init__(self, registry: CollectorRegistry, prefix: str, route: str = "route", upstream: bool = False) -> None:
        self.requests = Counter(
            f"{prefix}_http_requests", "HTTP requests answered, by route and status code", [route, "code"],
            registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            f"{prefix}_http_request_duration_seconds", "Time from a request's arrival to its last byte sent", [route],
            buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.in_flight = Gauge(f"{prefix}_http_requests_in_flight", "Requests being served now", [route], registry=registry)
        self.upstream: Histogram | None = None
        self.added: Histogram | None = None
        if upstream:
            self.upstream = Histogram(
                f"{prefix}_upstream_duration_seconds", "Time a request waited on its upstream (the engine)", [route],
                buckets=LATENCY_BUCKETS, registry=registry,
            )  # fmt: skip
            self.added = Histogram(
                f"{prefix}_added_latency_seconds", "A request's time not spent waiting on its upstream", [route],
                buckets=SMALL_BUCKETS, registry=registry,
            )  # fmt: skip
        self._children: dict[str, tuple[Any, Any, Any, Any]] = {}
        self._counted: dict[tuple[str, str], Any] = {}

    def children(self, route: str) -> tuple[Any, Any, Any, Any]:
        """The per-route series, resolved once (``labels()`` takes a lock; the route set is small and fixed)."""
        found = self._children.get(route)
        if found is None:
            found = (
                self.in_flight.labels(route),
                self.duration.labels(route),
                self.upstream.labels(route) if self.upstream is not None else None,
                self.added.labels(route) if self.added is not None else None,
            )
            self._children[route] = found
        return found

    def count(self, route: str, code: str) -> None:
        child = self._counted.get((route, code))
        if child is None:
            child = self._counted[(route, code)] = self.requests.labels(route, code)
        child.inc()


class HttpMetricsMiddleware:
    """ASGI middleware: counts and times every HTTP request whose path ``classify`` names (None: not measured)."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics, classify: Callable[[str], str | None]) -> None:
        self.app, self.metrics, self.classify = app, metrics, classify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.classify(scope.get("path", "")) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        in_flight, duration, upstream, added = self.metrics.children(route)
        code = "500"  # what the client sees when the app raises before answering

        async def tracked(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = str(message["status"])
            await send(message)

        timing = Timing()
        token = _TIMING.set(timing)
        in_flight.inc()
        started = time.perf_counter()
        try:
            await self.app(scope, receive, tracked)
        finally:
            elapsed = time.perf_counter() - started
            in_flight.dec()
            _TIMING.reset(token)
            duration.observe(elapsed)
            self.metrics.count(route, code)
            if upstream is not None and timing.upstream_s > 0:
                upstream.observe(timing.upstream_s)
                added.observe(max(elapsed - timing.upstream_s, 0.0))


def metrics_endpoint(registry: CollectorRegistry) -> Callable[[Request], Any]:
    """A Starlette endpoint serving ``registry`` in the Prometheus text format."""

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return metrics


class MetricsServer:
    """``registry`` served at ``url`` from a thread, for a process with no web app of its own (the orchestrator)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(port, host, registry)
        except OSError as exc:
            raise InvalidRequest(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
        self.url = f"http://{host}:{self._server.server_port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def metric_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name ``registry`` can expose (``_total``, ``_bucket``, ``_sum``, ``_count`` included)."""
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
        names.update(family.name + s for s in suffixes.get(family.type, ()))
    return names


__all__ = [
    "LATENCY_BUCKETS",
    "HttpMetrics",
    "HttpMetricsMiddleware",
    "Timing",
    "add_upstream_time",
    "metric_names",
    "metrics_endpoint",
    "MetricsServer",
]
