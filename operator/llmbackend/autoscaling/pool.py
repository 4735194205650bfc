"""One GPU pool shared by priority (pure): who gets the GPUs that backends on the same nodes want, and which
backends of lower priority give theirs up.

The autoscaler decides each backend's replicas alone (decision.py); ``share`` runs after it over every backend of
a pool and caps them. A pool is the GPUs of the nodes a backend's replicas may land on (its GPU product, node
selector and tolerations): backends with the same set share it. Steps, per pool:

1. What each backend keeps: the replicas it holds and still wants (its own scale-down frees GPUs at once).
2. Overcommitted (the backends hold more replicas than the pool's GPUs: some pods are Pending): the lowest-priority
   backend that a backend holding GPUs outranks gives up a replica above its minReplicas, until the pool fits.
3. Growth, highest priority first: a backend takes free GPUs, then replicas above minReplicas of backends it
   outranks (lowest priority first) - only as many as make whole replicas of its own. What is still short waits,
   and ``Share.waiting_for_capacity`` names who holds the GPUs.
4. Hysteresis: GPUs a backend held within the last ``HOLD_S`` stay reserved against backends it outranks, so a
   backend that gave them up does not take them back the sync after the other's load dips, and lose them again
   the sync after (two backends trading GPUs every sync, each trade a drain and a cold start).

Who outranks whom (``outranks``): a higher priority in the same namespace. The namespace is the trust boundary: a
tenant who may edit LLMBackends sets spec.autoscaling.priority to any number, so that number is compared across
namespaces only when the cluster admin says so (``across_namespaces``, operator flag --priority-across-namespaces).
A priority taken from a PriorityClass (spec.scheduling.priorityClassName) is compared across namespaces: admins
create PriorityClasses and restrict who may use them (ResourceQuota scopes), and the kube-scheduler already lets a
pod of that class preempt lower pods of any namespace, so the operator grants nothing the tenant could not do.
Equal priorities never take each other's GPUs: the first to hold them keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

HOLD_S = 300.0  # how long GPUs a backend held stay reserved against those it outranks (step 4)

Key = tuple[str, str]


@dataclass(frozen=True)
class Claim:
    """One backend as the pool sees it. ``wanted``: what its autoscaler decided (within min/maxReplicas)."""

    namespace: str
    name: str
    pool: tuple[str, ...]   # the GPU product and the names of the nodes its replicas may land on
    pool_gpus: int          # GPUs of those nodes
    priority: int
    current: int
    wanted: int
    min_replicas: int
    gpus_per_replica: int
    cluster_wide: bool = False  # the priority is a PriorityClass's value

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name} (priority {self.priority})"


@dataclass(frozen=True)
class Share:
    """What one backend may have. ``replicas``: at most what it wanted, at least min(current, minReplicas)."""

    replicas: int
    preempted_by: str | None = None          # status.autoscaling.preemptedBy
    waiting_for_capacity: str | None = None  # status.autoscaling.waitingForCapacity
    took: str | None = None                  # the replicas this sync took from others (for its message)


@dataclass
class PoolState:
    """Memory between syncs: the GPUs each backend was granted lately (hysteresis) and who preempted whom."""

    granted: dict[Key, list[tuple[float, int]]] = field(default_factory=dict)  # (last time held, GPUs) within HOLD_S
    preempted: dict[Key, dict[Key, int]] = field(default_factory=dict)  # victim -> preemptor -> replicas given up


def outranks(a: Claim, b: Claim, across_namespaces: bool) -> bool:
    """May ``a`` take ``b``'s GPUs? See the module docstring for why the namespace bounds it."""
    comparable = a.namespace == b.namespace or across_namespaces or (a.cluster_wide and b.cluster_wide)
    return comparable and a.priority > b.priority


def share(claims: Iterable[Claim], now: float, state: PoolState | None = None,
          across_namespaces: bool = False) -> tuple[dict[Key, Share], PoolState]:
    """Every backend's share of its pool. Pure: returns a new state."""
    state = state or PoolState()
    pools: dict[tuple[str, ...], list[Claim]] = {}
    for c in claims:
        pools.setdefault(c.pool, []).append(c)
    out: dict[Key, Share] = {}
    new = PoolState()
    for members in pools.values():
        _share_pool(members, now, state, new, out, across_namespaces)
    return out, new


def _share_pool(members: list[Claim], now: float, state: PoolState, new: PoolState, out: dict[Key, Share],
                across: bool) -> None:
    by_key = {c.key: c for c in members}
    pool_gpus = max(c.pool_gpus for c in members)
    grant = {c.key: max(0, min(c.current, c.wanted)) for c in members}            # step 1
    free = pool_gpus - sum(grant[k] * by_key[k].gpus_per_replica for k in grant)
    given: dict[Key, dict[Key, int]] = {k: {} for k in by_key}                   # victim -> preemptor -> replicas
    took: dict[Key, dict[Key, int]] = {k: {} for k in by_key}
    kept_for: dict[Key, dict[Key, int]] = {}  # claimant -> backend that outranks it -> GPUs reserved for that one

    def reserved(k: Key) -> int:
        """GPUs ``k`` held within HOLD_S and does not hold now."""
        recent = [g for t, g in state.granted.get(k, []) if now - t < HOLD_S]
        return max(0, max(recent, default=0) - grant[k] * by_key[k].gpus_per_replica)

    def victims_of(c: Claim) -> list[Claim]:
        return sorted((v for v in members if outranks(c, v, across) and grant[v.key] > v.min_replicas),
                      key=lambda v: (v.priority, -grant[v.key], v.name))

    # step 2: overcommitted
    while free < 0:
        holders = [h for h in members if grant[h.key] > 0]
        cut = min((v for v in members if grant[v.key] > v.min_replicas
                   and any(outranks(h, v, across) for h in holders)),
                  key=lambda v: (v.priority, -grant[v.key], v.name), default=None)
        if cut is None:
            break  # only equals (or backends at minReplicas) hold the pool: the scheduler decides whose pods wait
        grant[cut.key] -= 1
        free += cut.gpus_per_replica
        taker = max((h for h in holders if outranks(h, cut, across)), key=lambda h: (h.priority, h.name))
        given[cut.key][taker.key] = given[cut.key].get(taker.key, 0) + 1

    # step 3: growth, highest priority first
    for c in sorted(members, key=lambda c: (-c.priority, c.name)):
        short = c.wanted - grant[c.key]
        if short <= 0:
            continue
        kept = {h.key: r for h in members if outranks(h, c, across) and (r := reserved(h.key)) > 0}  # step 4
        if kept:
            kept_for[c.key] = kept
        blocked = sum(kept.values())
        usable = max(0, free - blocked)
        n = min(short, usable // c.gpus_per_replica)
        grant[c.key] += n
        free -= n * c.gpus_per_replica
        short -= n
        usable -= n * c.gpus_per_replica
        pending: list[Claim] = []  # replicas taken since c's last whole replica: given back if none completes
        for v in victims_of(c):
            while short > 0 and grant[v.key] > v.min_replicas:
                grant[v.key] -= 1
                free += v.gpus_per_replica
                usable += v.gpus_per_replica
                pending.append(v)
                while short > 0 and usable >= c.gpus_per_replica:
                    grant[c.key] += 1
                    free -= c.gpus_per_replica
                    usable -= c.gpus_per_replica
                    short -= 1
                    for p in pending:
                        given[p.key][c.key] = given[p.key].get(c.key, 0) + 1
                        took[c.key][p.key] = took[c.key].get(p.key, 0) + 1
                    pending.clear()
        for v in pending:
            grant[v.key] += 1
            free -= v.gpus_per_replica

    for c in members:
        k = c.key
        # who preempted it: this sync's preemptors, and earlier ones while it is still short of what it wants
        before = state.preempted.get(k, {}) if grant[k] < c.wanted else {}
        by = {who: n for who, n in before.items() if who in by_key}
        for who, n in given[k].items():
            if n > 0:
                by[who] = by.get(who, 0) + n
        if by:
            new.preempted[k] = by
        # (last time held, GPUs): a run of syncs at one count is one entry, dated by its last sync
        history = [(t, g) for t, g in state.granted.get(k, []) if now - t < HOLD_S]
        gpus = grant[k] * c.gpus_per_replica
        new.granted[k] = history[:-1] + [(now, gpus)] if history and history[-1][1] == gpus else history + [(now, gpus)]
        preempted_by = ", ".join(f"{by_key[who].label}: {n} replica(s)" for who, n in sorted(by.items())) or None
        waiting = None
        if grant[k] < c.wanted:
            holders = [h for h in members if h.key != k and grant[h.key] > 0]
            need = (c.wanted - grant[k]) * c.gpus_per_replica
            waiting = (f"{c.wanted - grant[k]} replica(s), {need} GPU(s), of a pool of {pool_gpus}; held by "
                       + (", ".join(f"{h.label}: {grant[h.key] * h.gpus_per_replica} GPU(s)" for h in holders)
                          or "no backend (GPUs held by replicas still draining)"))
            if k in kept_for:
                waiting += "; kept for " + ", ".join(
                    f"{by_key[h].label}: {g} GPU(s) it held within the last {HOLD_S:.0f}s"
                    for h, g in sorted(kept_for[k].items()))
        taken = ", ".join(f"{by_key[v].label}: {n}" for v, n in sorted(took[k].items()) if n > 0)
        out[k] = Share(grant[k], preempted_by, waiting,
                       f"took replica(s) from {taken}, drained first" if taken else None)


def replicas_of(share_: Share | None, wanted: int) -> int:
    """The replicas a backend may have: its share, or what it wanted where no pool applies."""
    return wanted if share_ is None else min(wanted, share_.replicas)


__all__ = ["HOLD_S", "Claim", "PoolState", "Share", "outranks", "share", "replicas_of"]
