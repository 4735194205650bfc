"""Fourteenth attacker pass on the GPU pool (autoscaling/pool.py), as a tenant who may edit LLMBackends in its own
namespace, use some PriorityClasses and set spec.autoscaling.priority freely. Aimed at the thirteenth pass's fixes:
the room beside a taker's equals counting only higher pod priorities and its own namespace's equals, the restore loop
on ``pending``, the 0-GPU bulk grant with quotas, the dropped preemption leftover, and odd inputs.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random

import pytest
from cpu_probe import quiet_cpu_s

from llmbackend.autoscaling.pool import HOLD_S, Claim, share


def claim(namespace: str, name: str, **kw) -> Claim:
    fields = dict(namespace=namespace, name=name, pool=("gpu",), pool_gpus=8, priority=0, current=0, wanted=0,
                  min_replicas=0, gpus_per_replica=1)
    fields.update(kw)
    return Claim(**fields)


def _cpu(fn, runs: int = 2) -> float:
    return quiet_cpu_s(fn, runs)


def _syncs(claims, across=False, syncs=3, step=30.0):
    """Each sync's share fed back as the next one's replicas, every replica held (running or Pending for GPUs)."""
    state, now, out = None, 1000.0, None
    for _ in range(syncs):
        out, state = share(claims, now, state, across)
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas) for c in claims]
        now += step
    return claims, out


# --- (5) odd inputs -----------------------------------------------------------------------------------------------


def test_odd_inputs_never_raise():
    """Huge and negative priorities, 0 and negative GPUs a replica, pools of 0 GPUs, minReplicas above current, held
    above current or negative, unplaceable, quotas of 0 or negative, several syncs: no exception, no negative share."""
    rng = random.Random(1401)
    big = [2**63, -(2**63), 0, 1, -1, 10**30]
    for _ in range(600):
        pool_gpus = rng.choice([0, 0, 1, 4, 8, -3])
        claims = []
        for i in range(rng.randint(1, 6)):
            current = rng.choice([0, 1, 3, 9, -1])
            quota_free = rng.choice([(), (), (("q", rng.choice([0, 0, 2, -4, 8])),), (("q", 3), ("r", 0))])
            claims.append(claim(rng.choice("abt"), f"n{i}", pool_gpus=pool_gpus, priority=rng.choice(big),
                                current=current, wanted=rng.choice([0, 1, 5, 12, -1]),
                                min_replicas=rng.choice([0, 1, 7, -2]), gpus_per_replica=rng.choice([0, 1, 2, 8, -1]),
                                cluster_wide=rng.random() < 0.2,
                                class_priority=rng.choice([None, 0, 2**63, -(2**63)]),
                                held=rng.choice([None, current, current + 5, -2, 0]),
                                unplaceable=rng.choice([None, None, "no node"]),
                                quota=rng.choice([None, None, 0, 2, -1]), quota_free=quota_free,
                                quota_own_gpus=rng.choice([0, 0, 4, -2])))
        state = None
        across = rng.random() < 0.3
        for s in range(3):
            out, state = share(claims, 1000.0 + s * (HOLD_S / 2), state, across)
            assert set(out) == {c.key for c in claims}
            claims = [dataclasses.replace(c, current=out[c.key].replicas) for c in claims]


# --- (2) the restore loop ----------------------------------------------------------------------------------------


def test_restored_victims_never_make_the_pool_hold_more_than_it_has():
    """One sync, every replica running (held = current), mixed GPUs a replica so that victims cut before the one
    that completed a replica are restored: the GPUs granted (less those of replicas counted as preempted, whose pods
    wait) never exceed the pool, unless what the backends kept did already."""
    rng = random.Random(1402)
    for _ in range(1500):
        pool_gpus = rng.choice([4, 6, 8, 12])
        claims = []
        for i in range(rng.randint(2, 7)):
            current = rng.randint(0, 4)
            claims.append(claim(rng.choice("abt"), f"n{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 1, 5]),
                                current=current, held=current, wanted=rng.randint(0, 6),
                                min_replicas=rng.choice([0, 0, 1]), gpus_per_replica=rng.choice([1, 2, 3, 5]),
                                class_priority=rng.choice([None, 0, 5])))
        kept = sum(min(c.current, c.wanted) * c.gpus_per_replica for c in claims)
        out, _ = share(claims, 1000.0)
        total = sum(out[c.key].replicas * c.gpus_per_replica for c in claims if not out[c.key].preempted_by)
        assert total <= max(pool_gpus, kept), (claims, out)


def _wide_taker(n: int) -> list[Claim]:
    """The tenant alone in its namespace: n 1-GPU backends hold the pool, one backend of a higher spec priority wants
    a replica of n GPUs (a multi-node group): n cuts for one replica, all in ``pending``."""
    cs = [claim("t", f"v{i:05d}", current=1, held=1, wanted=1, pool_gpus=n) for i in range(n)]
    cs.append(claim("t", "wide", priority=10, wanted=1, gpus_per_replica=n, pool_gpus=n))
    return cs


# Fixed (was a strict xfail): FINDING (medium) the restore loop rescanned the cuts for each earlier victim (1,600 victims for one wide replica: 0.48 s); grouped once a grant.
def test_one_wide_replica_cut_from_many_small_backends_costs_little_cpu():
    small, big = _wide_taker(400), _wide_taker(1600)
    out, _ = share(big, 1000.0)
    assert out[("t", "wide")].replicas == 1
    t_small = _cpu(lambda: share(small, 1000.0), runs=3)
    t_big = _cpu(lambda: share(big, 1000.0), runs=3)
    # 4x the victims: ~4x linear (0.03 and 0.14 s quiet), 16x quadratic as before the fix (0.48 s). Relative only: CI
    # beside 5 other workers on 2 cores read 0.05 and 0.35 s, past the absolute 0.25 s this once had
    assert t_big < 6 * t_small + 0.05, (t_small, t_big)


# --- (3) the 0-GPU bulk grant with quotas ------------------------------------------------------------------------


def test_zero_gpu_bulk_grants_never_let_gpu_backends_exceed_the_quota():
    """Backends of no GPUs granted at once beside GPU backends of one namespace sharing a quota's free GPUs: the GPU
    backends' growth never exceeds the quota, and another namespace's backend still gets the rest of the pool."""
    rng = random.Random(1403)
    for _ in range(400):
        free_gpus = rng.randint(0, 6)
        q = (("q", free_gpus),)
        claims = [claim("t", f"z{i}", wanted=rng.randint(0, 50), gpus_per_replica=0, quota_free=q)
                  for i in range(rng.randint(1, 3))]
        claims += [claim("t", f"g{i}", wanted=rng.randint(0, 8), gpus_per_replica=rng.choice([1, 2]), quota_free=q)
                   for i in range(rng.randint(1, 3))]
        other = claim("a", "o", wanted=8)
        claims.append(other)
        out, _ = share(claims, 1000.0)
        tenant_gpus = sum(out[c.key].replicas * c.gpus_per_replica for c in claims if c.namespace == "t")
        assert tenant_gpus <= free_gpus, (claims, out)
        assert out[other.key].replicas >= 8 - tenant_gpus, (claims, out)


# Fixed (was a strict xfail): FINDING (low) a backend of no GPUs was capped by a GPU quota as if each replica took one GPU; a quota on GPUs admits pods that request none.
def test_a_backend_of_no_gpus_is_not_capped_by_a_full_gpu_quota():
    z = claim("t", "z", wanted=50, gpus_per_replica=0, quota_free=(("q", 0),))
    out, _ = share([z], 1000.0)
    assert out[z.key].replicas == 50, out


# --- (4) the dropped preemption leftover over syncs --------------------------------------------------------------


def test_no_gpu_left_idle_for_good_over_syncs():
    """Mixed pod priorities and spec priorities, shares fed back as the next sync's replicas (all held), syncs
    HOLD_S apart: once settled, a pool that is not overcommitted leaves no backend short of a replica that fits
    its free GPUs (a preemption's dropped leftover does not idle GPUs for good)."""
    rng = random.Random(1404)
    for _ in range(250):
        across = rng.random() < 0.3
        pool_gpus = rng.choice([4, 8, 8, 16])
        claims = []
        for i in range(rng.randint(2, 6)):
            current = rng.randint(0, 4)
            claims.append(claim(rng.choice("abt"), f"n{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 1, 5]),
                                current=current, held=current, wanted=rng.randint(0, 6),
                                min_replicas=rng.choice([0, 0, 1, current]),
                                gpus_per_replica=rng.choice([1, 2, 3, 8]), class_priority=rng.choice([None, 0, 5, 10])))
        claims, out = _syncs(claims, across, syncs=5, step=HOLD_S + 1)
        used = sum(c.current * c.gpus_per_replica for c in claims)
        if used <= pool_gpus:
            for c in claims:
                assert out[c.key].replicas >= c.wanted or c.gpus_per_replica > pool_gpus - used, (claims, out)


# --- (1) another namespace's equals not counted beside a taker ---------------------------------------------------


def _scheduled(claims, out, pending_first):
    """What the kube-scheduler then runs, per namespace (GPUs): pods that ran keep running unless their backend was
    scaled down (its running pods deleted last: a ReplicaSet deletes unscheduled pods first); the freed GPUs go to
    Pending pods by pod priority, the highest first, and among equals first come first served: ``pending_first``
    (the older ones), then the new replicas, in the order of ``claims``."""
    pool_gpus = claims[0].pool_gpus
    running = {c.key: min(out[c.key].replicas, c.current if c.key not in pending_first else 0) for c in claims}
    free = pool_gpus - sum(running[c.key] * c.gpus_per_replica for c in claims)
    order = sorted(claims, key=lambda c: (-c.scheduling_priority, c.key not in pending_first))
    for c in order:
        while running[c.key] < out[c.key].replicas and free >= c.gpus_per_replica:
            running[c.key] += 1
            free -= c.gpus_per_replica
    by_namespace: dict[str, int] = {}
    for c in claims:
        by_namespace[c.namespace] = by_namespace.get(c.namespace, 0) + running[c.key] * c.gpus_per_replica
    return by_namespace


# Fixed (was a strict xfail): FINDING (high) a namespace cut its running backend for a sibling of the same pod priority while another namespace's older Pending pods of that pod priority waited (they took the GPUs: a 4 -> 2, t 0 -> 2); a taker cuts none of its equals while the pool holds less than its pod priority and above and another namespace has pods there (it waits).
def test_a_tenants_pending_equals_do_not_get_the_gpus_another_namespace_frees_for_its_own_sibling():
    o0 = claim("a", "o0", current=4, held=4, wanted=4, pool_gpus=4)
    o1 = claim("a", "o1", priority=1, wanted=2, pool_gpus=4)
    t1 = claim("t", "t1", current=2, held=2, wanted=2, pool_gpus=4)  # 2 Pending pods, waiting only for GPUs
    claims = [o0, o1, t1]
    out, _ = share(claims, 1000.0)
    after = _scheduled(claims, out, pending_first={t1.key})
    assert after.get("a", 0) >= 4, (out, after)


# Fixed (was a strict xfail): FINDING (high) the same with a 2-GPU victim; fixed with it.
def test_a_tenants_pending_two_gpu_pod_does_not_get_a_cut_siblings_gpus():
    o0 = claim("a", "o0", current=2, held=2, wanted=2, gpus_per_replica=2, pool_gpus=4)
    o1 = claim("a", "o1", priority=1, wanted=1, pool_gpus=4)
    t1 = claim("t", "t1", current=1, held=1, wanted=1, gpus_per_replica=2, pool_gpus=4)
    claims = [o0, o1, t1]
    out, _ = share(claims, 1000.0)
    after = _scheduled(claims, out, pending_first={t1.key})
    settled, out3 = _syncs(claims, syncs=3)
    assert after.get("a", 0) >= 4 and out3[o0.key].replicas == 2, (out, after, out3)


def test_without_the_tenants_pending_pods_the_sibling_swap_moves_no_gpu_out_of_the_namespace():
    """Control: the same namespace alone, its sibling swap keeps all 4 GPUs in namespace a."""
    o0 = claim("a", "o0", current=4, held=4, wanted=4, pool_gpus=4)
    o1 = claim("a", "o1", priority=1, wanted=2, pool_gpus=4)
    out, _ = share([o0, o1], 1000.0)
    assert _scheduled([o0, o1], out, pending_first=set()) == {"a": 4}, out


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "FINDING (low; restated after attack pass 15, 2 of 800 trials, seed 1405): a namespace's own reshuffle leaves "
    "GPUs over that a tenant's Pending pod then takes: pool 8, namespace b's o2 (priority 5) short of one 1-GPU "
    "replica cuts a 3-GPU replica of its sibling o1 (priority 0); another namespace's o0 is granted 1 of the 2 left "
    "over and the tenant's Pending pod (class -1, the lowest) runs on the last one, which was not free before. "
    "Whole replicas make the leftover (a 3-GPU replica cut for a 1-GPU need); the namespace's priority asks for the "
    "cut, as a PriorityClass would make the kube-scheduler preempt the 3-GPU pod. Fix: among victims of one rank cut "
    "the one whose replica fits the need best, and in a pool with Pending pods do not cut a replica whose leftover no "
    "backend of the pool claims"))
def test_a_tenants_pending_pods_never_take_gpus_another_namespace_frees_for_itself():
    rng = random.Random(1405)
    failures = []
    for _ in range(800):
        pool_gpus = rng.choice([4, 8, 8, 16])
        others, used = [], 0
        for i in range(rng.randint(1, 4)):
            g = rng.choice([1, 1, 2, 3])
            current = rng.randint(0, 4)
            if used + current * g > pool_gpus:
                current = (pool_gpus - used) // g
            used += current * g
            others.append(claim(rng.choice("ab"), f"o{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 1, 5]),
                                current=current, held=current, wanted=current + rng.randint(0, 4),
                                min_replicas=rng.choice([0, 0, 1]), gpus_per_replica=g))
        tenant = []
        for i in range(rng.randint(1, 3)):
            current = rng.randint(1, 4)
            tenant.append(claim("t", f"t{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 9]),
                                class_priority=rng.choice([None, 0, -1]), current=current, held=current,
                                wanted=current, gpus_per_replica=rng.choice([1, 2, 3])))
        alone, _ = share(others, 1000.0)
        both, _ = share(others + tenant, 1000.0)
        ran_alone = _scheduled(others, alone, set())
        ran_both = _scheduled(others + tenant, both, {c.key for c in tenant})
        # the tenant's pods (all Pending, the oldest) run only on GPUs that were free before the shares
        free_before = max(0, pool_gpus - sum(c.current * c.gpus_per_replica for c in others))
        idle = pool_gpus - sum(ran_both.values())
        if ran_both.get("t", 0) > free_before:
            failures.append(("t", ran_alone, ran_both, others, tenant))
        for ns in {c.namespace for c in others}:
            before = sum(c.current * c.gpus_per_replica for c in others if c.namespace == ns)
            if ran_both.get(ns, 0) < min(ran_alone.get(ns, 0), before):
                if idle < min(ran_alone.get(ns, 0), before) - ran_both.get(ns, 0):
                    failures.append((ns, ran_alone, ran_both, others, tenant))
    assert not failures, (len(failures), failures[:1])


# --- across namespaces: a higher spec priority of a lower class ----------------------------------------------------


# Fixed (was a strict xfail): FINDING (low) across namespaces a backend of a higher priority and a lower PriorityClass was granted replicas that one of a higher class counted as preempted the same sync (18 GPUs granted in a pool of 12, 'preempted by' every sync); across namespaces a backend now ranks by (pod priority, priority) as inside one, so a priority never ranks it above pods the scheduler places first.
def test_across_namespaces_a_lower_class_is_not_granted_replicas_preempted_in_the_same_sync():
    n0 = claim("t", "n0", pool_gpus=12, priority=5, class_priority=0, wanted=6, gpus_per_replica=2)
    n1 = claim("b", "n1", pool_gpus=12, priority=1, class_priority=5, wanted=6)
    out, _ = share([n0, n1], 1000.0, None, True)
    _, settled = _syncs([n0, n1], across=True, syncs=3)
    assert out[n0.key].replicas * 2 + out[n1.key].replicas <= 12, out
    assert settled[n1.key].preempted_by is None, settled
