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

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..planning.podfit import pod_gpus
from ..render.drain import MAX_DRAIN_S
from ..render.names import pod_ready

# Warn when the observed p99 exceeds this share of the drain bound: a request twice the p99 would then be cut when
# its replica leaves, and LLM request times (set by output length) have long tails.
DRAIN_WARN_FRACTION = 0.5

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


# A pod that makes room for the replica a GPU pool cut is for goes before every other (``room_first``); among those,
# the room ranked first (the fewest pods removed), then the least busy. Within int32, as the annotation is, and
# below every ordinary cost (>= 0) for any rank
ROOM_FIRST_COST = -(2**30)
_ROOM_SHORT_STEP = 2**16
_ROOM_RANKS = 2**14 - 1


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
            rank = max(0, min(first[pod], _ROOM_RANKS))
            cost = ROOM_FIRST_COST + rank * _ROOM_SHORT_STEP + min(busy or 0, _ROOM_SHORT_STEP - 1)
        elif busy is not None:
            cost = busy
        elif (current.get(pod) or "").startswith("-"):
            cost = 0
        else:
            continue  # (a pod's own /metrics may say NaN or +Inf)
        if current.get(pod) != str(cost):
            out[pod] = str(cost)
    return out


@dataclass(frozen=True)
class Rooms:
    """What :func:`room_first` found: the pods to remove first, pod -> its room's rank (1 the first: the ReplicaSet
    removes a whole room before the next), the GPUs left free by node once the rooms are made and the replicas
    placed, and how many replicas were placed (in a room there already, then in rooms made)."""

    first: dict[str, int]
    free: dict[str, int]
    placed: int


def removable(pods: Iterable[Mapping[str, Any]]) -> tuple[list[tuple[str, str | None, int]], list[tuple[str, str, int]]]:
    """A backend's pods a scale-down may remove, as (name, node, GPUs), in two lists: those the ReplicaSet removes
    before it reads any pod-deletion-cost (unassigned, phase Pending or Unknown, not Ready: the kube-controller-manager's
    ``ActivePodsWithRanks`` order; attack pass 75 finding 3), then the Ready Running pods holding GPUs on a node,
    which the cost orders. Neither holds a pod Succeeded or Failed (their GPUs are free already: counted again as
    freed, attack pass 74 finding 3) or being deleted (the ReplicaSet counts it gone)."""
    ahead: list[tuple[str, str | None, int]] = []
    ranked: list[tuple[str, str, int]] = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node, name, phase = spec.get("nodeName"), meta.get("name"), (pod.get("status") or {}).get("phase")
        if not name or meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            continue
        if not node or phase != "Running" or not pod_ready(pod):
            ahead.append((str(name), str(node) if node else None, pod_gpus(pod)))
        elif (gpus := pod_gpus(pod)) > 0:
            ranked.append((str(name), str(node), gpus))
    return ahead, ranked


def room_first(pods: Iterable[tuple[str, str, int]], free: Mapping[str, int], needed: int,
               busy: Mapping[str, float] | None = None, *, replicas: int = 1, taking: int | None = None,
               limit: int | None = None, start: int = 1) -> Rooms:
    """Of the pods of a backend (:func:`removable`'s ranked ones) a GPU pool cut for another backend's ``replicas``
    replicas of ``needed`` GPUs each, those to remove so that each replica finds one node with its GPUs free:
    ``free`` (node -> GPUs free) names the nodes the replicas may run on. A replica takes a node with room there
    already first (it spends none of what this backend gives: attack pass 75 finding 1); then, for at most ``taking``
    of them (None: all), a room is made on the node that needs the fewest pods removed (then the least ``busy`` ones:
    pod -> requests in flight), one replica's room whole before the next (attack pass 74 finding 1), no more pods in
    all than ``limit`` (the cut: the rest would not go). Ranks start at ``start``.

    The pool counts GPUs; the kube-scheduler places a pod on one node: a cut that freed GPUs on another node stranded
    them, and the scheduler preempted another pod for the replica while a tenant's older Pending pod took the
    stranded GPUs (attack pass 72 finding 2)."""
    left = dict(free)
    if needed <= 0 or replicas <= 0:
        return Rooms({}, left, 0)
    load = busy or {}

    def idle(name: str) -> float:
        n = load.get(name)
        return max(0.0, n) if n is not None and math.isfinite(n) else 0.0

    on: dict[str, list[tuple[float, str, int]]] = {}  # node -> its pods, the least busy first
    for name, node, gpus in pods:
        if node in left:
            on.setdefault(node, []).append((idle(name), name, gpus))
    for held in on.values():
        held.sort()
    used = dict.fromkeys(on, 0)  # node -> its pods taken for rooms already

    placed = 0
    for node in left:  # rooms there already
        fit = min(left[node] // needed, replicas - placed)
        left[node] -= fit * needed
        placed += fit

    def room(node: str) -> tuple[int, float, str] | None:
        """(pods it needs removed, their requests in flight, node) for one more room there; None: none can be made."""
        have, taken, busy_sum = left[node], 0, 0.0
        for n, _, gpus in on[node][used[node]:]:
            if have >= needed:
                break
            have, taken, busy_sum = have + gpus, taken + 1, busy_sum + n
        return (taken, busy_sum, node) if have >= needed else None

    heap = [r for node in on if (r := room(node)) is not None]
    heapq.heapify(heap)
    first: dict[str, int] = {}
    rank = start
    made_at_most = placed + (replicas if taking is None else max(0, taking))
    while heap and placed < min(replicas, made_at_most):
        taken, _, node = heapq.heappop(heap)
        if limit is not None and len(first) + taken > limit:
            break  # (rooms come fewest pods first: none after it fits the cut either)
        for _, name, gpus in on[node][used[node]:used[node] + taken]:
            first[name] = rank
            left[node] += gpus
        used[node] += taken
        left[node] -= needed
        placed, rank = placed + 1, rank + 1
        if (again := room(node)) is not None:
            heapq.heappush(heap, again)
    return Rooms(first, left, placed)


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
