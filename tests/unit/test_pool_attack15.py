"""Fifteenth attacker pass on the GPU pool (autoscaling/pool.py), as a tenant who may edit LLMBackends in its own
namespace (any spec.autoscaling.priority, min/maxReplicas, GPUs a replica), create pods there and use some
PriorityClasses. Aimed at the fourteenth pass's fixes (0f3553d): the ``contested()`` rule of step 3 (a taker cuts none
of its own namespace's equals while another namespace's pods of its pod priority may wait), the restore of unneeded
victims, the 0-GPU grant at once and GPU quotas not capping 0-GPU backends; then churn and CPU.

Summary: one root finding, across namespaces only (``--priority-across-namespaces``), a regression of 0f3553d:
``contested()`` counts the pods of backends the taker outranks, so a lower-priority tenant whose own pods overcommit
the pool (a second backend of Pending pods) keeps its running GPUs against a higher priority forever (high), and its
Pending pods stop a higher priority taking from a third namespace (medium). Within one namespace's trust (the default)
the rule held: it blocks only a namespace's own reshuffle, a higher class still takes, no churn, linear CPU. Low: a
backend of no GPUs of a higher class counts as a holder in step 2 and cuts another namespace's Pending replica.

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


def _cpu(fn, runs: int = 3) -> float:
    return quiet_cpu_s(fn, runs)


def _syncs(claims, across=False, syncs=3, step=30.0):
    """Each sync's share fed back as the next one's replicas, every replica held (running or Pending for GPUs).
    Returns the last claims, the last shares and each sync's replicas by key."""
    state, now, out, seen = None, 1000.0, None, []
    for _ in range(syncs):
        out, state = share(claims, now, state, across)
        seen.append({c.key: out[c.key].replicas for c in claims})
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas) for c in claims]
        now += step
    return claims, out, seen


# --- (1) contested() across namespaces: the pods of backends the taker outranks ---------------------------------


# Fixed (was a strict xfail): FINDING (high, --priority-across-namespaces only; a regression of 0f3553d) a lower tenant's own Pending pods made contested() stop a higher priority of another namespace at its first victim (a1 held 2 of 4 for good); contested() now counts only the pods of another namespace's backends the taker may not cut (those it outranks above their floors are its victims).
def test_across_namespaces_a_lower_tenants_own_pending_pods_do_not_shield_its_running_gpus():
    a1 = claim("a", "a1", pool_gpus=4, priority=5, current=2, held=2, wanted=4)
    t1 = claim("t", "t1", pool_gpus=4, priority=0, current=2, held=2, wanted=2)  # its 2 pods run
    t2 = claim("t", "t2", pool_gpus=4, priority=0, current=2, held=2, wanted=2)  # its 2 pods wait for GPUs
    _, control, _ = _syncs([a1, t1], across=True, syncs=3)
    assert control[a1.key].replicas == 4, control  # control: the tenant without the Pending backend
    _, out, seen = _syncs([a1, t1, t2], across=True, syncs=4)
    assert out[a1.key].replicas == 4, seen


# Fixed (was a strict xfail): FINDING (medium, --priority-across-namespaces only) the same root: a1 got 0 every sync though it outranks both; fixed with it.
def test_across_namespaces_a_lower_tenants_pending_pods_do_not_stop_a_higher_priority_taking():
    b1 = claim("b", "b1", pool_gpus=4, priority=1, current=4, held=4, wanted=4)
    t1 = claim("t", "t1", pool_gpus=4, priority=1, current=2, held=2, wanted=2)
    a1 = claim("a", "a1", pool_gpus=4, priority=5, wanted=2)
    _, control, _ = _syncs([b1, a1], across=True, syncs=3)
    assert control[a1.key].replicas == 2, control
    _, out, seen = _syncs([b1, t1, a1], across=True, syncs=4)
    assert out[a1.key].replicas == 2, seen


def test_across_namespaces_a_tenant_at_its_min_replicas_still_holds_the_floor():
    """Control for the two above: a floor is a floor. The tenant's Pending backend at minReplicas keeps its replicas
    and a1 does not cut b1 for them (GPUs b1 frees would go to the tenant's older Pending pods first)."""
    b1 = claim("b", "b1", pool_gpus=4, priority=1, current=4, held=4, wanted=4)
    t1 = claim("t", "t1", pool_gpus=4, priority=-100, current=2, held=2, wanted=2, min_replicas=2)
    a1 = claim("a", "a1", pool_gpus=4, priority=5, wanted=2)
    _, out, seen = _syncs([b1, t1, a1], across=True, syncs=4)
    assert out[t1.key].replicas == 2 and out[b1.key].replicas == 4, seen


# --- (2) contested() within one namespace's trust (the default) -------------------------------------------------


def test_contested_blocks_only_a_namespaces_own_reshuffle_a_higher_class_still_takes():
    """Non-across: the tenant's class-0 backends overcommit the pool (t1 runs 2, t2 waits with 2) beside another
    namespace's class-10 backend that wants 2 more: contested() is not asked for a lower pod priority, and h gets the
    pool within a few syncs, as the kube-scheduler would give it."""
    h = claim("h", "h", pool_gpus=4, priority=0, class_priority=10, current=2, held=2, wanted=4)
    t1 = claim("t", "t1", pool_gpus=4, current=2, held=2, wanted=2)
    t2 = claim("t", "t2", pool_gpus=4, current=2, held=2, wanted=2)
    _, out, seen = _syncs([h, t1, t2], syncs=3)
    assert out[h.key].replicas == 4, seen


def test_a_namespace_reshuffles_its_own_backends_beside_another_namespace_that_fits():
    """Non-across: another namespace's pods of the same pod priority that fit the pool (nothing waits) do not stop a
    namespace's higher spec priority taking its lower sibling's GPUs, and the other namespace keeps all it holds."""
    a0 = claim("a", "a0", pool_gpus=4, current=2, held=2, wanted=2)
    a1 = claim("a", "a1", pool_gpus=4, priority=5, wanted=2)
    t1 = claim("t", "t1", pool_gpus=4, current=2, held=2, wanted=2)
    for now in range(20):  # every draw
        out, _ = share([a0, a1, t1], 1000.0 + now)
        assert (out[a1.key].replicas, out[a0.key].replicas, out[t1.key].replicas) == (2, 0, 2), out


def test_a_tenants_pending_pods_of_a_lower_class_do_not_block_another_namespaces_reshuffle():
    """Non-across: contested() reads the pool from the taker's pod priority up: a tenant of a lower class that
    overcommits the pool with Pending pods does not stop namespace a (class 5) ordering its own backends, and a takes
    the tenant's GPUs first (a lower pod priority), not its own sibling's."""
    a0 = claim("a", "a0", pool_gpus=4, class_priority=5, current=2, held=2, wanted=2)
    a1 = claim("a", "a1", pool_gpus=4, priority=5, class_priority=5, wanted=2)
    t1 = claim("t", "t1", pool_gpus=4, current=2, held=2, wanted=2)
    t2 = claim("t", "t2", pool_gpus=4, current=2, held=2, wanted=2)
    out, _ = share([a0, a1, t1, t2], 1000.0)
    assert out[a1.key].replicas == 2 and out[a0.key].replicas == 2, out


# --- (3) the 0-GPU grant at once ----------------------------------------------------------------------------------


# Fixed (was a strict xfail): FINDING (low) a backend of no GPUs of a higher class counted as a step-2 holder and cut another namespace's Pending replica every sync; step 2's holders and candidates are backends with GPUs a replica.
def test_a_backend_of_no_gpus_of_a_higher_class_cuts_no_other_namespaces_pending_replica():
    o0 = claim("b", "o0", pool_gpus=4, current=3, held=3, wanted=5, gpus_per_replica=2)
    z0 = claim("t", "z0", pool_gpus=4, wanted=9, gpus_per_replica=0, class_priority=5, quota_free=(("q", 0),))
    _, control, _ = _syncs([o0], syncs=3)
    assert control[o0.key].replicas == 3, control
    _, out, seen = _syncs([o0, z0], syncs=3)
    assert out[z0.key].replicas == 9, seen  # granted all at once, whatever the GPU quota (the 0f3553d fix)
    assert out[o0.key].replicas == 3 and out[o0.key].preempted_by is None, (seen, out[o0.key])


def test_a_tenants_backends_of_no_gpus_move_no_gpu_of_another_namespace():
    """Many tenant backends of no GPUs and no higher class (each granted all at once, under a full GPU quota) beside
    GPU backends of two namespaces: the other namespaces' shares are those without the tenant's 0-GPU backends, over
    several syncs (a higher class: the finding above)."""
    rng = random.Random(1501)
    for _ in range(150):
        pool_gpus = rng.choice([4, 8])
        others = []
        for i in range(rng.randint(1, 4)):
            current = rng.randint(0, 3)
            others.append(claim(rng.choice("ab"), f"o{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 1]),
                                current=current, held=current, wanted=rng.randint(0, 5),
                                gpus_per_replica=rng.choice([1, 2]), class_priority=rng.choice([None, 0, 5])))
        zeros = [claim("t", f"z{i}", pool_gpus=pool_gpus, gpus_per_replica=0, wanted=rng.randint(0, 40),
                       priority=rng.choice([0, 9]), class_priority=rng.choice([None, 0]),
                       quota_free=(("q", 0),)) for i in range(rng.randint(1, 5))]
        _, alone, _ = _syncs(others, syncs=3)
        _, both, _ = _syncs(others + zeros, syncs=3)
        assert {c.key: alone[c.key].replicas for c in others} == {c.key: both[c.key].replicas for c in others}
        assert all(both[z.key].replicas == z.wanted for z in zeros), both


# --- (4) churn ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("across", [False, True])
def test_constant_demand_settles_without_churn(across):
    """Shares fed back sync after sync (every replica held), demand constant: after 8 syncs no backend's share moves.
    (Across namespaces this skipped pools where a higher spec priority had a lower class, which churned: pass 14's
    strict xfail, fixed since: a backend ranks by pod priority first there too.)"""
    rng = random.Random(1502 + across)
    checked = 0
    while checked < 250:
        pool_gpus = rng.choice([4, 8, 8, 16])
        claims = []
        for i in range(rng.randint(2, 6)):
            current = rng.randint(0, 5)
            claims.append(claim(rng.choice("abt"), f"n{i}", pool_gpus=pool_gpus, priority=rng.choice([0, 1, 5]),
                                current=current, held=current, wanted=rng.randint(0, 6),
                                min_replicas=rng.choice([0, 0, 1, 2]), gpus_per_replica=rng.choice([0, 1, 1, 2, 3]),
                                class_priority=rng.choice([None, 0, 5, 10])))
        checked += 1
        for step in (30.0, HOLD_S + 1):
            _, _, seen = _syncs(claims, across, syncs=12, step=step)
            assert all(s == seen[8] for s in seen[8:]), (claims, seen[8:])


# --- (5) CPU ------------------------------------------------------------------------------------------------------


def _contested_pool(n: int) -> list[Claim]:
    """A tenant's n running and 2n Pending 1-GPU backends fill a pool of 2n GPUs; another namespace's n backends of
    distinct spec priorities (contested takers) and n of a lower spec priority want more."""
    pool = 2 * n
    cs = [claim("t", f"{kind}{i:05d}", pool_gpus=pool, current=1, held=1, wanted=1)
          for kind in ("r", "p", "q") for i in range(n)]
    cs += [claim("a", f"a{i:05d}", pool_gpus=pool, priority=5 + i % 7, wanted=2) for i in range(n)]
    cs += [claim("a", f"lo{i:05d}", pool_gpus=pool, priority=1, wanted=1) for i in range(n)]
    return cs


@pytest.mark.parametrize("across", [False, True])
def test_contested_takers_cost_linear_cpu(across):
    small, big = _contested_pool(200), _contested_pool(800)
    t_small = _cpu(lambda: share(small, 1000.0, None, across))
    t_big = _cpu(lambda: share(big, 1000.0, None, across))
    assert t_big < 8 * t_small + 0.05, (t_small, t_big)  # 4x the claims: linear expectation ~4x


# --- (6) status ---------------------------------------------------------------------------------------------------


def test_status_in_the_contested_pools_names_no_other_namespace():
    for across in (False, True):
        a1 = claim("a", "secret-a1", pool_gpus=4, priority=5, current=2, held=2, wanted=4)
        t1 = claim("t", "t1", pool_gpus=4, current=2, held=2, wanted=3)
        t2 = claim("t", "t2", pool_gpus=4, current=2, held=2, wanted=3)
        b1 = claim("b", "secret-b1", pool_gpus=4, priority=1, current=1, held=1, wanted=3)
        _, out, _ = _syncs([a1, t1, t2, b1], across=across, syncs=3)
        for key in (t1.key, t2.key):
            text = " ".join(str(x) for x in (out[key].waiting_for_capacity, out[key].preempted_by, out[key].took))
            assert "secret" not in text, text
