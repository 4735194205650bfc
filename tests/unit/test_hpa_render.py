from __future__ import annotations

import re

import pytest

from llmbackend.api.engine_metrics import (
    ENGINE_COMPUTE_METRIC,
    ENGINE_QUEUE_METRIC,
    HPA_METRIC_NAME,
    RECORDING_RULE_NAME,
)
from llmbackend.api.v1alpha1 import AutoscalingSpec
from llmbackend.render.hpa import (
    quantity,
    recording_expr,
    render_adapter_rule,
    render_hpa,
    render_prometheus_rule,
)


@pytest.mark.parametrize("v,q", [(1.0, "1"), (1.5, "1500m"), (3.5, "3500m"), (0.25, "250m"), (2, "2"), (0.0001, "1m"), (10.0, "10")])
def test_quantity(v, q):
    assert quantity(v) == q
    assert re.match(r"^[0-9]+(m)?$", q)


def test_hpa():
    s = AutoscalingSpec(enabled=True, mode="hpa", min_replicas=0, max_replicas=6, target_ratio=1.5,
                        scale_down_stabilization_seconds=300, max_scale_up_step=2)
    ref = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "name": "llama"}
    h = render_hpa("llama", "ns", ref, s, {"app": "x"})
    assert h["apiVersion"] == "autoscaling/v2" and h["metadata"]["namespace"] == "ns"
    sp = h["spec"]
    assert sp["scaleTargetRef"] == ref and sp["minReplicas"] == 1 and sp["maxReplicas"] == 6
    m = sp["metrics"][0]
    assert m["type"] == "Pods" and m["pods"]["metric"]["name"] == HPA_METRIC_NAME
    assert m["pods"]["target"] == {"type": "AverageValue", "averageValue": "1500m"}
    assert sp["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert sp["behavior"]["scaleUp"]["policies"][0] == {"type": "Pods", "value": 2, "periodSeconds": 15}
    assert "tolerance" not in sp["behavior"]["scaleUp"]
    h = render_hpa("llama", "ns", ref, s, configurable_tolerance=True)
    assert h["spec"]["behavior"]["scaleUp"]["tolerance"] == "100m"


def test_prometheus_rule_and_adapter():
    r = render_prometheus_rule("llama", "ns", "ensemble", window_seconds=60)
    assert r["apiVersion"] == "monitoring.coreos.com/v1" and r["kind"] == "PrometheusRule"
    rule = r["spec"]["groups"][0]["rules"][0]
    assert rule["record"] == RECORDING_RULE_NAME
    # the engine's counters (Triton's queue reads ~0 for decoupled LLM models)
    assert f'rate({ENGINE_QUEUE_METRIC}{{model="ensemble"}}[1m])' in rule["expr"]
    assert f'rate({ENGINE_COMPUTE_METRIC}{{model="ensemble"}}[1m])' in rule["expr"]
    assert "nv_inference" not in rule["expr"]
    assert "clamp_min(" in rule["expr"] and "by (namespace, pod)" in rule["expr"]
    assert "[90s]" in recording_expr(None, 90)
    a = render_adapter_rule()
    assert a["name"]["as"] == HPA_METRIC_NAME and RECORDING_RULE_NAME in a["seriesQuery"]
    assert a["resources"]["overrides"]["pod"] == {"resource": "pod"}


def test_hpa_rules_command_prints_the_recording_and_adapter_rules(capsys):
    from pathlib import Path

    import yaml

    from llmbackend.cli import main

    sample = Path(__file__).resolve().parents[2] / "manifests/samples/llama-3.1-70b-autoscaled.yaml"
    assert main(["hpa-rules", "-f", str(sample)]) == 0
    rule, adapter = list(yaml.safe_load_all(capsys.readouterr().out))
    assert rule["kind"] == "PrometheusRule" and rule["metadata"]["name"] == "llama-3-1-70b"
    assert adapter["rules"][0]["name"]["as"] == "llmbackend_engine_queue_compute_ratio"
    assert main(["hpa-rules", "-f", "/nonexistent.yaml"]) == 1
