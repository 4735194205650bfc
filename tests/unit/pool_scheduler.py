"""A model of the kube-scheduler for the GPU pool's probes (test_pool_bound.py and attack passes 16-30): between two
syncs it places the pods the shares leave, so each sync sees the pods (``Claim.bound``) the last one left. Also the
claim the attack passes start from, and the checks their fuzzes share."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from llmbackend.autoscaling.pool import Claim, Key, Unclaimed


def claim(namespace: str, name: str, **kw) -> Claim:
    """A backend of one pool of 4 GPUs, 1 GPU a replica, priority 0, nothing wanted, held or bound; ``kw`` overrides."""
    fields = dict(namespace=namespace, name=name, pool=("gpu",), pool_gpus=4, priority=0, current=0, wanted=0,
                  min_replicas=0, gpus_per_replica=1, bound=0)
    fields.update(kw)
    return Claim(**fields)


def scheduled(claims: list[Claim], out: dict, unseen: list[tuple[str, int, int, int]] = ()) -> dict:
    """Replicas that run after the shares, as the kube-scheduler would place one pod a replica. A backend scaled below
    its running pods loses running ones last (a ReplicaSet deletes unscheduled pods first); waiting pods, the highest
    pod priority first and among equals the older first (those that waited before the shares, then new ones, in the
    order of ``claims``), take free GPUs, and one that finds none preempts running pods of lower pod priorities (the
    lowest first) when they free enough. ``unseen``: replicas of backends the pool has no claim for, each (name, GPUs a
    replica, running, waiting) at pod priority 0; their waiting pods are the oldest (created before the shares), and
    they are never scaled (their Deployment keeps its replicas)."""
    pool = claims[0].pool_gpus
    running = {c.key: min(out[c.key].replicas, c.bound or 0) for c in claims}
    for name, _g, run_, _ in unseen:
        running[("unseen", name)] = run_
    queue = []
    for name, g, _, wait in unseen:
        queue += [(0, 0, -1, ("unseen", name), g)] * wait
    for i, c in enumerate(claims):
        older = max(0, min(out[c.key].replicas, c.current if c.held is None else c.held) - running[c.key])
        queue += [(-c.scheduling_priority, 0, i, c.key, c.gpus_per_replica)] * older
        queue += [(-c.scheduling_priority, 1, i, c.key, c.gpus_per_replica)] * (
            out[c.key].replicas - running[c.key] - older)
    free = pool - sum(running[c.key] * c.gpus_per_replica for c in claims) - sum(r * g for _, g, r, _ in unseen)
    for prio, _, _, key, g in sorted(queue, key=lambda e: e[:3]):
        if free < g:
            lower = sorted((v for v in claims if v.scheduling_priority < -prio and running[v.key]
                            and v.gpus_per_replica > 0), key=lambda v: v.scheduling_priority)
            if free + sum(running[v.key] * v.gpus_per_replica for v in lower) >= g:
                for v in lower:
                    while running[v.key] and free < g:
                        running[v.key] -= 1
                        free += v.gpus_per_replica
        if free >= g:
            running[key] += 1
            free -= g
    return running



def unclaimed(claims: list[Claim], unseen: list[tuple[str, int, int, int]]) -> dict:
    """The waiting pods of ``unseen`` as the operator hands them to ``share`` (its cluster-wide list of Pending GPU
    pods no claim covers): each a pod of the namespace ``name``, at pod priority 0."""
    return {claims[0].pool: [Unclaimed(name, 0, g) for name, g, _, wait in unseen for _ in range(wait)]}


def bare_gain_within_scheduler_alone(pool: int, claims: list[Claim], out: dict, running: dict, before: dict,
                                     alone: dict, bare: list) -> bool:
    """The attack passes' fuzz check: bare pods of namespaces that lost no running replica gain no more GPUs than
    the scheduler alone gives them, or than were free plus what the model preempted, unless the sync was one
    namespace's own reshuffle. ``running``/``before``/``alone`` as the passes' ``_runs`` yields them, ``bare`` its
    bare pods (namespace, GPUs, ...)."""
    fell = {c.namespace for c in claims if running[c.key] < before[c.key]}
    free_before = pool - sum(before[c.key] * c.gpus_per_replica for c in claims) - sum(
        before[("bare", i)] * b[1] for i, b in enumerate(bare))
    gained = sum((running[("bare", i)] - before[("bare", i)]) * b[1] for i, b in enumerate(bare) if b[0] not in fell)
    gained_alone = sum((alone[("bare", i)] - before[("bare", i)]) * b[1] for i, b in enumerate(bare)
                       if b[0] not in fell)
    preempted = sum(max(0, min(before[c.key], out[c.key].replicas) - running[c.key]) * c.gpus_per_replica
                    for c in claims)
    cut = {c.namespace for c in claims if out[c.key].replicas < c.current and running[c.key] < before[c.key]}
    grew = {c.namespace for c in claims if out[c.key].replicas > c.current}
    own_reshuffle = len(cut) == 1 and grew <= cut
    return own_reshuffle or gained <= max(gained_alone, max(0, free_before) + preempted)


def grower_beyond_pool(pool: int, claims: list[Claim], out: dict, kept: Callable[[Claim], int],
                       excused: Callable[[object], int] = lambda share: 0,
                       bare_waiting: Iterable[tuple[int, int]] = ()) -> Key | None:
    """The attack passes' fuzz check: a backend that grew and holds, beside the pods of a higher pod priority and its
    own namespace's of its pod priority, more GPUs than the pool (None: none does). A backend that did not grow
    counts what it keeps (``kept``); ``excused``: replicas of a share not counted (those its status says were
    preempted). Of what a backend keeps, a Pending replica that no preemption could place (its GPUs do not fit beside
    the pods running at its pod priority and above, and the Pending replicas of a higher pod priority that could be
    placed: the scheduler places those first) is placed before or beside nothing; and of one pod priority's Pending
    replicas that each could be placed, only as many as fit together (the larger first) are placed: the kube-
    scheduler places no more of them, whichever come first. ``bare_waiting``: (pod priority, GPUs) of the Pending
    pods no claim covers, older than every claim's Pending replica (as ``_scheduled`` places them): those of a pod
    priority that fit take its room before its Pending replicas."""
    def kept_of(d: Claim) -> int:
        return out[d.key].replicas if out[d.key].replicas > d.current else min(out[d.key].replicas, kept(d))

    def together(room: int, items: list[tuple[int, int]]) -> int:
        """GPUs of (GPUs, replicas) Pending replicas that fit ``room`` together, the larger first."""
        placed = 0
        for g, n in sorted(items, reverse=True):
            placed += min(n, max(0, room - placed) // g) * g
        return placed

    pending_above: dict[int, int] = {}  # pod priority -> GPUs of Pending replicas above it that could be placed

    def placed_pending_above(level: int) -> int:
        if level not in pending_above:
            total = 0
            for lv in sorted({e.scheduling_priority for e in claims if e.scheduling_priority > level}, reverse=True):
                total += together(room_at(lv, total), [
                    (e.gpus_per_replica, placeable(e, kept_of(e)) - min(kept_of(e), e.bound)) for e in claims
                    if e.bound is not None and e.gpus_per_replica > 0 and e.scheduling_priority == lv])
            pending_above[level] = total
        return pending_above[level]

    def room_at(level: int, above: int) -> int:
        return pool - sum(min(e.bound, e.current) * e.gpus_per_replica for e in claims
                          if e.bound is not None and e.scheduling_priority >= level) - above

    bare_at: dict[int, list[int]] = {}
    for level, gpus in bare_waiting:
        bare_at.setdefault(level, []).append(gpus)

    def older_bare(level: int, room: int) -> int:
        took = 0
        for gpus in bare_at.get(level, ()):
            if gpus <= room - took:
                took += gpus
        return took

    def placeable(d: Claim, n: int) -> int:
        if d.bound is None or d.gpus_per_replica <= 0:
            return n
        running = min(n, d.bound)
        room = room_at(d.scheduling_priority, placed_pending_above(d.scheduling_priority))
        room -= older_bare(d.scheduling_priority, max(0, room))
        return running + min(n - running, max(0, room) // d.gpus_per_replica)

    for c in claims:
        if out[c.key].replicas <= c.current or c.gpus_per_replica <= 0:
            continue
        total = out[c.key].replicas * c.gpus_per_replica
        waiting: dict[int, list[tuple[int, int]]] = {}  # pod priority -> the (GPUs, replicas) that wait, kept
        for d in claims:
            if d.key != c.key and (d.scheduling_priority > c.scheduling_priority or (
                    d.scheduling_priority == c.scheduling_priority and d.namespace == c.namespace)):
                grew = out[d.key].replicas > d.current
                has = max(0, (out[d.key].replicas if grew else placeable(d, min(out[d.key].replicas, kept(d))))
                          - excused(out[d.key]))
                if grew or d.bound is None or d.gpus_per_replica <= 0:
                    total += has * d.gpus_per_replica
                    continue
                total += min(has, d.bound) * d.gpus_per_replica
                waiting.setdefault(d.scheduling_priority, []).append((d.gpus_per_replica, has - min(has, d.bound)))
        total += sum(together(max(0, room_at(lv, placed_pending_above(lv))), items) for lv, items in waiting.items())
        if total > pool:
            return c.key
    return None
