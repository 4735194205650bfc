"""Sixteenth attacker pass on the GPU pool (autoscaling/pool.py), as a tenant who may edit LLMBackends in its own
namespace (any spec.autoscaling.priority, min/maxReplicas, GPUs a replica), create pods there and use some
PriorityClasses. Aimed at 19332ab: with --priority-across-namespaces a backend ranks by (pod priority, priority) over
every namespace (``_rank``, ``_tiers`` across, step 2's shared look-up, step 3's victims lowest priority of all
first), ``contested()`` subtracting another namespace's backends the taker may cut, and backends of no GPUs being
neither holders nor candidates in step 2; then churn, floors, status and CPU in both modes.

Summary: one root finding in ``contested()``: it counts every GPU another namespace holds at the taker's pod priority
that the taker may not cut (running or not) as pods that "may wait", so (across, high) a tenant shields its running
GPUs against a higher priority for good with a running backend of a priority above the taker's (or with a Pending
backend at its minReplicas) beside one Pending pod of its own, and a third namespace's running backend does the same
by being there; (one namespace, medium) any other namespace's running pods of a pod priority stop a namespace's own
reshuffle while its own Pending pods overcommit the pool. Low: across, a Pending replica of another namespace's equal
cut counts as freeing a GPU (a pool of 3 granted 4 for a sync); a backend of no GPUs is still named as a holder in
status. Sound: the rank across (no number above a higher class), floors, churn, 0-GPU backends in step 2 across,
linear CPU.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random

import pytest
from cpu_probe import quiet_cpu_s
from pool_scheduler import scheduled as _scheduled

from llmbackend.autoscaling.pool import Claim, share


def claim(namespace: str, name: str, **kw) -> Claim:
    fields = dict(namespace=namespace, name=name, pool=("gpu",), pool_gpus=4, priority=0, current=0, wanted=0,
                  min_replicas=0, gpus_per_replica=1)
    fields.update(kw)
    return Claim(**fields)


def _cpu(fn, runs: int = 3) -> float:
    return quiet_cpu_s(fn, runs)


def _syncs(claims, across=False, syncs=4, step=30.0):
    """Each sync's share fed back as the next one's replicas, every replica held (running or Pending for GPUs);
    where the claims say which run (``bound``: the pods as the operator reads them), the scheduler places the pods
    between syncs (``_scheduled``). Returns the last shares and each sync's replicas by name."""
    state, now, out, seen = None, 1000.0, None, []
    for _ in range(syncs):
        out, state = share(claims, now, state, across)
        seen.append({c.name: out[c.key].replicas for c in claims})
        ran = _scheduled(claims, out) if all(c.bound is not None for c in claims) else {}
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas,
                                      bound=ran.get(c.key)) for c in claims]
        now += step
    return out, seen


# --- (1) contested() across namespaces: GPUs the taker may not cut are not pods that wait --------------------------


def test_across_control_the_tenants_high_backend_or_its_pending_backend_alone_shields_nothing():
    """Controls for the finding below: pool 4, the tenant's t1 (priority 1) runs 3; beside it either its bx
    (priority 9, 1 GPU running) or its b2 (priority 1, 1 Pending pod). The taker c (another namespace, priority 5)
    gets its 2 replicas either way (from t1, the lowest)."""
    c = claim("a", "c", priority=5, wanted=2, bound=0)
    bx = claim("t", "bx", priority=9, current=1, held=1, wanted=1, bound=1)
    t1 = claim("t", "t1", priority=1, current=3, held=3, wanted=3, bound=3)
    b2 = claim("t", "b2", priority=1, current=1, held=1, wanted=1, bound=0)
    out, seen = _syncs([c, bx, t1], across=True)
    assert out[c.key].replicas == 2 and out[bx.key].replicas == 1, seen
    out, seen = _syncs([c, t1, b2], across=True)
    assert out[c.key].replicas == 2, seen


# Fixed (was a strict xfail): FINDING (high, across namespaces) contested() counted every GPU of another namespace the taker may not cut, running ones included: a tenant's running higher backend beside one Pending pod of its own kept c at 0 for good. The pool now reads which pods wait (Claim.bound, from the pods) and counts only a third namespace's Pending pods of the taker's pod priority.
def test_across_a_tenants_running_high_backend_and_one_pending_pod_shield_its_gpus_from_a_higher_priority():
    c = claim("a", "c", priority=5, wanted=2, bound=0)
    bx = claim("t", "bx", priority=9, current=1, held=1, wanted=1, bound=1)
    t1 = claim("t", "t1", priority=1, current=3, held=3, wanted=3, bound=3)
    b2 = claim("t", "b2", priority=1, current=1, held=1, wanted=1, bound=0)
    out, seen = _syncs([c, bx, t1, b2], across=True, syncs=6)
    assert out[c.key].replicas == 2, seen  # seen: c 0, bx 1, t1 3, b2 1 every sync


# Fixed (was a strict xfail): FINDING (medium, across namespaces) the same root; a third namespace's Pending pods the taker outranks are cut first (they free no GPU), then it takes.
def test_across_a_third_namespaces_running_higher_backend_does_not_stop_a_taker():
    x = claim("x", "x", priority=9, current=1, held=1, wanted=1, bound=1)
    b1 = claim("b", "b1", priority=1, current=3, held=3, wanted=3, bound=3)
    d1 = claim("d", "d1", priority=1, current=1, held=1, wanted=1, bound=0)
    c = claim("a", "c", priority=5, wanted=1, bound=0)
    _, control = _syncs([dataclasses.replace(x, namespace="a"), b1, d1, c], across=True)
    assert control[-1]["c"] == 1, control
    out, seen = _syncs([x, b1, d1, c], across=True, syncs=6)
    assert out[c.key].replicas == 1, seen


# Fixed (was a strict xfail): FINDING (high, across namespaces) a tenant's own Pending backend at its floor shielded its running GPUs; the victim's own namespace's Pending pods no longer stop a cut (its own reshuffle).
def test_across_a_tenants_pending_backend_at_its_floor_does_not_shield_its_running_gpus():
    c = claim("a", "c", priority=5, wanted=2, bound=0)
    t1 = claim("t", "t1", priority=1, current=4, held=4, wanted=4, bound=4)
    t2 = claim("t", "t2", priority=0, current=1, held=1, wanted=1, min_replicas=1, bound=0)
    out, seen = _syncs([c, t1], across=True)
    assert out[c.key].replicas == 2, seen
    out, seen = _syncs([c, t1, t2], across=True, syncs=6)
    assert out[c.key].replicas == 2 and out[t2.key].replicas == 1, seen


# --- (2) contested() inside one namespace's trust (the default) --------------------------------------------------


# Fixed (was a strict xfail): FINDING (medium, default mode) another namespace's running pods stopped a namespace's own reshuffle; only Pending pods of a third namespace do now.
def test_another_namespaces_running_pods_do_not_stop_a_namespaces_own_reshuffle():
    t = claim("t", "t", current=1, held=1, wanted=1, bound=1)
    a0 = claim("a", "a0", current=3, held=3, wanted=3, bound=3)
    a2 = claim("a", "a2", current=1, held=1, wanted=1, bound=0)
    a1 = claim("a", "a1", priority=5, wanted=1, bound=0)
    _, control = _syncs([dataclasses.replace(t, namespace="a"), a0, a2, a1])
    assert control[-1]["a1"] == 1, control
    out, seen = _syncs([t, a0, a2, a1], syncs=5)
    assert out[a1.key].replicas == 1, seen


def test_the_pass_15_floor_control_still_holds():
    """A third namespace's floor still holds (what the fix above must keep): t1 (priority -100, minReplicas 2, both
    Pending) keeps its floor and b1 (another namespace) keeps 4: GPUs b1 frees would go to t1's older pods."""
    b1 = claim("b", "b1", priority=1, current=4, held=4, wanted=4, bound=4)
    t1 = claim("t", "t1", priority=-100, current=2, held=2, wanted=2, min_replicas=2, bound=0)
    a1 = claim("a", "a1", priority=5, wanted=2, bound=0)
    out, seen = _syncs([b1, t1, a1], across=True)
    assert out[t1.key].replicas == 2 and out[b1.key].replicas == 4, seen


# --- (3) a Pending replica of another namespace's equal counted as freeing a GPU ---------------------------------


# Fixed (was a strict xfail): FINDING (low, across namespaces) a cut of another namespace's Pending replica counted as freeing a GPU (pool 3 granted 4 for a sync); known from the pods, a victim runs its bound replicas only.
def test_across_a_pending_equal_cut_frees_no_gpu_for_the_taker():
    b1 = claim("b", "b1", pool_gpus=3, priority=1, current=3, held=3, wanted=3, bound=3)
    d1 = claim("d", "d1", pool_gpus=3, priority=1, current=1, held=1, wanted=1, bound=0)
    a1 = claim("a", "a1", pool_gpus=3, priority=5, wanted=1, bound=0)
    out, _ = share([b1, d1, a1], 1000.0, None, True)
    assert sum(out[c.key].replicas for c in (b1, d1, a1)) <= 3, out


# --- (4) backends of no GPUs --------------------------------------------------------------------------------------


def test_across_a_backend_of_no_gpus_and_the_highest_priority_cuts_nobody_in_step_2():
    """Pass 15's 0-GPU probe, across namespaces: a tenant's backend of no GPUs and priority 10**9 beside another
    namespace's overcommitted 2-GPU backend cuts none of its replicas, and is granted all it wants at once."""
    o0 = claim("b", "o0", current=3, held=3, wanted=5, gpus_per_replica=2)
    z0 = claim("t", "z0", priority=10**9, wanted=9, gpus_per_replica=0)
    out, seen = _syncs([o0, z0], across=True)
    assert out[z0.key].replicas == 9 and out[o0.key].replicas == 3 and out[o0.key].preempted_by is None, seen


# Fixed (was a strict xfail): FINDING (low, status) a backend of no GPUs was named as holding the pool; status names only backends that hold GPUs.
def test_a_backend_of_no_gpus_is_not_said_to_hold_the_pool():
    zero = claim("a", "zero", current=3, held=3, wanted=3, gpus_per_replica=0)
    h = claim("b", "h", current=4, held=4, wanted=4)
    w = claim("a", "w", wanted=2)
    w2 = claim("b", "w2", wanted=2)
    out, _ = share([zero, h, w, w2], 1000.0)
    assert "zero" not in out[w.key].waiting_for_capacity, out[w.key]
    assert "0 GPU(s)" not in out[w2.key].waiting_for_capacity, out[w2.key]


# --- (5) the rank across namespaces, floors and churn -------------------------------------------------------------


def test_across_no_spec_priority_ranks_a_backend_above_a_higher_class():
    """A tenant of class 0 with priority 2**62 beside another namespace's class-5 backend of priority -5 that holds
    the pool: it takes nothing and its status names nobody of the other namespace, over several syncs."""
    hi = claim("b", "secret-hi", priority=-5, class_priority=5, current=4, held=4, wanted=4)
    t = claim("t", "t", priority=2**62, class_priority=0, wanted=4)
    out, seen = _syncs([hi, t], across=True)
    assert out[hi.key].replicas == 4 and out[t.key].replicas == 0, seen
    assert "secret" not in (out[t.key].waiting_for_capacity or ""), out[t.key]


def test_floors_hold_and_constant_demand_settles_in_both_modes():
    """Fuzzed pools (held below current, minReplicas up to current, 0-GPU backends, classes), fed back 10 syncs:
    nobody below min(current, minReplicas) unless preempted, and no share moves after the 7th sync."""
    rng = random.Random(1601)
    for _ in range(600):
        across = rng.random() < 0.6
        pool = rng.choice([4, 6, 8, 12])
        claims = []
        for i in range(rng.randint(2, 6)):
            current = rng.randint(0, 5)
            minimum = rng.choice([0, 0, 1, 2, current])
            claims.append(claim(rng.choice("abt"), f"n{i}", pool_gpus=pool, priority=rng.choice([0, 1, 5, 9]),
                                current=current, held=rng.choice([current, current, rng.randint(0, current)]),
                                wanted=max(minimum, rng.randint(0, 6)), min_replicas=minimum,
                                gpus_per_replica=rng.choice([0, 1, 1, 2, 3]),
                                class_priority=rng.choice([None, None, 0, 5])))
        state, now, seen = None, 1000.0, []
        for _ in range(10):
            out, state = share(claims, now, state, across)
            for c in claims:
                assert out[c.key].replicas >= min(c.current, c.min_replicas) or out[c.key].preempted_by, (c, out)
            seen.append({c.key: out[c.key].replicas for c in claims})
            claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas) for c in claims]
            now += 30.0
        assert all(s == seen[7] for s in seen[7:]), (across, claims, seen[6:])


# --- (6) CPU ------------------------------------------------------------------------------------------------------


def _pending_victims(n: int) -> list[Claim]:
    """A tenant's n backends of one Pending replica beside one running each (pool n), and n takers of another
    namespace, each of its own priority (n tiers across namespaces), wanting 1."""
    cs = [claim("t", f"v{i:05d}", pool_gpus=n, current=2, held=2, wanted=2) for i in range(n)]
    cs += [claim("a", f"a{i:05d}", pool_gpus=n, priority=1 + i, wanted=1) for i in range(n)]
    return cs


def _contested_floors(n: int) -> list[Claim]:
    """n backends at their floors (Pending) and n cuttable running ones, n takers of n namespaces and priorities."""
    cs = [claim("t", f"f{i:05d}", pool_gpus=n, priority=-1, current=1, held=1, wanted=1, min_replicas=1)
          for i in range(n)]
    cs += [claim("b", f"b{i:05d}", pool_gpus=n, current=1, held=1, wanted=1) for i in range(n)]
    cs += [claim(f"a{i}", "a", pool_gpus=n, priority=5 + i, wanted=2) for i in range(n)]
    return cs


@pytest.mark.parametrize("build", [_pending_victims, _contested_floors])
@pytest.mark.parametrize("across", [False, True])
def test_many_tiers_across_cost_linear_cpu(build, across):
    small, big = build(250), build(1000)
    t_small = _cpu(lambda: share(small, 1000.0, None, across))
    t_big = _cpu(lambda: share(big, 1000.0, None, across))
    assert t_big < 8 * t_small + 0.05, (t_small, t_big)  # 4x the claims: linear expectation ~4x
