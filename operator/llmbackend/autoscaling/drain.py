"""Drain-safe scale-down, the autoscaler's part (pure): which replicas go first.

The ReplicaSet controller deletes pods with the lowest ``controller.kubernetes.io/pod-deletion-cost`` first.
Before a scale-down the operator sets each Ready pod's cost to its requests in flight (batch + engine queue, from
the engine gauges it scrapes), so the replicas with the least work go; a GPU pool's cut first removes the pods on
a node where they make room for the replica the cut is for (``room_first``). (Deployments only: a LeaderWorkerSet
removes its highest group index, a StatefulSet its highest ordinal; neither reads the cost.) The pods then drain
as :mod:`llmbackend.render.drain` renders it (preStop wait, Triton exit timeout, termination grace).

The drain bound stays the rendered, spec-derived one; :func:`drain_warning` checks it against the p99 request time
the engines' histogram shows (a bound that followed live metrics would change the pod template and restart every
replica).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..planning.podfit import pod_gpus
from ..render.drain import MAX_DRAIN_S

# Warn when the observed p99 exceeds this share of the drain bound: a request twice the p99 would then be cut when
# its replica leaves, and LLM request times (set by output length) have long tails.
DRAIN_WARN_FRACTION = 0.5

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


# A pod that makes room for the replica a GPU pool cut is for goes before every other (``room_first``); among those,
# the node that needs the fewest of the backend's pods removed first, then the least busy. Within int32, as the
# annotation is
ROOM_FIRST_COST = -(2**30)
_ROOM_SHORT_STEP = 2**16


def deletion_costs(in_flight: Mapping[str, float], current: Mapping[str, str | None],
                   first: Mapping[str, int] | None = None) -> dict[str, str]:
    """Pod -> new pod-deletion-cost (the requests in its engine, rounded), only where it differs from ``current``.
    ``first``: pods that go before all others (``room_first``: pod -> how many pods its node needs removed).

    Pods without a reading (warming, scrape failed) are left alone: the ReplicaSet controller already removes
    not-ready pods first; one that went first for an earlier cut (a negative cost) goes back to 0."""
    first = first or {}
    out: dict[str, str] = {}
    for pod in {*in_flight, *first, *current}:
        n = in_flight.get(pod)
        busy = None if n is None or not math.isfinite(n) else max(0, min(int(round(n)), 2**31 - 1))
        if pod in first:
            cost = ROOM_FIRST_COST + first[pod] * _ROOM_SHORT_STEP + min(busy or 0, _ROOM_SHORT_STEP - 1)
        elif busy is not None:
            cost = busy
        elif (current.get(pod) or "").startswith("-"):
            cost = 0
        else:
            continue  # (a pod's own /metrics may say NaN or +Inf)
        if current.get(pod) != str(cost):
            out[pod] = str(cost)
    return out


def room_first(pods: Iterable[Mapping[str, Any]], free: Mapping[str, int], needed: int,
               busy: Mapping[str, float] | None = None) -> dict[str, int]:
    """Of the pods of a backend a GPU pool cut for another backend's replica of ``needed`` GPUs, those to remove on a
    node where the GPUs free there (``free``: node -> GPUs, the nodes the replica may run on) and this backend's own
    make that room while the free ones alone do not: only as many as the room needs, the least ``busy`` first (pod ->
    requests in flight), each -> how many of this backend's pods its node needs removed (the fewer, the sooner). The
    pool counts GPUs; the kube-scheduler places a pod on one node: a cut that freed GPUs on another node stranded them,
    and the scheduler preempted another pod for the replica while a tenant's older Pending pod took the stranded GPUs
    (attack pass 72 finding 2)."""
    on: dict[str, list[tuple[str, int]]] = {}
    for pod in pods:
        node, gpus = (pod.get("spec") or {}).get("nodeName"), pod_gpus(pod)
        if node and gpus > 0:
            on.setdefault(node, []).append((pod["metadata"]["name"], gpus))
    load = busy or {}

    def least_busy(item: tuple[str, int]) -> tuple[float, str]:
        n = load.get(item[0])
        return (n if n is not None and math.isfinite(n) else 0.0, item[0])

    out: dict[str, int] = {}
    for node, held in on.items():
        have = free.get(node)
        if have is None or have >= needed or have + sum(g for _, g in held) < needed:
            continue  # (room there already, or none this backend can make)
        taken: list[str] = []
        for name, gpus in sorted(held, key=least_busy):
            if have >= needed:
                break
            taken.append(name)
            have += gpus
        out.update((name, len(taken)) for name in taken)
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
