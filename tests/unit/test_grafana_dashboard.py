"""manifests/grafana/dashboard.json: a well-formed Grafana dashboard whose llmbackend_* metrics are
the ones the operator exports (llmbackend.autoscaling.metrics.REGISTRY) and whose Triton metrics
are the ones the autoscaler reads (llmbackend.autoscaling.ratio)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "manifests" / "grafana" / "dashboard.json"

_LLMB = re.compile(r"\bllmbackend_[a-z0-9_]*[a-z0-9]")
_TRITON = re.compile(r"\bnv_[a-z0-9_]*[a-z0-9]")
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
        "llmbackend_backend_queue_compute_ratio",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "llmbackend_backend_desired_replicas",
        "llmbackend_backend_replicas",
        "rate(llmbackend_reconcile_errors_total[5m])",
        "histogram_quantile(0.99, sum by (le) (rate(llmbackend_reconcile_duration_seconds_bucket[5m])))",
        "nv_inference_pending_request_count",
        "nv_trt_llm_kv_cache_block_metrics",
    ):
        assert needle in exprs, needle


def test_llmbackend_metrics_are_exported_by_the_operator(dashboard):
    exported = _exported()
    used = {m for e in _exprs(dashboard) for m in _LLMB.findall(e)}
    # template variable queries count too
    used |= {m for v in dashboard["templating"]["list"] for m in _LLMB.findall(json.dumps(v.get("query", "")))}
    assert used, "the dashboard uses no operator metric"
    unknown = used - set(exported)
    assert not unknown, f"not exported by llmbackend.autoscaling.metrics: {sorted(unknown)}; exported: {sorted(exported)}"


def test_selector_labels_exist_on_operator_metrics(dashboard):
    exported = _exported()
    for expr in _exprs(dashboard):
        for name, body in _SELECTOR.findall(expr):
            if name in exported and exported[name]:
                labels = set(_LABEL.findall(body))
                assert labels <= exported[name], f"{name} has labels {sorted(exported[name])}, dashboard uses {sorted(labels)}"


def test_triton_metrics_are_the_ones_the_autoscaler_reads(dashboard):
    ratio = pytest.importorskip("llmbackend.autoscaling.ratio")
    known = {getattr(ratio, n) for n in dir(ratio) if n.endswith("_METRIC") and isinstance(getattr(ratio, n), str)}
    used = {m for e in _exprs(dashboard) for m in _TRITON.findall(e)}
    assert used and used <= known, f"unknown Triton metrics: {sorted(used - known)}"
