"""Cold start (pure): how long this backend's pods take from creation to Ready, learned from its own pods.

A replica added now serves only one cold start later (image pull, weights, engine warm-up: minutes for an
LLM), so the decision scales for the load expected that far ahead. Each pod that has turned Ready gives one
observation: the Ready condition's ``lastTransitionTime`` minus ``metadata.creationTimestamp``. A pod whose
readiness flapped later gives a too-long value; the estimate takes the median of recent observations.
"""

from __future__ import annotations

import datetime as _dt
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from ..render.names import pod_ready

DEFAULT_COLD_START_S = 180.0  # until a pod has been seen turning Ready: 3 min, a mid-size LLM
MAX_OBSERVATIONS = 16
_MAX_PLAUSIBLE_S = 2 * 3600.0


RFC3339 = "%Y-%m-%dT%H:%M:%SZ"  # a time as Kubernetes writes it: UTC, whole seconds


def rfc3339(epoch_s: float) -> str:
    """``epoch_s`` as Kubernetes writes a time (``epoch_seconds`` reads it back)."""
    return _dt.datetime.fromtimestamp(epoch_s, _dt.UTC).strftime(RFC3339)


def epoch_seconds(value: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as Kubernetes writes it (UTC, whole seconds); None otherwise."""
    if not isinstance(value, str):
        return None
    try:
        return _dt.datetime.strptime(value, RFC3339).replace(tzinfo=_dt.UTC).timestamp()
    except ValueError:
        return None


def pod_cold_start(pod: Mapping[str, Any]) -> float | None:
    """Seconds from creation to Ready of one pod (a Kubernetes Pod dict); None when not Ready or unreadable."""
    created = epoch_seconds((pod.get("metadata") or {}).get("creationTimestamp"))
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            ready = epoch_seconds(cond.get("lastTransitionTime"))
            if created is None or ready is None or not 0 <= ready - created <= _MAX_PLAUSIBLE_S:
                return None
            return ready - created
    return None


def observe(known: Mapping[str, float], pods: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """``known`` plus the cold starts of ``pods`` not seen before (by uid or name), the newest MAX_OBSERVATIONS."""
    out = dict(known)
    for pod in pods:
        meta = pod.get("metadata") or {}
        key = meta.get("uid") or meta.get("name")
        if not key or key in out:
            continue
        seconds = pod_cold_start(pod)
        if seconds is not None:
            out[key] = seconds
    if len(out) > MAX_OBSERVATIONS:
        out = dict(list(out.items())[-MAX_OBSERVATIONS:])
    return out


def estimate(observed: Iterable[float], override: int | None = None) -> tuple[float, str]:
    """(seconds, where from): the spec's override, else the median of the observations, else the default."""
    if override is not None:
        return float(override), "spec.autoscaling.coldStartSeconds"
    values = list(observed)
    if values:
        return float(statistics.median(values)), f"learned from {len(values)} pod(s)"
    return DEFAULT_COLD_START_S, "default (no pod seen turning Ready yet)"


def starting_ages(pods: Iterable[Mapping[str, Any]], now: float) -> list[float]:
    """Seconds since creation of each pod not Ready yet and not being deleted (the replicas still starting)."""
    ages = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        created = epoch_seconds(meta.get("creationTimestamp"))
        if created is None or meta.get("deletionTimestamp") or pod_ready(pod):
            continue
        ages.append(max(0.0, now - created))
    return ages


# Churn: pods deleted before they turned Ready (a replica ordered and cancelled: its cold start was GPU time spent
# for nothing). CHURN_WARN of them within CHURN_WINDOW_S raise a Warning.
CHURN_WINDOW_S = 3600.0
CHURN_WARN = 3


def _uid(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    return meta.get("uid") or meta.get("name")


def track_churn(starting: Mapping[str, float], deleted: list[float], pods: Iterable[Mapping[str, Any]],
                now: float) -> tuple[dict[str, float], list[float]]:
    """(pods still starting: uid -> first seen, times of deletions before Ready within CHURN_WINDOW_S).

    A pod seen not Ready that is gone from ``pods`` by the next look never turned Ready (one that turned Ready in
    between and went later counts too: rare, and also a cold start mostly spent for nothing)."""
    pods = list(pods)
    seen = {u for u in map(_uid, pods) if u}
    gone_early = [u for u in starting if u not in seen]
    now_starting = {u: starting.get(u, now) for p in pods if (u := _uid(p)) and not pod_ready(p)}
    times = [t for t in deleted if now - t <= CHURN_WINDOW_S] + [now] * len(gone_early)
    return now_starting, times


def churn_warning(deleted_recently: int) -> str | None:
    """What to say when replicas are cancelled before they serve (None below CHURN_WARN)."""
    if deleted_recently < CHURN_WARN:
        return None
    return (f"{deleted_recently} pod(s) deleted before they turned Ready within the last {CHURN_WINDOW_S / 60:.0f} min: "
            "their cold starts were spent for nothing. See status.autoscaling.message for what the autoscaler saw; "
            "raise spec.autoscaling.scaleDownStabilizationSeconds or set coldStartSeconds if the learned cold start "
            "is too short")
