"""``mode: hpa``: render an autoscaling/v2 HPA on the engine's queue/compute ratio, the
PrometheusRule that records it and the prometheus-adapter rule that serves it.

The ratio is the engine's (see :mod:`llmbackend.autoscaling.ratio`): the serving model's
``llmbackend_engine_queue_duration_us`` / ``llmbackend_engine_compute_duration_us``
counters, not Triton's queue (which reads ~0 for decoupled LLM models).

Names. The recording rule is ``llmbackend:engine_queue_compute:ratio`` (Prometheus'
``level:metric:operations`` convention; NVIDIA's guide names Triton's ``triton:queue_compute:ratio``). prometheus-adapter's
default rules would expose that series unchanged, and a colon is legal in the
custom metrics API path, but colons are unusual in Kubernetes metric names and
some tools (and adapters' ``name.as`` templates) mishandle them. So the adapter
rule rendered here renames it explicitly
(``HPA_METRIC_NAME``, ``llmbackend_engine_queue_compute_ratio``) and the HPA references that name: no dependence on the
adapter's defaults.

Recording rule. Per pod, summed over model versions, for one model::

    sum by (namespace, pod) (rate(llmbackend_engine_queue_duration_us{model="M"}[W]))
      / clamp_min(sum by (namespace, pod) (rate(llmbackend_engine_compute_duration_us{model="M"}[W])), 1)

The guide's unaggregated form yields one series per (pod, model, version); the
adapter's ``sum(...) by (pod)`` would then *add* ratios of the ensemble's
steps. Aggregating per pod first keeps exactly one ratio per pod, which the HPA
averages (``AverageValue``). ``namespace``/``pod`` labels come from the
PodMonitor/ServiceMonitor scrape (kube-prometheus relabelling).

Tolerance. The HPA's tolerance is a controller-manager flag (10 %); per-HPA
``behavior.scale{Up,Down}.tolerance`` needs the ``HPAConfigurableTolerance``
feature gate (alpha in 1.33): rendered only with ``configurable_tolerance=True``.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from ..api.engine_metrics import ENGINE_COMPUTE_METRIC, ENGINE_QUEUE_METRIC, HPA_METRIC_NAME, RECORDING_RULE_NAME
from ..api.v1alpha1 import AutoscalingSpec
from . import promql


def quantity(value: float) -> str:
    """A Kubernetes quantity with milli precision: 1.0 -> "1", 1.5 -> "1500m", 0.25 -> "250m"."""
    if value < 0:
        raise ValueError("quantity must be >= 0")
    milli = int((Decimal(str(value)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if value > 0 and milli == 0:
        milli = 1
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def recording_expr(model: str | None, window_seconds: int = 60) -> str:
    sel = f'{{model="{model}"}}' if model else ""
    w = _duration(window_seconds)
    return (
        f"sum by (namespace, pod) (rate({ENGINE_QUEUE_METRIC}{sel}[{w}]))"
        f" / clamp_min(sum by (namespace, pod) (rate({ENGINE_COMPUTE_METRIC}{sel}[{w}])), 1)"
    )


def render_hpa(
    name: str,
    namespace: str,
    target_ref: Mapping[str, Any],
    spec: AutoscalingSpec,
    labels: Mapping[str, str] | None = None,
    *,
    metric_name: str = HPA_METRIC_NAME,
    configurable_tolerance: bool = False,
) -> dict[str, Any]:
    """autoscaling/v2 HorizontalPodAutoscaler on the Pods metric (AverageValue = target ratio).

    ``target_ref``: ``{"apiVersion", "kind", "name"}`` of the scaled workload (the
    LLMBackend itself via its scale subresource, or the StatefulSet/LWS).
    minReplicas 0 is raised to 1 (HPA needs the HPAScaleToZero gate for 0).
    """
    periods = max(1, spec.sync_period_seconds)

    def behavior(window: int, step: int, tol: bool) -> dict[str, Any]:
        b: dict[str, Any] = {
            "stabilizationWindowSeconds": window,
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": step, "periodSeconds": periods}],
        }
        if tol:
            b["tolerance"] = quantity(spec.tolerance)
        return b

    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "scaleTargetRef": {k: target_ref[k] for k in ("apiVersion", "kind", "name") if k in target_ref},
            "minReplicas": max(1, spec.min_replicas),
            "maxReplicas": spec.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric_name},
                        "target": {"type": "AverageValue", "averageValue": quantity(spec.target_ratio)},
                    },
                }
            ],
            "behavior": {
                "scaleUp": behavior(spec.scale_up_stabilization_seconds, spec.max_scale_up_step, configurable_tolerance),
                "scaleDown": behavior(spec.scale_down_window, spec.max_scale_down_step, configurable_tolerance),
            },
        },
    }


def render_prometheus_rule(
    name: str,
    namespace: str,
    model: str | None,
    labels: Mapping[str, str] | None = None,
    *,
    window_seconds: int = 60,
    interval_seconds: int = 6,
) -> dict[str, Any]:
    """monitoring.coreos.com/v1 PrometheusRule recording ``triton:queue_compute:ratio`` per pod
    (every 6 s like NVIDIA's guide)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"groups": [prometheus_rule_group(name, model, window_seconds=window_seconds, interval_seconds=interval_seconds)]},
    }


def prometheus_rule_group(name: str, model: str | None, *, window_seconds: int = 60, interval_seconds: int = 6) -> dict[str, Any]:
    """The rule group alone (also valid in a plain Prometheus ``rule_files`` YAML under ``groups:``)."""
    return {
        "name": f"{name}.engine-autoscaling",
        "interval": f"{interval_seconds}s",
        "rules": [{"record": RECORDING_RULE_NAME, "expr": recording_expr(model, window_seconds)}],
    }


def default_query(namespace: str, pod_regex: str, metric: str = RECORDING_RULE_NAME) -> str:
    """The recording rule's per-pod series of this backend's pods.

    Deliberately *not* aggregated in PromQL: the operator's Prometheus source (autoscaling/sources.py)
    averages the per-pod values (the HPA's ``AverageValue``: ratio per replica)
    and so also knows how many pods reported (``pods_used``) and the age of each
    sample. A ``sum(...)`` would grow with the replica count and be compared
    against a per-replica target."""
    return f'{metric}{{namespace="{promql.string(namespace)}",pod=~"{promql.string(pod_regex)}"}}'


def render_adapter_rule(metric_name: str = HPA_METRIC_NAME) -> dict[str, Any]:
    """One entry for prometheus-adapter's ``rules:`` list (custom metrics API)."""
    return {
        "seriesQuery": f'{RECORDING_RULE_NAME}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{RECORDING_RULE_NAME}$", "as": metric_name},
        "metricsQuery": "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
    }
