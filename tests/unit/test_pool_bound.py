"""The GPU pool with what runs known from the pods (``Claim.bound``: replicas whose pods are bound to nodes), as the
operator reads it: shares fed back sync after sync through a model of the kube-scheduler (``_scheduled``: running pods
stay, waiting ones are placed by pod priority, the older first, preempting lower pod priorities), so each sync sees
the pods the last one left. Invariants a tenant must not break, fuzzed."""

from __future__ import annotations

import dataclasses
import random

from pool_scheduler import scheduled as _scheduled

from llmbackend.autoscaling.pool import HOLD_S, Claim, share


def claim(namespace: str, name: str, **kw) -> Claim:
    fields = dict(namespace=namespace, name=name, pool=("gpu",), pool_gpus=8, priority=0, current=0, wanted=0,
                  min_replicas=0, gpus_per_replica=1, bound=0)
    fields.update(kw)
    return Claim(**fields)


def _runs(claims: list[Claim], across: bool, syncs: int, step: float = 30.0):
    """Each sync: the shares, then the pods the scheduler runs; yields (claims, shares, running) a sync."""
    state, now = None, 1000.0
    for _ in range(syncs):
        out, state = share(claims, now, state, across)
        running = _scheduled(claims, out)
        yield claims, out, running
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas,
                                      bound=running[c.key]) for c in claims]
        now += step


def _gpus(claims: list[Claim], running: dict, namespace: str) -> int:
    return sum(running[c.key] * c.gpus_per_replica for c in claims if c.namespace == namespace)


def _pool(rng: random.Random, across: bool) -> tuple[list[Claim], list[Claim]]:
    """Other namespaces' backends, all running, and a tenant's that wait (Pending pods) and may want more: pod
    priorities no higher than theirs, any number of its own (across namespaces a number below theirs)."""
    pool_gpus = rng.choice([4, 8, 8, 16])
    others, used = [], 0
    for i in range(rng.randint(1, 4)):
        g = rng.choice([1, 1, 2, 3])
        current = min(rng.randint(0, 4), (pool_gpus - used) // g)
        used += current * g
        others.append(claim(rng.choice("ab"), f"o{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 1, 5]),
                            current=current, held=current, bound=current, wanted=current + rng.randint(0, 3),
                            min_replicas=rng.choice([0, 0, 1]), gpus_per_replica=g))
    tenant = []
    for i in range(rng.randint(1, 3)):
        current = rng.randint(0, 4)
        tenant.append(claim("t", f"t{i}", pool_gpus=pool_gpus, priority=rng.choice([-1, -1]) if across
                            else rng.choice([0, 9, 10**6]), class_priority=rng.choice([None, 0, -1]),
                            current=current, held=current, bound=0, wanted=current + rng.randint(0, 3),
                            min_replicas=rng.choice([0, current]), gpus_per_replica=rng.choice([1, 2, 3])))
    return others, tenant


def test_a_tenants_waiting_pods_never_run_on_gpus_another_namespace_ran():
    """Over 600 pools and 4 syncs a pool, both ways of comparing priorities: the tenant's pods (of no higher pod
    priority than the others', and across namespaces of a lower priority) run, each sync, only on GPUs they ran
    before or that nobody ran: never on GPUs another namespace freed."""
    rng = random.Random(1601)
    failures = []
    leftovers = 0
    for trial in range(600):
        across = trial % 3 == 0
        others, tenant = _pool(rng, across)
        pool_gpus = others[0].pool_gpus
        both = list(_runs(others + tenant, across, 4))
        for b_claims, b_out, b_run in both:
            # GPUs that running replicas cut free, against those the takers grew by
            freed = sum(max(0, min(c.bound, c.held or 0) - b_out[c.key].replicas) * c.gpus_per_replica
                        for c in b_claims)
            taken = sum(max(0, b_out[c.key].replicas - (c.held or 0)) * c.gpus_per_replica
                        for c in b_claims if b_out[c.key].took and c.namespace != "t")
            if taken and freed > taken:
                leftovers += 1
                continue  # whole replicas cut for a smaller need: what is left over is free (attack pass 14's xfail)
            ran = sum(c.bound * c.gpus_per_replica for c in b_claims)
            if _gpus(b_claims, b_run, "t") > max(0, pool_gpus - ran) + _gpus(b_claims, {
                    c.key: c.bound for c in b_claims}, "t"):
                failures.append((trial, b_run, b_claims))
    assert not failures, (len(failures), failures[:1])
    assert leftovers < 80, leftovers  # of 2,400 syncs (53 now)


def test_constant_demand_settles_with_the_pods_known():
    """Demand constant, pods placed by the scheduler between syncs HOLD_S / 4 apart: from the 8th sync on (GPUs kept
    for a backend that gave them up have been let go) no share moves (500 pools, both ways of comparing
    priorities)."""
    rng = random.Random(1603)
    for trial in range(500):
        across = trial % 2 == 0
        others, tenant = _pool(rng, across)
        seen = [{k: s.replicas for k, s in out.items()}
                for _, out, _ in _runs(others + tenant, across, 12, step=HOLD_S / 4 + 1)]
        assert all(s == seen[8] for s in seen[8:]), (others + tenant, seen[8:])
