"""The proxy's Prometheus metrics: requests by dialect and status, total / engine / added latency, recorded model
calls, prompt and sampled tokens, splice reuse and segment breaks by reason, budget refusals.

Everything per call is counted from the rows the recorder has just committed (a listener), so the numbers match
the store by construction and the generation path only carries one call (``add_upstream_time``, in ``live``).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from rollwire.metrics import HttpMetrics
from rollwire.store.codec import ID_BYTES
from rollwire.store.prompts import prompt_length

BREAK_KINDS: tuple[tuple[str, str], ...] = (
    ("tools changed", "tools_changed"),
    ("history rewritten", "history_rewritten"),
    ("history shortened", "history_shortened"),
    ("assistant message", "answer_differs"),
    ("branches from", "branch"),
    ("re-rendered prompt diverges", "render_diverged"),
    ("choice ", "extra_choice"),
)
"""Prefix of a recorded ``segment_break`` (``proxy.session``'s readable reasons) -> its bounded label value."""
ROUTES: tuple[tuple[str, str], ...] = (
    ("/chat/completions", "chat"),
    ("/responses", "responses"),
    ("/messages", "messages"),
    ("/messages/count_tokens", "count_tokens"),
    ("/models", "models"),
)
REUSE_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def break_kind(reason: str) -> str:
    """The label of a segment break: its reason's kind, never its text (which names call ids)."""
    for prefix, kind in BREAK_KINDS:
        if reason.startswith(prefix):
            return kind
    return "other"


def classify(path: str) -> str | None:
    """A request path's bounded label: the dialect it speaks, ``admin``, ``ui``, ``other``; None for probes."""
    if path in ("/metrics", "/health"):
        return None
    for suffix, route in ROUTES:
        if path.endswith(suffix):
            return route
    if path.startswith("/admin/"):
        return "admin"
    return "ui" if path.startswith("/ui") else "other"


class ProxyMetrics:
    """The proxy's registry and metric families; ``recorded`` and ``refused`` are the store-side hooks."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.http = HttpMetrics(registry, "rollwire_proxy", route="dialect", upstream=True)
        self.calls = Counter(
            "rollwire_proxy_model_calls", "Model calls recorded in the store, by dialect and status",
            ["dialect", "status"], registry=registry,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "rollwire_proxy_prompt_tokens", "Prompt tokens sent to the engine", ["dialect"], registry=registry
        )
        self.reused_tokens = Counter(
            "rollwire_proxy_reused_prompt_tokens", "Prompt tokens reused verbatim from earlier calls (spliced)",
            ["dialect"], registry=registry,
        )  # fmt: skip
        self.sampled_tokens = Counter(
            "rollwire_proxy_sampled_tokens", "Tokens sampled by the engine (every choice)", ["dialect"], registry=registry
        )
        self.reuse_ratio = Histogram(
            "rollwire_proxy_splice_reuse_ratio", "Share of each call's prompt reused from earlier calls",
            ["dialect"], buckets=REUSE_BUCKETS, registry=registry,
        )  # fmt: skip
        self.breaks = Counter(
            "rollwire_proxy_segment_breaks", "Calls that started a new trajectory segment, by reason", ["reason"],
            registry=registry,
        )  # fmt: skip
        self._by_call: dict[tuple[str, str], tuple[Any, Any, Any, Any, Any]] = {}
        self.refusals = Counter(
            "rollwire_proxy_budget_refusals", "Model calls refused by a rollout budget, by budget", ["budget"],
            registry=registry,
        )  # fmt: skip

    def _series(self, dialect: str, status: str) -> tuple[Any, Any, Any, Any, Any]:
        """The series one call touches, resolved once per (dialect, status): ``labels()`` takes a lock and
        checks its arguments each time, several times the cost of the increment itself."""
        found = self._by_call.get((dialect, status))
        if found is None:
            found = self._by_call[(dialect, status)] = (
                self.calls.labels(dialect, status),
                self.prompt_tokens.labels(dialect),
                self.reused_tokens.labels(dialect),
                self.sampled_tokens.labels(dialect),
                self.reuse_ratio.labels(dialect),
            )
        return found

    def recorded(self, _rollout_id: str, rows: list[dict[str, Any]]) -> None:
        """Count one just-committed call (its rows: one per choice; the prompt is shared by all)."""
        first = rows[0]
        calls, prompted, reused_tokens, sampled, ratio = self._series(first["dialect"], first["status"])
        calls.inc()
        reused = int(first.get("reused_prefix_len") or 0)
        prompt = prompt_length(first["prompt_ids"], first.get("prompt_base"), reused)
        prompted.inc(prompt)
        reused_tokens.inc(reused)
        sampled.inc(sum(len(r["completion_ids"] or b"") for r in rows) // ID_BYTES)
        if prompt:
            ratio.observe(min(reused / prompt, 1.0))
        for row in rows:
            if row.get("segment_break"):
                self.breaks.labels(break_kind(row["segment_break"])).inc()

    def refused(self, budget: str) -> None:
        self.refusals.labels(budget).inc()


__all__ = ["ProxyMetrics", "break_kind", "classify"]
