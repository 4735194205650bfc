"""``mode: keda``: a KEDA ScaledObject on the engine queue-to-compute ratio (Prometheus trigger).

KEDA owns the replicas (through the HPA it creates, ``keda-hpa-<name>``), so the operator leaves
``spec.replicas`` of the workload alone, as in mode hpa. The trigger reads the same recording rule as mode
hpa (``render_prometheus_rule``) through the same per-pod selection as the operator's Prometheus source
(``hpa.default_query``), summed: KEDA's ``AverageValue`` metric divides by the replica count, so
``sum(per-pod ratio) / threshold`` replicas is the HPA's "average ratio per pod / target".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..api.v1alpha1 import AutoscalingSpec, schedule_cron
from .hpa import default_query, quantity, render_hpa

SCALED_OBJECT_API = ("keda.sh/v1alpha1", "scaledobjects")  # (apiVersion, plural), as in names.MANAGED_KINDS


def pod_name_regex(workload_kind: str, name: str) -> str:
    """Anchored (PromQL regexes are) pattern of the serving pods' names, distinct from other backends' pods.

    Deployment pods are ``<name>-<template hash>-<5 chars>``; LeaderWorkerSet leaders (the pods that serve)
    ``<name>-<group index>``.
    """
    if workload_kind == "LeaderWorkerSet":
        return re.escape(name) + "-[0-9]+"
    return re.escape(name) + "-[a-z0-9]+-[a-z0-9]{5}"


def trigger_query(namespace: str, workload_kind: str, name: str) -> str:
    return f"sum({default_query(namespace, pod_name_regex(workload_kind, name))})"


def render_scaled_object(
    name: str, namespace: str, target_ref: Mapping[str, Any], spec: AutoscalingSpec, labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """keda.sh/v1alpha1 ScaledObject; `target_ref` is the workload (``apiVersion``, ``kind``, ``name``)."""
    if spec.prometheus is None:
        raise ValueError("mode keda needs autoscaling.prometheus.url")
    # The same scale-up/down behaviour as mode hpa, for the HPA KEDA creates.
    behavior = render_hpa(name, namespace, target_ref, spec)["spec"]["behavior"]
    return {
        "apiVersion": SCALED_OBJECT_API[0],
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "scaleTargetRef": {k: target_ref[k] for k in ("apiVersion", "kind", "name") if k in target_ref},
            "pollingInterval": spec.sync_period_seconds,
            "cooldownPeriod": spec.scale_down_window,
            "minReplicaCount": spec.min_replicas,  # KEDA scales to zero itself (no HPA feature gate)
            "maxReplicaCount": spec.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": [{
                "type": "prometheus",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": spec.prometheus.url,
                    "query": trigger_query(namespace, target_ref["kind"], target_ref["name"]),
                    "threshold": quantity_str(spec.target_ratio),
                    "ignoreNullValues": "true",  # no series yet (pods loading): 0, not an error
                },
            }, *schedule_triggers(spec)],
        },
    }


def schedule_triggers(spec: AutoscalingSpec) -> list[dict[str, Any]]:
    """spec.autoscaling.schedule[] as KEDA's own cron triggers (start, end, timezone, desiredReplicas; the HPA KEDA
    creates takes the largest of its triggers, so each is a floor). Entries with a floor of 0 are left out: KEDA
    refuses desiredReplicas 0. KEDA decides from the next start and end (pkg/scalers/cron_scaler.go), the operator's
    loop from the last ones: the same for a start followed by its end (docs/autoscaling.md)."""
    return [{"type": "cron", "metadata": {"timezone": entry.time_zone, "start": schedule_cron(entry.start),
                                          "end": schedule_cron(entry.end), "desiredReplicas": str(entry.floor)}}
            for entry in spec.schedule or [] if entry.floor > 0]


def quantity_str(value: float) -> str:
    """KEDA's trigger metadata takes plain decimal strings ("1.5"), not Kubernetes quantities."""
    milli = quantity(value)
    return str(int(milli[:-1]) / 1000) if milli.endswith("m") else milli
