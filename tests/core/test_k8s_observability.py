"""The Kubernetes manifests annotate every service that serves /metrics for scraping, and the Grafana dashboard that
k8s/ ships queries only metrics that exist: the ones our services register, and the engine's vLLM gauges as the
bundled engine serves them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rollwire.app.serving import ServerThread
from rollwire.metrics import metric_names
from rollwire.settings import EngineSettings

BASE = Path(__file__).resolve().parents[2] / "k8s" / "base"
DASHBOARD = BASE / "grafana" / "rollwire-dashboard.json"
SCRAPED = {"proxy": 8090, "gateway": 8001, "mcp-envs": 8002, "vllm": 8100}
"""Each service's /metrics port (the proxy's: its admin listener, which rollouts cannot reach)."""
PROMQL_WORDS = {
    "sum", "avg", "min", "max", "count", "rate", "irate", "increase", "histogram_quantile", "by", "without",
    "clamp_min", "clamp_max", "topk", "bottomk", "on", "ignoring", "and", "or", "unless",
}  # fmt: skip


def _documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(BASE.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_services_that_serve_metrics_are_annotated_for_scraping() -> None:
    by_kind = {(doc["kind"], doc["metadata"]["name"]): doc for doc in _documents() if "metadata" in doc}
    for name, port in SCRAPED.items():
        for kind, scrape, ports in (
            ("Deployment", by_kind[("Deployment", name)]["spec"]["template"]["metadata"].get("annotations", {}),
             [p["containerPort"] for c in by_kind[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
              for p in c.get("ports", [])]),
            ("Service", by_kind[("Service", name)]["metadata"].get("annotations", {}),
             [p["port"] for p in by_kind[("Service", name)]["spec"]["ports"]]),
        ):  # fmt: skip
            assert scrape.get("prometheus.io/scrape") == "true", (kind, name)
            assert scrape.get("prometheus.io/path") == "/metrics", (kind, name)
            assert int(scrape["prometheus.io/port"]) == port and port in ports, (kind, name)
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    (generated,) = kustomization["configMapGenerator"]
    assert [BASE / f for f in generated["files"]] == [DASHBOARD] and DASHBOARD.is_file()


def _queries(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [q for value in node.values() for q in _queries(value)]
    if isinstance(node, list):
        return [q for item in node for q in _queries(item)]
    return []


def _names_in(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left once label matchers, grouping clauses,
    ranges, strings and numbers are removed, less PromQL's own functions and keywords."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare))
    return words - PROMQL_WORDS


def _engine_metric_names(tiny_model_dir: Path, tmp_path: Path) -> set[str]:
    from rollwire.engine import create_app

    with ServerThread(create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path)) as engine:
        text = httpx.get(f"{engine.url}/metrics", timeout=30).text
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_every_dashboard_query_names_a_metric_that_exists(tiny_model_dir: Path, tmp_path: Path) -> None:
    from rollwire.mcp_servers.envs.app import SERVERS
    from rollwire.mcp_servers.envs.metrics import EnvMetrics
    from rollwire.mcp_servers.gateway.metrics import GatewayMetrics
    from rollwire.orchestrator.metrics import OrchestratorMetrics
    from rollwire.proxy.metrics import ProxyMetrics

    known: set[str] = set()
    for metrics in (ProxyMetrics(), GatewayMetrics(), EnvMetrics(SERVERS), OrchestratorMetrics()):
        known |= metric_names(metrics.registry)
    known |= _engine_metric_names(tiny_model_dir, tmp_path)
    queries = _queries(json.loads(DASHBOARD.read_text()))
    assert len(queries) >= 15
    used: set[str] = set()
    for expr in queries:
        names = _names_in(expr)
        assert names, f"query names no metric: {expr}"
        assert names <= known, f"unknown metric(s) {sorted(names - known)} in: {expr}"
        used |= names
    # the dashboard covers every service: proxy, gateway, env servers, orchestrator, engine
    for prefix in ("rollwire_proxy_", "rollwire_gateway_", "rollwire_env_", "rollwire_orchestrator_", "vllm:"):
        assert any(name.startswith(prefix) for name in used), prefix
    assert _names_in("sum by (le) (rate(rollwire_nope_total[5m]))") == {"rollwire_nope_total"}  # the check can fail
