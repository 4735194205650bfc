"""The operator's own Prometheus metrics (dedicated registry, not the global one)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_TOTAL = Counter("llmbackend_reconcile_total", "Reconciliations by result.", ["result"], registry=REGISTRY)
RECONCILE_DURATION = Histogram(
    "llmbackend_reconcile_duration_seconds", "Reconciliation duration.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY,
)
RECONCILE_ERRORS = Counter("llmbackend_reconcile_errors_total", "Reconciliations that raised.", registry=REGISTRY)
BACKEND_RATIO = Gauge(
    "llmbackend_backend_queue_compute_ratio", "Last measured queue/compute ratio per backend (NaN when unavailable).",
    ["namespace", "name"], registry=REGISTRY,
)
BACKEND_DESIRED = Gauge(
    "llmbackend_backend_desired_replicas", "Replicas the autoscaler wants.", ["namespace", "name"], registry=REGISTRY
)
BACKEND_REPLICAS = Gauge(
    "llmbackend_backend_replicas", "Current replicas of the backend's workload.", ["namespace", "name"], registry=REGISTRY
)
SCRAPE_ERRORS = Counter(
    "llmbackend_scrape_errors_total", "Failed scrapes of Triton metrics / Prometheus queries.",
    ["namespace", "name"], registry=REGISTRY,
)

API_REQUESTS = Counter(
    "llmbackend_api_requests_total", "Kubernetes API requests made by the reconciler, by HTTP method and kind.",
    ["method", "kind"], registry=REGISTRY,
)


def start_metrics_server(port: int, addr: str = "127.0.0.1") -> Any:
    """Serve REGISTRY on http://addr:port/metrics (a daemon thread). Returns (server, thread)."""
    return start_http_server(port, addr=addr, registry=REGISTRY)


def observe_reconcile(result: str, seconds: float) -> None:
    RECONCILE_TOTAL.labels(result=result).inc()
    RECONCILE_DURATION.observe(seconds)
    if result == "error":
        RECONCILE_ERRORS.inc()


def set_backend(namespace: str, name: str, *, ratio: float | None = None, desired: int | None = None,
                replicas: int | None = None) -> None:
    """Update the per-backend gauges; ratio None is exported as NaN (no data)."""
    BACKEND_RATIO.labels(namespace=namespace, name=name).set(float("nan") if ratio is None else ratio)
    if desired is not None:
        BACKEND_DESIRED.labels(namespace=namespace, name=name).set(desired)
    if replicas is not None:
        BACKEND_REPLICAS.labels(namespace=namespace, name=name).set(replicas)


def scrape_error(namespace: str, name: str, n: int = 1) -> None:
    if n > 0:
        SCRAPE_ERRORS.labels(namespace=namespace, name=name).inc(n)


def forget_backend(namespace: str, name: str) -> None:
    """Drop a deleted backend's series."""
    for m in (BACKEND_RATIO, BACKEND_DESIRED, BACKEND_REPLICAS, SCRAPE_ERRORS):
        try:
            m.remove(namespace, name)
        except KeyError:
            pass
