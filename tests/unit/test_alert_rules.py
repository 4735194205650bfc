"""manifests/monitoring/alerts.yaml evaluated by Prometheus' own rule engine (`promtool test rules`, Debian's
prometheus package: `make prometheus`): each alert fires on the series that mean it, after its `for`, and stays
silent on a healthy backend. Annotations are left out of the comparison (templated prose); labels are compared."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ALERTS = Path(__file__).resolve().parents[2] / "manifests" / "monitoring" / "alerts.yaml"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make prometheus)")


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    body = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{body}}}", "values": values}


def _condition(backend: str, type_: str, status: str, reason: str, values: str = "1x30") -> dict[str, str]:
    return _series("llmbackend_backend_condition", values, namespace="ns", name=backend, type=type_, status=status,
                   reason=reason)


def _engine(backend: str, gauge: str, kind_label: str, kind: str, values: str) -> dict[str, str]:
    return _series(gauge, values, namespace="ns", name=backend, pod=f"{backend}-0", model="llama", version="1",
                   **{kind_label: kind})


def _requests(backend: str, waiting: str, active: str, slots: str) -> list[dict[str, str]]:
    return [_engine(backend, "nv_trt_llm_request_metrics", "request_type", t, v)
            for t, v in (("waiting", waiting), ("active", active), ("max", slots))]


def _kv(backend: str, fraction: str) -> dict[str, str]:
    return _engine(backend, "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "fraction", fraction)


INPUT = [
    _condition("broken", "Degraded", "True", "InsufficientGPUs"),
    _condition("broken", "Available", "False", "ReplicasNotReady"),
    _condition("healthy", "Degraded", "False", "AsExpected"),
    _condition("healthy", "Available", "True", "ReplicasReady"),
    # Degraded for only 3 minutes, then fixed (the series goes stale): below the 5-minute `for`.
    _condition("flapping", "Degraded", "True", "ImagePullFailed", "1x3 stale"),
    *_requests("busy", "3x30", "64x30", "64x30"),   # every slot busy and requests waiting
    _kv("busy", "0.5x30"),
    *_requests("kvfull", "0x30", "10x30", "64x30"),
    _kv("kvfull", "0.97x30"),                       # KV cache nearly full
    *_requests("healthy", "0x30", "10x30", "64x30"),
    _kv("healthy", "0.5x30"),
    _series("llmbackend_reconcile_errors_total", "0+1x30", job="operator"),
]


def _labels(backend: str, severity: str, **extra: str) -> dict[str, str]:
    return {"namespace": "ns", "name": backend, "severity": severity, **extra}


CASES = [
    (4, "LLMBackendDegraded", []),
    (7, "LLMBackendDegraded", [_labels("broken", "warning", type="Degraded", status="True", reason="InsufficientGPUs")]),
    (10, "LLMBackendNotAvailable", []),
    (16, "LLMBackendNotAvailable",
     [_labels("broken", "critical", type="Available", status="False", reason="ReplicasNotReady")]),
    (5, "LLMBackendSaturated", []),
    (12, "LLMBackendSaturated", [_labels("busy", "warning"), _labels("kvfull", "warning")]),
    (20, "LLMBackendOperatorReconcileErrors", [{"job": "operator", "severity": "warning"}]),
]


def test_alerts_fire_on_what_they_mean_and_only_then(tmp_path: Path) -> None:
    (rule,) = [d for d in yaml.safe_load_all(ALERTS.read_text()) if d]
    groups = rule["spec"]["groups"]
    for group in groups:
        for r in group["rules"]:
            r.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": INPUT,
            "alert_rule_test": [{"eval_time": f"{minute}m", "alertname": name,
                                 "exp_alerts": [{"exp_labels": labels} for labels in expected]}
                                for minute, name, expected in CASES],
        }],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    assert {r["alert"] for g in groups for r in g["rules"]} == {name for _, name, _ in CASES}, "every alert is tested"
    proc = subprocess.run([str(PROMTOOL), "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    (rule,) = [d for d in yaml.safe_load_all(ALERTS.read_text()) if d]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    proc = subprocess.run([str(PROMTOOL), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
