"""A model of the kube-scheduler for the GPU pool's probes (test_pool_bound.py and attack passes 16-27): between two
syncs it places the pods the shares leave, so each sync sees the pods (``Claim.bound``) the last one left. Also the
claim the attack passes start from."""

from __future__ import annotations

from llmbackend.autoscaling.pool import Claim, Unclaimed


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
