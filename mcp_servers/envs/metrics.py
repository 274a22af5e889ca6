"""The env servers' Prometheus metrics: HTTP requests per server and status code, and tool calls per server and
outcome with their latency, observed by an MCP SDK server middleware (the SDK's own hook around every message)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from prometheus_client import CollectorRegistry, Counter, Histogram

from rollwire.metrics import LATENCY_BUCKETS, HttpMetrics


class EnvMetrics:
    """One registry for every env server one app hosts (``server`` is one of their names)."""

    def __init__(self, servers: Iterable[str]) -> None:
        self.servers = frozenset(servers)
        self.registry = CollectorRegistry(auto_describe=True)
        self.http = HttpMetrics(self.registry, "rollwire_env", route="server")
        self.tool_calls = Counter(
            "rollwire_env_tool_calls", "Tool calls answered, by env server and status (ok, error)", ["server", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.tool_duration = Histogram(
            "rollwire_env_tool_call_duration_seconds", "Time an env server took to answer one tool call", ["server"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip

    def classify(self, path: str) -> str | None:
        """``/<server>/mcp`` -> the server's name (``other`` for unknown paths); probes are not measured."""
        if path in ("/metrics", "/health"):
            return None
        name = path.strip("/").split("/", 1)[0]
        return name if name in self.servers else "other"

    def tool_middleware(self, server: str) -> ToolCallObserver:
        return ToolCallObserver(self, server)


class ToolCallObserver:
    """MCP server middleware: times ``tools/call`` and counts it as ``error`` when it raised or answered isError."""

    def __init__(self, metrics: EnvMetrics, server: str) -> None:
        self.calls_ok = metrics.tool_calls.labels(server, "ok")
        self.calls_error = metrics.tool_calls.labels(server, "error")
        self.duration = metrics.tool_duration.labels(server)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        started = time.perf_counter()
        failed = True
        try:
            result = await call_next(ctx)
            failed = _is_error(result)
            return result
        finally:
            self.duration.observe(time.perf_counter() - started)
            (self.calls_error if failed else self.calls_ok).inc()


def _is_error(result: HandlerResult) -> bool:
    if isinstance(result, dict):
        return bool(result.get("isError") or result.get("is_error"))
    return bool(getattr(result, "is_error", False))


__all__ = ["EnvMetrics", "ToolCallObserver"]
