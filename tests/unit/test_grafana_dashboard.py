"""manifests/grafana/dashboard.json and manifests/monitoring/alerts.yaml: every series they name is one the operator
exports (llmbackend.autoscaling.metrics.REGISTRY) or the serving models export (api/engine_metrics.py), with the
labels those series carry; the dashboard's variables come from a series every backend has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "manifests" / "grafana" / "dashboard.json"
ALERTS = ROOT / "manifests" / "monitoring" / "alerts.yaml"

# metric{...} selectors: name and the label names used in the braces
_SELECTOR = re.compile(r"\b((?:llmbackend|nv)_[a-z0-9_]+)\s*\{([^}]*)\}")
_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(dash: dict) -> list[dict]:
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows
    return out


def _exprs(dash: dict) -> list[str]:
    return [t["expr"] for p in _panels(dash) for t in p.get("targets", [])]


def _exported() -> dict[str, set[str]]:
    """Sample names the operator's registry can expose -> label names of that metric."""
    metrics = pytest.importorskip("llmbackend.autoscaling.metrics")
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                "summary": ("", "_count", "_sum"), "gauge": ("",), "info": ("_info",)}
    labels_by_family: dict[str, set[str]] = {}
    for collector in list(metrics.REGISTRY._collector_to_names):  # noqa: SLF001 - no public iterator
        for family in collector.describe() or collector.collect():
            labels_by_family[family.name] = set(getattr(collector, "_labelnames", ()))
    names: dict[str, set[str]] = {}
    for family in metrics.REGISTRY.collect():
        for suffix in suffixes.get(family.type, ("",)):
            extra = {"le"} if suffix == "_bucket" else set()
            names[family.name + suffix] = labels_by_family.get(family.name, set()) | extra
    return names


def test_dashboard_shape(dashboard):
    assert dashboard["title"] and dashboard["uid"]
    assert isinstance(dashboard["schemaVersion"], int)
    panels = _panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    graphs = [p for p in panels if p["type"] != "row"]
    assert len(graphs) >= 6
    for p in graphs:
        assert p["title"], p
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]), p["title"]
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], f"panel {p['title']!r} has no targets"
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip(), p["title"]
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert t["expr"].count("{") == t["expr"].count("}"), t["expr"]


def test_datasource_template_variable(dashboard):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "backend"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    used = {m for e in _exprs(dashboard) for m in re.findall(r"\$(\w+)", e)}
    assert used <= set(variables), f"undefined variables: {used - set(variables)}"


def test_required_panels_present(dashboard):
    exprs = "\n".join(_exprs(dashboard))
    for needle in (
        "llmbackend_backend_condition",
        "llmbackend_backend_ready_replicas",
        "llmbackend_backend_desired_replicas",
        "llmbackend_backend_autoscaling_signal",
        "llmbackend_backend_queue_compute_ratio",
        "rate(llmbackend_engine_queue_duration_us",
        "rate(llmbackend_engine_compute_duration_us",
        "llmbackend_engine_request_duration_seconds_bucket",
        "llmbackend_engine_requests_failed",
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"',
        'nv_trt_llm_request_metrics{request_type="waiting"',
        "rate(llmbackend_reconcile_errors_total[5m])",
        "histogram_quantile(0.99, sum by (le) (rate(llmbackend_reconcile_duration_seconds_bucket[5m])))",
    ):
        assert needle in exprs, needle
    assert "nv_inference_queue_duration_us" not in exprs, "Triton's own queue counters read ~0 on LLM models"


# ---- every series named is exported, by the operator or by the serving models ----

_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
    "unless", "bool", "offset", "rate", "irate", "increase", "histogram_quantile", "clamp_min", "clamp_max",
    "avg_over_time", "max_over_time", "label_values", "abs", "topk", "inf", "nan",
}


def series_names(expr: str) -> set[str]:
    """Metric names a PromQL expression (or a Grafana label_values query) reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                          # strings (label values)
    text = re.sub(r"\{[^}]*\}", "{}", text)                                     # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    text = re.sub(r"\[[^\]]*\]", "", text)                                       # range durations
    text = re.sub(r"label_values\(([^,()]*(?:\{\})?)\s*,\s*\w+\)", r"\1", text)  # label_values(series, label)
    names = set(re.findall(r"(?<![\w.$:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()", text))
    return {n for n in names if n not in _PROMQL_WORDS and not re.fullmatch(r"\d+\w*", n)}


def _served_series() -> dict[str, set[str]]:
    """Series the serving pods export (api/engine_metrics.py SERVED_SERIES) -> their labels, as scraped through the
    backend's PodMonitor (render/monitoring.py adds `name`; the Prometheus Operator adds namespace, pod, ...)."""
    from llmbackend.api.engine_metrics import SERVED_SERIES
    from llmbackend.render import monitoring

    target = {"namespace", "pod", "container", "endpoint", "job", "instance", monitoring.BACKEND_NAME_LABEL}
    out: dict[str, set[str]] = {}
    for name, (kind, labels, _) in SERVED_SERIES.items():
        if kind == "histogram":
            out.update({name + "_sum": target | set(labels), name + "_count": target | set(labels),
                        name + "_bucket": target | set(labels) | {"le"}})
        else:
            out[name] = target | set(labels)
    return out


def _label_values() -> dict[tuple[str, str], set[str]]:
    """Label values the serving models export: (series, label) -> values."""
    from llmbackend.api import engine_metrics as em

    return {(em.REQUEST_GAUGE, "request_type"): set(em.REQUEST_TYPES), (em.KV_GAUGE, "kv_cache_block_type"): set(em.KV_TYPES)}


def _alert_exprs() -> list[str]:
    import yaml

    (rule,) = [d for d in yaml.safe_load_all(ALERTS.read_text()) if d]
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def _all_queries(dashboard: dict) -> list[str]:
    variables = [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    return _exprs(dashboard) + variables + _alert_exprs()


def test_series_names_are_read_from_promql():
    assert series_names('sum by (namespace, name) (rate(a_total{x="y{z}"}[5m])) / clamp_min(b, 1)') == {"a_total", "b"}
    assert series_names('label_values(c{namespace=~"$namespace"}, name)') == {"c"}
    assert series_names("x > 0.95 and on (namespace, name) y >= z") == {"x", "y", "z"}


def test_every_series_is_exported_by_the_operator_or_the_serving_models(dashboard):
    known = {**_exported(), **_served_series()}
    for expr in _all_queries(dashboard):
        unknown = series_names(expr) - set(known)
        assert not unknown, f"{expr!r} reads {sorted(unknown)}, which neither the operator nor the serving models export"


def test_selectors_use_labels_and_values_the_series_carry(dashboard):
    known = {**_exported(), **_served_series()}
    values = _label_values()
    for expr in _all_queries(dashboard):
        for name, body in _SELECTOR.findall(expr):
            labels = set(_LABEL.findall(body))
            assert labels <= known[name], f"{name} carries {sorted(known[name])}; {expr!r} selects on {sorted(labels)}"
            for label, value in re.findall(r'(\w+)\s*=\s*"([^"$]*)"', body):
                if (name, label) in values:
                    assert value in values[(name, label)], f"{name}{{{label}={value!r}}}: not an exported value"


def test_variables_come_from_a_series_every_backend_has(dashboard):
    """The variables' series is written from every backend's status, autoscaled or not (controller/reconcile.py)."""
    from llmbackend.autoscaling import metrics
    from llmbackend.controller.reconcile import export_status_metrics

    variables = {v["name"]: v["query"]["query"] for v in dashboard["templating"]["list"] if v["name"] in ("namespace", "backend")}
    (series,) = {n for q in variables.values() for n in series_names(q)}
    obj = {"metadata": {"namespace": "var-ns", "name": "plain"}, "spec": {}}  # no autoscaling, no scrape
    export_status_metrics(obj, {"conditions": [{"type": "Available", "status": "False", "reason": "ReplicasNotReady"}]})
    try:
        samples = [s for f in metrics.REGISTRY.collect() for s in f.samples if s.name == series]
        assert any(s.labels.get("namespace") == "var-ns" and s.labels.get("name") == "plain" for s in samples)
    finally:
        metrics.forget_backend("var-ns", "plain")


def test_engine_panels_select_the_label_the_pod_monitor_writes(dashboard):
    from llmbackend.render import monitoring

    served = _served_series()
    for expr in _exprs(dashboard):
        for name, body in _SELECTOR.findall(expr):
            if name in served:
                assert f'{monitoring.BACKEND_NAME_LABEL}=~"$backend"' in body, expr
