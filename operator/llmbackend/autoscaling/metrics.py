"""The operator's own Prometheus metrics (dedicated registry, not the global one)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ..api import engine_metrics

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
    "llmbackend_backend_desired_replicas", "Replicas the operator wants: the autoscaler's decision, else spec.replicas.",
    ["namespace", "name"], registry=REGISTRY,
)
BACKEND_REPLICAS = Gauge(
    "llmbackend_backend_replicas", "Current replicas of the backend's workload.", ["namespace", "name"], registry=REGISTRY
)
BACKEND_READY = Gauge(
    "llmbackend_backend_ready_replicas", "Ready replicas of the backend's workload (status.readyReplicas).",
    ["namespace", "name"], registry=REGISTRY,
)
# One series per backend and condition type, value 1, labelled with the condition's current status and reason
# (the series of an earlier status or reason is removed): `llmbackend_backend_condition{type="Degraded",
# status="True"} == 1` selects the degraded backends. Written for every backend on every status write.
BACKEND_CONDITION = Gauge(
    "llmbackend_backend_condition", "The backend's status conditions: 1 for the current status and reason of each type.",
    ["namespace", "name", "type", "status", "reason"], registry=REGISTRY,
)
# Which counters the autoscaler's last ratio came from (status.autoscaling.signal: engine, triton or prometheus).
BACKEND_SIGNAL = Gauge(
    "llmbackend_backend_autoscaling_signal", "The signal of the autoscaler's last reading: 1 for the one it used.",
    ["namespace", "name", "signal"], registry=REGISTRY,
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


# (namespace, name) -> the label values of its current condition and signal series, so a change removes the old one.
_LABELLED: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
_LABELLED_LOCK = threading.Lock()


def _set_labelled(gauge: Gauge, namespace: str, name: str, key: str, values: tuple[str, ...]) -> None:
    """Keep exactly one series of `gauge` for (namespace, name, key), with the extra label `values`, at 1."""
    with _LABELLED_LOCK:
        series = _LABELLED.setdefault((namespace, name), {})
        old = series.get(key)
        if old is not None and old != values:
            try:
                gauge.remove(namespace, name, *old)
            except KeyError:
                pass
        series[key] = values
        gauge.labels(namespace, name, *values).set(1)


def set_backend_status(namespace: str, name: str, conditions: Iterable[Mapping[str, Any]],
                       replicas: int | None, ready: int | None, desired: int | None) -> None:
    """The series every backend has, from the status a reconcile pass writes."""
    for c in conditions:
        _set_labelled(BACKEND_CONDITION, namespace, name, "condition:" + str(c["type"]),
                      (str(c["type"]), str(c["status"]), str(c.get("reason") or "")))
    if replicas is not None:
        BACKEND_REPLICAS.labels(namespace=namespace, name=name).set(replicas)
    BACKEND_READY.labels(namespace=namespace, name=name).set(ready or 0)
    if desired is not None:
        BACKEND_DESIRED.labels(namespace=namespace, name=name).set(desired)


def set_backend(namespace: str, name: str, *, ratio: float | None = None, desired: int | None = None,
                replicas: int | None = None, signal: str | None = None) -> None:
    """Update the autoscaler's per-backend gauges; ratio None is exported as NaN (no data)."""
    BACKEND_RATIO.labels(namespace=namespace, name=name).set(float("nan") if ratio is None else ratio)
    if signal:
        _set_labelled(BACKEND_SIGNAL, namespace, name, "signal", (signal,))
    if desired is not None:
        BACKEND_DESIRED.labels(namespace=namespace, name=name).set(desired)
    if replicas is not None:
        BACKEND_REPLICAS.labels(namespace=namespace, name=name).set(replicas)


def scrape_error(namespace: str, name: str, n: int = 1) -> None:
    if n > 0:
        SCRAPE_ERRORS.labels(namespace=namespace, name=name).inc(n)


def forget_backend(namespace: str, name: str) -> None:
    """Drop a deleted backend's series."""
    for m in (BACKEND_RATIO, BACKEND_DESIRED, BACKEND_REPLICAS, BACKEND_READY, SCRAPE_ERRORS):
        try:
            m.remove(namespace, name)
        except KeyError:
            pass
    with _LABELLED_LOCK:
        series = _LABELLED.pop((namespace, name), {})
    for key, values in series.items():
        gauge = BACKEND_SIGNAL if key == "signal" else BACKEND_CONDITION
        try:
            gauge.remove(namespace, name, *values)
        except KeyError:
            pass


def operator_series() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name, type, labels, help) of every metric in REGISTRY, as the operator's /metrics names them."""
    out = []
    for collector in list(REGISTRY._collector_to_names):  # noqa: SLF001 - no public iterator over collectors
        labels = tuple(getattr(collector, "_labelnames", ()))
        for family in collector.describe():  # type: ignore[attr-defined]  # every metric of ours has one
            name = family.name + ("_total" if family.type == "counter" else "")
            out.append((name, family.type, labels, family.documentation))
    return sorted(out)


def reference_markdown() -> str:
    """The metrics reference of docs/monitoring.md: the operator's registry and the serving pods' series."""
    lines = ["| series | type | labels | meaning |", "|---|---|---|---|"]
    for name, kind, labels, text in operator_series():
        lines.append(f"| `{name}` | {kind} | {', '.join(labels)} | {text} |")
    lines += ["", "Serving pods (Triton's metrics port, through the backend's PodMonitor, which adds `namespace`, "
              "`name` = the LLMBackend, `pod`):", "", "| series | type | labels | meaning |", "|---|---|---|---|"]
    for name, (kind, labels, text) in engine_metrics.SERVED_SERIES.items():
        lines.append(f"| `{name}` | {kind} | {', '.join(labels)} | {text} |")
    return "\n".join(lines) + "\n"
