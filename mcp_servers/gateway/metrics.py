"""The gateway's Prometheus metrics: MCP requests by status code, tool calls by upstream server and outcome (counted
from the ToolEvent rows just written, so they match the store), tool latency, and budget refusals."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from rollwire.mcp_servers.gateway.recorder import ToolCallRecord
from rollwire.metrics import LATENCY_BUCKETS, HttpMetrics


def classify(path: str) -> str | None:
    """``mcp`` for a rollout's MCP endpoint, ``other`` for the rest; probes are not measured."""
    if path in ("/metrics", "/health"):
        return None
    return "mcp" if path.startswith("/r/") and path.endswith("/mcp") else "other"


class GatewayMetrics:
    """The gateway's registry; ``recorded`` and ``refused`` are its hooks (tool recorder, budgets)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.http = HttpMetrics(self.registry, "rollwire_gateway")
        self.tool_calls = Counter(
            "rollwire_gateway_tool_calls", "Tool calls forwarded and recorded, by upstream server and status (ok, error)",
            ["server", "status"], registry=self.registry,
        )  # fmt: skip
        self.tool_duration = Histogram(
            "rollwire_gateway_tool_call_duration_seconds", "Time from a tool call's arrival to its recorded result",
            ["server"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.refusals = Counter(
            "rollwire_gateway_budget_refusals", "Tool calls refused (budget spent, tool not allowed or unknown)",
            ["budget"], registry=self.registry,
        )  # fmt: skip

    def recorded(self, record: ToolCallRecord) -> None:
        """``server`` is one of the gateway's configured upstreams (a bounded set), never a client's word."""
        self.tool_calls.labels(record.server, "error" if record.is_error else "ok").inc()
        self.tool_duration.labels(record.server).observe((record.ended_ns - record.started_ns) / 1e9)

    def refused(self, budget: str) -> None:
        self.refusals.labels(budget).inc()


__all__ = ["GatewayMetrics", "classify"]
