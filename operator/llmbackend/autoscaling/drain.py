"""Drain-safe scale-down, the autoscaler's part (pure): which replicas go first.

The ReplicaSet controller deletes pods with the lowest ``controller.kubernetes.io/pod-deletion-cost`` first.
Before a scale-down the operator sets each Ready pod's cost to its requests in flight (batch + engine queue, from
the engine gauges it scrapes), so the replicas with the least work go. (Deployments only: a LeaderWorkerSet
removes its highest group index, a StatefulSet its highest ordinal; neither reads the cost.) The pods then drain
as :mod:`llmbackend.render.drain` renders it (preStop wait, Triton exit timeout, termination grace).

The drain bound stays the rendered, spec-derived one; :func:`drain_warning` checks it against the p99 request time
the engines' histogram shows (a bound that followed live metrics would change the pod template and restart every
replica).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..render.drain import MAX_DRAIN_S

# Warn when the observed p99 exceeds this share of the drain bound: a request twice the p99 would then be cut when
# its replica leaves, and LLM request times (set by output length) have long tails.
DRAIN_WARN_FRACTION = 0.5

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


def deletion_costs(in_flight: Mapping[str, float], current: Mapping[str, str | None]) -> dict[str, str]:
    """Pod -> new pod-deletion-cost (the requests in its engine, rounded), only where it differs from ``current``.

    Pods without a reading (warming, scrape failed) are left alone: the ReplicaSet controller already removes
    not-ready pods first."""
    out: dict[str, str] = {}
    for pod, n in in_flight.items():
        if n is None or not math.isfinite(n):  # a pod's own /metrics may say NaN or +Inf
            continue
        cost = str(max(0, min(int(round(n)), 2**31 - 1)))
        if current.get(pod) != cost:
            out[pod] = cost
    return out


def drain_warning(p99_s: float | None, drain_s: int, previous: str | None = None, previous_drain_s: int | None = None,
                  fraction: float = DRAIN_WARN_FRACTION) -> str | None:
    """The warning status.autoscaling.drainWarning shows (None: none): the observed p99 request time ``p99_s`` above
    ``fraction`` of the drain bound ``drain_s``, with what to do.

    A measured p99 decides. Without one (too few requests in the window, no histogram) the ``previous`` warning
    stays while the bound is unchanged (``previous_drain_s``), so a quiet window does not clear and re-raise it."""
    if p99_s is None or not math.isfinite(p99_s):  # a pod's own histogram may say anything
        return previous if previous is not None and previous_drain_s == drain_s else None
    if p99_s <= fraction * drain_s:
        return None
    observed = f"observed p99 request time in the engine {p99_s:.1f}s exceeds {fraction:g} x the drain bound {drain_s}s"
    if drain_s >= MAX_DRAIN_S:
        return (f"{observed}, already at its maximum: requests longer than {drain_s}s are cut when a replica leaves "
                "(scale-down, rollout). Lower spec.engine.maxSeqLen or the clients' max_tokens")
    suggest = min(MAX_DRAIN_S, math.ceil(p99_s / fraction / 60) * 60)
    return (f"{observed}: a request longer than {drain_s}s is cut when its replica leaves (scale-down, rollout). "
            f"Raise spec.serving.drainSeconds to at least {suggest} (at most {MAX_DRAIN_S})")
