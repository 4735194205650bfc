"""Thirteenth attacker pass on the GPU pool (autoscaling/pool.py), as a tenant who may edit LLMBackends in its own
namespace, use some PriorityClasses and set spec.autoscaling.priority freely. Aimed at the twelfth pass's fixes:
step 2 cuts only what does not fit beneath its outrankers, step 3's ``fit``/``beside_equals``/``can_take`` bounds,
the ``PASS_OVER`` budget of victims passed over, and the leftover of a preemption going to the tier's turns.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random

from cpu_probe import quiet_cpu_s

from llmbackend.autoscaling import pool as pool_module
from llmbackend.autoscaling.pool import HOLD_S, PASS_OVER, Claim, PoolState, outranks, share


def claim(namespace: str, name: str, **kw) -> Claim:
    fields = dict(namespace=namespace, name=name, pool=("gpu",), pool_gpus=8, priority=0, current=0, wanted=0,
                  min_replicas=0, gpus_per_replica=1)
    fields.update(kw)
    return Claim(**fields)


def _kept(c: Claim) -> int:
    return pool_module._kept(c)


def _gpus(claims, out, which) -> int:
    return sum(_granted(c, out) * c.gpus_per_replica for c in claims if which(c))


def _granted(c: Claim, out) -> int:
    """Replicas of ``c`` that hold (or are granted) GPUs: its share less the idle ones it keeps (pods that wait for
    something else than GPUs hold none)."""
    r = out[c.key].replicas
    held = pool_module._held(c)
    return r if r <= held else max(held, r - (c.current - held))


def _cpu(fn, runs: int = 2) -> float:
    return quiet_cpu_s(fn, runs)


# --- fuzzing: the tenant's namespace "t" against the others ----------------------------------------------------


def _others(rng: random.Random, pool_gpus: int, n: int, classes) -> list[Claim]:
    out = []
    for i in range(n):
        ns = rng.choice(["a", "b"])
        g = rng.choice([1, 1, 2, 3])
        current = rng.randint(0, 5)
        held = rng.choice([None, current, current, rng.randint(0, current)])
        out.append(claim(ns, f"o{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 1, 5, -3]),
                         class_priority=rng.choice(classes), current=current, held=held,
                         wanted=rng.randint(0, 6), min_replicas=rng.choice([0, 0, 1, current]),
                         gpus_per_replica=g))
    return out


def _tenant(rng: random.Random, pool_gpus: int, n: int, classes) -> list[Claim]:
    out = []
    for i in range(n):
        g = rng.choice([0, 1, 1, 2, 3, 8])
        current = rng.randint(0, 9)
        held = rng.choice([None, current, current, rng.randint(0, current)])  # Pending pods held, or not
        out.append(claim("t", f"t{i}", pool_gpus=pool_gpus, priority=rng.choice([2**63, -(2**63), 0, 3, 9]),
                         class_priority=rng.choice(classes), current=current, held=held,
                         wanted=rng.randint(0, 9), min_replicas=rng.choice([0, current, rng.randint(0, 9)]),
                         gpus_per_replica=g))
    return out


def _tenant_state(rng: random.Random, tenant: list[Claim], now: float) -> PoolState:
    granted = {}
    for c in tenant:
        if rng.random() < 0.4:
            granted[(c.pool, c.key)] = [(now - rng.choice([1.0, 100.0]), rng.randint(1, 16))]
    return PoolState(granted=granted)


def _namespace_safe(others: list[Claim], alone, both, across: bool) -> bool:
    """What a tenant below them must leave each other namespace: the GPUs it got alone, or at least those of the
    replicas it keeps that run beneath their outrankers (the rest are Pending pods: cut, they free nothing)."""
    for ns in {c.namespace for c in others}:
        mine = [v for v in others if v.namespace == ns]
        running = 0
        for v in mine:
            if v.gpus_per_replica > 0:
                above = sum(_kept(u) * u.gpus_per_replica for u in others if u.key != v.key and (
                    outranks(u, v, across) or u.scheduling_priority > v.scheduling_priority))
                running += min(_kept(v), max(0, v.pool_gpus - above) // v.gpus_per_replica) * v.gpus_per_replica
        got = sum(both[v.key].replicas * v.gpus_per_replica for v in mine)
        if got < min(running, sum(alone[v.key].replicas * v.gpus_per_replica for v in mine)):
            return False
    return True


# Fixed (was a strict xfail): FINDING (medium) the fuzzed form of the two below; fixed with them.
def test_a_tenant_of_no_higher_pod_priority_never_cuts_another_namespaces_kept_replicas():
    """Differential: the other namespaces alone (one pod priority), then with a tenant whose classes are no higher
    (any spec priority, Pending pods, reservations of its own, many backends; minReplicas 0: what it holds anybody may
    take). Every backend of another namespace keeps what it got alone of the replicas it keeps that run beneath its
    outrankers."""
    rng = random.Random(1301)
    for _ in range(700):
        pool_gpus = rng.choice([4, 8, 8, 16])
        others = _others(rng, pool_gpus, rng.randint(1, 5), [None])  # of one pod priority: no preemption among them
        tenant = [dataclasses.replace(c, class_priority=rng.choice([None, 0, -7]), min_replicas=0)
                  for c in _tenant(rng, pool_gpus, rng.randint(1, 6), [None])]
        now = 1000.0
        alone, _ = share(others, now, None)
        both, _ = share(others + tenant, now, _tenant_state(rng, tenant, now))
        assert _namespace_safe(others, alone, both, False), (others, tenant, alone, both)


def test_across_namespaces_a_tenant_below_every_priority_never_cuts_another_namespaces_kept_replicas():
    """The same across namespaces: a tenant whose spec priorities and classes are below all of the others'."""
    rng = random.Random(1302)
    for _ in range(500):
        pool_gpus = rng.choice([4, 8, 8, 16])
        others = _others(rng, pool_gpus, rng.randint(1, 5), [None])
        others = [dataclasses.replace(c, priority=c.priority + 100) for c in others]
        tenant = [dataclasses.replace(c, class_priority=rng.choice([None, 0]), priority=rng.choice([-5, 0, 50]),
                                      min_replicas=0)
                  for c in _tenant(rng, pool_gpus, rng.randint(1, 6), [None])]
        now = 1000.0
        alone, _ = share(others, now, None, True)
        both, _ = share(others + tenant, now, _tenant_state(rng, tenant, now), True)
        assert _namespace_safe(others, alone, both, True), (others, tenant, alone, both)


def _fuzz_syncs(seed: int, n: int, syncs: int = 4, steps=(10.0, HOLD_S + 1)):
    """Mixed pools fed back sync to sync (each grant becomes current; Pending pods sometimes held)."""
    rng = random.Random(seed)
    for _ in range(n):
        across = rng.random() < 0.35
        pool_gpus = rng.choice([4, 8, 8, 16])
        claims = _others(rng, pool_gpus, rng.randint(1, 5), [None, 0, 5, 10]) + \
            _tenant(rng, pool_gpus, rng.randint(1, 5), [None, 0, 5, 10])
        state, now = None, 1000.0
        for _ in range(syncs):
            out, state = share(claims, now, state, across)
            yield claims, out, across
            nxt = []
            for c in claims:
                r = out[c.key].replicas
                nxt.append(dataclasses.replace(c, current=r, held=rng.choice([None, r, r, rng.randint(0, r)]),
                                               wanted=c.wanted if rng.random() < 0.7 else rng.randint(0, 9)))
            claims = nxt
            now += rng.choice(steps)


def test_a_cut_backend_does_not_fit_beneath_those_that_outrank_it():
    """A backend cut below what it keeps (and above its minReplicas) is cut only for GPUs its outrankers (or a higher
    pod priority) now hold: its next replica would not fit beneath them, or not in the pool at all (syncs HOLD_S
    apart: no GPUs kept for others)."""
    for claims, out, across in _fuzz_syncs(1303, 500, steps=(HOLD_S + 1,)):
        pool_gpus = claims[0].pool_gpus
        total = _gpus(claims, out, lambda u: True)
        for v in claims:
            r = out[v.key].replicas
            if r < _kept(v) and r >= v.min_replicas and v.gpus_per_replica > 0:
                above = _gpus(claims, out, lambda u, v=v, across=across: u.key != v.key and (
                    outranks(u, v, across) or u.scheduling_priority > v.scheduling_priority))
                assert (above + (r + 1) * v.gpus_per_replica > pool_gpus
                        or total + v.gpus_per_replica > pool_gpus), (claims, out, across, v)


def test_a_grower_never_holds_more_than_the_pool_beside_pods_not_below_its_pod_priority():
    """One that grew beyond what it kept (of some GPUs): with it, the pods of a pod priority not below its own fit the
    pool, unless those alone (its kept replicas included) overcommit it already."""
    for claims, out, across in _fuzz_syncs(1304, 500):
        if across:
            continue  # across namespaces a later tier may be of a higher pod priority (the scheduler's preemption)
        pool_gpus = claims[0].pool_gpus
        for c in claims:
            if _granted(c, out) > _kept(c) and c.gpus_per_replica > 0:
                total = _gpus(claims, out, lambda u, c=c: u.scheduling_priority >= c.scheduling_priority)
                # the docstring's "unless those alone overcommit it already" (added by the lead: the assert held the
                # pool alone): what they kept, before this sync's growth. And a replica counted as preempted for a
                # higher pod priority keeps its grant (its pod waits, preempted): its GPUs are counted once, for the
                # preemptor (seen as a backend preempted without giving a replica up)
                kept = sum(_kept(u) * u.gpus_per_replica for u in claims
                           if u.scheduling_priority >= c.scheduling_priority)
                preempted = sum(_granted(u, out) * u.gpus_per_replica for u in claims
                                if u.scheduling_priority >= c.scheduling_priority and out[u.key].preempted_by
                                and _granted(u, out) >= min(_kept(u), u.wanted))
                assert total - preempted <= max(pool_gpus, kept), (claims, out, c)


def test_status_texts_never_name_another_namespace():
    for claims, out, _ in _fuzz_syncs(1305, 300):
        for c in claims:
            s = out[c.key]
            for text in (s.waiting_for_capacity, s.preempted_by, s.took):
                for other in claims:
                    if other.namespace != c.namespace and text:
                        assert f"{other.namespace}/" not in text and f"{other.name} " not in text, (c, text)


# --- starvation over syncs ------------------------------------------------------------------------------------


def _run_syncs(claims, across, syncs, step=30.0, held_pending=True):
    state, now = None, 1000.0
    for _ in range(syncs):
        out, state = share(claims, now, state, across)
        claims = [dataclasses.replace(c, current=out[c.key].replicas,
                                      held=out[c.key].replicas if held_pending else None) for c in claims]
        now += step
    return claims, out


# --- findings: step 3's inner loop keeps cutting one victim after the beside mode flips -------------------------


# Fixed (was a strict xfail): FINDING (medium) after a victim found to make room beside its equals, the taker kept cutting it instead of the lowest victim; it asks again once the room is made.
def test_a_tenants_lower_class_keeps_no_gpu_while_another_namespace_cuts_its_own_backend():
    o0 = claim("b", "o0", priority=1, current=4, held=2, wanted=5, gpus_per_replica=2)  # 2 pods held (4 GPUs)
    o1 = claim("b", "o1", priority=5, current=1, held=1, wanted=1, gpus_per_replica=3)
    o2 = claim("b", "o2", priority=5, wanted=1, min_replicas=1, gpus_per_replica=3)
    t0 = claim("t", "t0", class_priority=-7, current=2, held=2, wanted=2)  # the tenant's lower class: 2 GPUs
    out, _ = share([o0, o1, o2, t0], 1000.0)
    assert out[o2.key].replicas == 1
    # the scheduler preempts t0's pods for b's before b's own: o0 keeps a replica, t0 keeps at most one GPU
    assert out[o0.key].replicas >= 1 and out[t0.key].replicas <= 1, out




# Fixed (was a strict xfail): FINDING (medium) the same across namespaces; fixed with it.
def test_across_namespaces_a_third_namespace_is_not_cut_twice_while_the_tenants_lowest_keeps_gpus():
    o0 = claim("x", "o0", priority=1, current=4, held=2, wanted=5, gpus_per_replica=2)
    o1 = claim("b", "o1", priority=5, current=1, held=1, wanted=1, gpus_per_replica=3)
    o2 = claim("b", "o2", priority=5, wanted=1, min_replicas=1, gpus_per_replica=3)
    t0 = claim("t", "t0", priority=0, class_priority=-7, current=2, held=2, wanted=2)
    out, _ = share([o0, o1, o2, t0], 1000.0, None, True)
    assert out[o2.key].replicas == 1
    assert out[o0.key].replicas >= 1 and out[t0.key].replicas <= 1, out


# --- findings: room beside equals counts the tenant's Pending pods as GPUs a sibling's cut must cover -----------


# Fixed (was a strict xfail): FINDING (high) the room beside a taker's equals counted another namespace's Pending pods of its pod priority, so a namespace cut its own backend 2 to 0 and the tenant's Pending pod got the GPUs; only higher pod priorities and its own namespace's equals count now (first come first served among the rest), 2 to 1.
def test_a_tenants_pending_pod_does_not_make_another_namespace_over_cut_its_own_backend():
    o0 = claim("a", "o0", current=2, held=2, wanted=2, gpus_per_replica=2, pool_gpus=4)
    o1 = claim("a", "o1", priority=1, wanted=1, pool_gpus=4)
    t1 = claim("t", "t1", current=1, held=1, wanted=1, gpus_per_replica=3, pool_gpus=4)  # Pending for GPUs
    claims, state, now = [o0, o1, t1], None, 1000.0
    for _ in range(3):
        out, state = share(claims, now, state)
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas) for c in claims]
        now += 30.0
    namespace_a = out[o0.key].replicas * 2 + out[o1.key].replicas
    assert namespace_a >= 3, out  # o0 keeps a replica: a holds 3 of the 4 GPUs, not 1

# --- findings: a preemption's leftover leaks to lower tiers -----------------------------------------------------


# Fixed (was a strict xfail): FINDING (low) GPUs of replicas counted as preempted beyond a tier's whole replicas leaked to lower tiers; what the tier's turns leave of them is dropped.
def test_a_preemptions_leftover_stays_with_the_pod_priority_that_preempted():
    w = claim("a", "w", current=4, held=4, wanted=4, min_replicas=4)
    t0 = claim("t", "t0", class_priority=5, current=1, held=1, wanted=1, min_replicas=1, gpus_per_replica=8)
    o3 = claim("b", "o3", class_priority=10, wanted=3, gpus_per_replica=2)
    o1 = claim("t", "o1", wanted=1)
    out, _ = share([w, t0, o3, o1], 1000.0)
    assert out[o3.key].replicas == 3
    assert out[o1.key].replicas == 0, out


# --- a higher backend over syncs ---------------------------------------------------------------------------------


def test_a_higher_spec_priority_gets_its_lower_siblings_gpus_over_syncs():
    """One namespace's backend of the highest spec priority (no class: only its namespace's order) among 1-GPU
    siblings and other namespaces' equals, each sync's share fed back as the next one's replicas (Pending ones
    held): once settled, while it is short, no GPU is free and no lower sibling holds a replica above its
    minReplicas, unless the pool is overcommitted (other namespaces' Pending pods, older than its own would be,
    get a GPU a sibling frees)."""
    rng = random.Random(1306)
    for _ in range(300):
        pool_gpus = rng.choice([4, 8, 16])
        claims = [claim("t", "top", priority=100, wanted=rng.randint(1, 16), pool_gpus=pool_gpus,
                        current=rng.randint(0, 3))]
        for i in range(rng.randint(1, 6)):
            ns = rng.choice(["t", "a", "b"])
            current = rng.randint(0, 6)
            claims.append(claim(ns, f"s{i}", priority=rng.choice([0, 1, 5, 100 if ns != "t" else 99]),
                                pool_gpus=pool_gpus, current=current, held=current, wanted=rng.randint(0, 8),
                                min_replicas=rng.choice([0, 0, 1, 2])))
        across = False
        state, now = None, 1000.0
        for _ in range(8):
            out, state = share(claims, now, state, across)
            claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas) for c in claims]
            now += HOLD_S + 1
        top = claims[0]
        free = pool_gpus - sum(out[c.key].replicas for c in claims)
        if out[top.key].replicas < top.wanted and free >= 0:
            assert free <= 0, (claims, out)
            for s in claims[1:]:
                if s.namespace == "t":
                    assert out[s.key].replicas <= max(s.min_replicas, 0) or s.wanted <= s.min_replicas, (claims, out)


def test_a_legitimate_class_taker_is_not_held_back_by_a_tenants_decoys():
    """A class-10 backend of another namespace wants 4 replicas; the tenant (class 0) puts 2 * PASS_OVER decoys, each
    with a Pending replica, ahead of the backend that holds the pool (their own big one, whose priority they set
    above them). Within two syncs it has them, and never more than the pool."""
    pool_gpus = 8
    big = claim("t", "big", priority=100, current=8, held=8, wanted=8, pool_gpus=pool_gpus)
    decoys = [claim("t", f"d{i:03d}", priority=0, current=1, held=1, wanted=1, min_replicas=0, pool_gpus=pool_gpus)
              for i in range(2 * PASS_OVER)]
    taker = claim("l", "legit", class_priority=10, wanted=4, pool_gpus=pool_gpus)
    claims = [big, *decoys, taker]
    state, now = None, 1000.0
    for _ in range(2):
        out, state = share(claims, now, state)
        assert out[taker.key].replicas <= 4
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas) for c in claims]
        now += 30.0
    assert out[taker.key].replicas == 4, out[taker.key]


def _decoy_shape(n: int, across: bool) -> list[Claim]:
    """The tenant: a big backend holding the pool, n decoys with a Pending replica each beneath it; n takers of a
    higher class (a higher priority too, ``across``) in their own namespaces, each wanting a replica."""
    cs = [claim("t", "big", priority=100, current=n, held=n, wanted=n, pool_gpus=n)]
    cs += [claim("t", f"d{i:05d}", current=1, held=1, wanted=1, pool_gpus=n) for i in range(n)]
    cs += [claim(f"l{i:05d}", "l", class_priority=10, priority=200 if across else 0, wanted=1, pool_gpus=n)
           for i in range(n)]
    return cs


def test_decoys_and_takers_cost_near_linear_cpu():
    for across in (False, True):
        small, big = _decoy_shape(100, across), _decoy_shape(800, across)
        t_small = _cpu(lambda small=small, across=across: share(small, 1000.0, None, across), runs=3)
        t_big = _cpu(lambda big=big, across=across: share(big, 1000.0, None, across))
        assert t_big < 16 * t_small + 0.05 and t_big < 1.2, (across, t_small, t_big)


def test_takers_in_beside_mode_behind_lower_classes_cost_near_linear_cpu():
    """Across namespaces: takers that may only cut pods of a pod priority not below their own pass over up to
    PASS_OVER lower-class backends at each look."""
    def shape(n: int) -> list[Claim]:
        cs = [claim("v", "v", current=8, held=8, wanted=8)]
        cs += [claim("t", f"d{i:05d}", priority=-1, class_priority=-1, current=1, held=1, wanted=1) for i in range(n)]
        cs += [claim(f"l{i:05d}", "l", priority=100, wanted=1) for i in range(n)]
        return cs
    small, big = shape(100), shape(800)
    t_small = _cpu(lambda: share(small, 1000.0, None, True), runs=3)
    t_big = _cpu(lambda: share(big, 1000.0, None, True))
    assert t_big < 16 * t_small + 0.05 and t_big < 0.6, (t_small, t_big)


def _zero_gpu_backends(n: int) -> list[Claim]:
    return [claim("t", f"z{i:05d}", wanted=1000, gpus_per_replica=0) for i in range(n)]


# Fixed (was a strict xfail): FINDING (low) replicas of no GPUs were granted one a turn (400 backends wanting 1,000: ~4 s); all it may have at once now.
def test_backends_of_no_gpus_wanting_many_replicas_cost_little_cpu():
    claims = _zero_gpu_backends(100)
    t = _cpu(lambda: share(claims, 1000.0), runs=3)
    out, _ = share(_zero_gpu_backends(3), 1000.0)
    assert all(s.replicas == 1000 for s in out.values())
    assert t < 0.1, t


def test_the_highest_pod_priority_is_never_granted_more_than_the_pool():
    """Both ways of across_namespaces, Pending pods held: once one of the highest pod priority grows, all of that pod
    priority (its kept replicas included) hold no more than the pool, unless their kept replicas alone did."""
    for claims, out, _ in _fuzz_syncs(1307, 600):
        pool_gpus = claims[0].pool_gpus
        top = max(c.scheduling_priority for c in claims)
        tops = [c for c in claims if c.scheduling_priority == top and c.gpus_per_replica > 0]
        if any(_granted(c, out) > _kept(c) for c in tops):
            kept = sum(_kept(c) * c.gpus_per_replica for c in tops)
            assert _gpus(tops, out, lambda c: True) <= max(pool_gpus, kept), (claims, out)
