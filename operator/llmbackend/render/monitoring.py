"""A PodMonitor per backend (Prometheus Operator, monitoring.coreos.com/v1): Prometheus scrapes the serving pods.

Rendered only when the cluster serves PodMonitors (an optional kind, like LeaderWorkerSet and PrometheusRule).
It selects the serving pods (single-node replicas, multi-node leaders; workers expose no metrics port) and scrapes
Triton's metrics port, where the serving models export the engine series of api/engine_metrics.py. The OpenAI
frontend has no metrics of its own: its /metrics relays Triton's for the Inference Extension's endpoint picker, so
it is not scraped a second time. Every sample gets the backend's name as label `name`, the label the operator's own
per-backend series carry (with `namespace`), so engine and operator series join on (namespace, name).
Pure: nothing here talks to the API server.
"""

from __future__ import annotations

from typing import Any

POD_MONITOR_API = ("monitoring.coreos.com/v1", "podmonitors")  # (apiVersion, plural); MANAGED_KINDS reads it here
METRICS_PORT_NAME = "metrics"  # the serving container's name for Triton's metrics port (workloads.py names it so)
SCRAPE_INTERVAL = "15s"  # the autoscaling window's resolution; Triton refreshes its engine gauges every second
BACKEND_NAME_LABEL = "name"


def _meta_label(pod_label: str) -> str:
    """Prometheus' Kubernetes service discovery name for a pod label (every non-alphanumeric character -> _)."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in pod_label)


def render_pod_monitor(name: str, namespace: str, selector: dict[str, str], backend_label: str,
                       labels: dict[str, str], owner_reference: dict[str, Any]) -> dict[str, Any]:
    """`selector`: the serving pods' labels (leaders only for multi-node); `backend_label`: the pod label naming
    the backend, copied to the samples as `name`."""
    return {
        "apiVersion": POD_MONITOR_API[0],
        "kind": "PodMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner_reference]},
        "spec": {
            "selector": {"matchLabels": selector},
            "namespaceSelector": {"matchNames": [namespace]},
            "podMetricsEndpoints": [{
                "port": METRICS_PORT_NAME,
                "path": "/metrics",
                "scheme": "http",
                "interval": SCRAPE_INTERVAL,
                "relabelings": [{
                    "action": "replace",
                    "sourceLabels": [_meta_label(backend_label)],
                    "targetLabel": BACKEND_NAME_LABEL,
                }],
            }],
        },
    }

