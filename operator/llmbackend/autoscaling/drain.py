"""Drain-safe scale-down, the autoscaler's part (pure): which replicas go first.

The ReplicaSet controller deletes pods with the lowest ``controller.kubernetes.io/pod-deletion-cost`` first.
Before a scale-down the operator sets each Ready pod's cost to its requests in flight (batch + engine queue, from
the engine gauges it scrapes), so the replicas with the least work go. (Deployments only: a LeaderWorkerSet
removes its highest group index, a StatefulSet its highest ordinal; neither reads the cost.) The pods then drain
as :mod:`llmbackend.render.drain` renders it (preStop wait, Triton exit timeout, termination grace).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


def deletion_costs(in_flight: Mapping[str, float], current: Mapping[str, str | None]) -> dict[str, str]:
    """Pod -> new pod-deletion-cost (the requests in its engine, rounded), only where it differs from ``current``.

    Pods without a reading (warming, scrape failed) are left alone: the ReplicaSet controller already removes
    not-ready pods first."""
    out: dict[str, str] = {}
    for pod, n in in_flight.items():
        if n is None or math.isnan(n):
            continue
        cost = str(max(0, min(int(round(n)), 2**31 - 1)))
        if current.get(pod) != cost:
            out[pod] = cost
    return out
