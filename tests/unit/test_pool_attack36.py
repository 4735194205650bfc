"""Thirty-sixth attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did
not write the code, as a tenant (namespace T) who may create LLMBackends, bare pods and pods of the PriorityClasses it
may use, in its own namespace, and as plain bad luck (pod lists that fail, pods of a scale-down that linger). Aimed at
58e315c (pass 35's fixes): step 1 judged level by level (``taken_above`` = what each higher pod priority keeps running
plus its Pending replicas judged placeable, ``placed``), ``scaled_down`` in ``room_for`` and ``feeds_others``, whole-
replica rounding. Shares are fed back sync after sync through pass 26's kube-scheduler model (``_runs``); "the
scheduler alone" is the same model with every backend at its wanted replicas, in both claim orders (``_both_orders``).

PROBES: 8 test functions, 27 cases (17 pass, 10 strict xfail): 6 functions hold (2 controls, one for each finding; a
scale-down beside a higher grower and a bare pod as large as ``room_for``; a scale-down whose pods linger; the pass 35
unread hit, classified; a tenant-gain fuzz with 15 % unread claims), 2 are findings.

FINDING 1 (high: growth frozen for good, and the tenant gains GPUs the scheduler alone never gives it, both tie
orders, both modes; the tenant needs one Pending replica of a class it may use beside another's equal): step 1 judges
each backend's Pending replicas against the room at their pod priority alone, and adds them all to ``taken_above``
(``placed``), so two backends' Pending replicas of one pod priority that each fit, but not together, count both for
the pod priorities below. Pool 9: W's w (class 5) runs one 4-GPU replica; A's a and T's t (class 5) each have one
Pending 4-GPU replica (room 5: each fits alone, the scheduler places one); V's v (class 1) has one Pending 1-GPU
replica. ``taken_above`` = 4 + 8 = 12 > 9: v's replica is set apart, then dropped (t, short, outranks it), and the 1
GPU left idle never goes to v again (t's held 4 GPUs keep the pool "full"). T's class-0 1-GPU bare pod takes it, for
good (T 0 -> 1 GPU; the scheduler alone: v 1, T 0). Without the bare pod v is denied for good and the GPU stays idle;
the same with a and t both T's, or with T's class-0 backend instead of the bare pod (denial). Controls: without t, or
with a pool of 13 (both fit), v runs. Docs: "Only Pending replicas something could place". Fix: in ``_never_placed``
judge a pod priority's Pending replicas together: count for the lower ones at most the room left at that level
(``taken_above += running + min(placed, max(0, pool - taken_above - running))``), and judge each later replica of the
level net of those judged placeable before it (the older first where known; else as is safe for the others: a
replica that fits only if another does not counts as placeable for itself but takes room from the lower levels only
once).

FINDING 2 (high: a running wanted replica of another namespace cut for nobody and the tenant's bare pods gain for good,
both modes; found by this pass's unread fuzz at seed 5, trial 1049, with no claim unread): pool 9: W's w2 (class 10)
wants two 2-GPU replicas (new); X's x3 (class 5) runs two 2-GPU replicas; X's x5 (class 0) runs one 4-GPU replica
of four held at its floor (three Pending); V's v4 (class 0) has one Pending 4-GPU replica at its floor; T has two
Pending class-5 1-GPU bare pods. The pool cuts x3 to 0 for w2 although the scheduler preempts x5's running class-0 pod
for w2 (class 10 over class 0) and leaves x3 alone; T's bare pods take x3's GPUs: x3 2 -> 1 for good, T's bare pods
2 GPUs (the scheduler alone: x3 2, bare 1). Without the bare pods x3 is cut for one sync (heals). Suspected cause (not
traced for lack of time): step 3 counts x5's Pending floor replicas (class 0, set apart) where its one running pod's
GPUs should count as w2's (preempted by the scheduler), so the class-10 growth looks short and cuts the next
victim, x3. Control: without w2, x3 keeps both replicas. Fix: in step 3, count a lower backend's running pods at its
floor as preemptible for a higher pod priority before cutting an intermediate one (a Pending replica set apart holds
no GPU to count).

HELD: (1) ``scaled_down`` in ``room_for``: X's class-10 scale-down (4 GPUs) beside H's class-10 growth that takes
them, V's class-0 running replicas, C's class-5 growth of one GPU and T's class-5 5-GPU bare pod that fits
``room_for`` (1 + 4) but never the pool: c grows, the tenant's pod gets nothing, as with the scheduler alone (the
growth is taken from the free GPUs in step 3, not by a cut ``third_waits`` checks). (2) A scale-down whose pods
linger (bound for two syncs after the share drops them): no running wanted replica is cut, nothing is granted beyond
the pool (grants 8 in a pool of 8 each sync), both modes, a class-10 or class-0 scale-down. (3) Pass 35's unread
hit (seed 2, trial 201 of the tenant-gain fuzz at 15 % unread): classified as the unread backend's own cost: x2
(class 10, its pods not read) is not grown while unread, and T's older class-5 floor replica runs on the class-0 GPUs
x2's growth would have taken (the scheduler would preempt the same class-0 pods for either): T 7 GPUs, the scheduler
alone 4 (whole-replica packing: x2's 2 withheld GPUs let t0's 4-GPU replica fit), but the other namespaces lose no more
than x2's withheld growth (2 GPUs), and read, the pool agrees with the scheduler. Docs: an unread backend
"counts each way as is safe for the others", not for itself; heals with the read. Medium at most (needs the read of
x2 to fail sync after sync); not a tenant-made gain. (4) The tenant-gain fuzz (pass 35's pools, 3 syncs) with 15 %
unread claims, seed 3, 1,000 pools. Ideas tried without a hit: a tenant flapping its own wanted to manufacture
``scaled_down`` (the freed GPUs go to the older Pending pods in the scheduler too); whole-replica rounding
over-blocking through ``third_waits`` (the shapes tried matched the scheduler alone).

SUSPECTED, NOT SHOWN: the tenant-gain fuzz at 30 % unread finds seed 4 trial 1758 (t0, the tenant's own backend,
unread: likely the same own-cost class as HELD (3)) and seed 5 trial 1419 (w3, w4 unread, across); not reduced. Finding
1's shape likely also makes the ``PoolState.never_placed`` memory keep a wrongly set-apart replica on syncs with a
backend not read; not probed. Nothing checked on a real cluster (one bin of GPUs, not nodes).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): finding 1: step 1 counts, for the pod priorities below, a level's Pending replicas that
fit alone only as far as they fit together (whole replicas, the larger first, each within its own room); its variant
with both equals the tenant's (the two still hold at their level, and step 2 cut v's Pending replica for the deficit)
was fixed later the same day: step 2 cuts no one for the GPUs a pod priority's held Pending replicas lack together. Finding 2: step 3 cuts no running replica of a pod priority between the taker's and
a lower one whose running pods at their floors make what the taker lacks: the kube-scheduler preempts those, and the
preemption count below takes them."""

from __future__ import annotations

import dataclasses

import pytest
import test_pool_attack35 as pass35
from test_pool_attack26 import _runs, _shares
from test_pool_attack28 import claim, pending_claim, running_claim
from test_pool_attack29 import _unread
from test_pool_attack34 import _both_orders

from llmbackend.autoscaling.pool import share

POOL = ("gpu",)
MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])


def _t(claims, ran, bare=()) -> int:
    return sum(ran[c.key] * c.gpus_per_replica for c in claims if c.namespace == "T") + sum(
        ran[("bare", i)] * b[1] for i, b in enumerate(bare) if b[0] == "T")


# --- (1) step 1 adds every Pending replica of a pod priority that fits alone to taken_above --------------------------

def _equals(pool: int = 9, a_ns: str = "A", t: bool = True, low: str = "bare"):
    """W's w (class 5) runs one 4-GPU replica; ``a_ns``'s a and (``t``) T's t (class 5) each one Pending 4-GPU replica;
    V's v (class 1) one Pending 1-GPU replica; ``low``: T's class-0 1-GPU bare pod, T's class-0 backend, or nothing."""
    cs = [running_claim("W", "w", pool, 1, 4, class_priority=5),
          pending_claim(a_ns, "a", pool, 1, 4, class_priority=5, min_replicas=0)]
    if t:
        cs.append(pending_claim("T", "t", pool, 1, 4, class_priority=5, min_replicas=0))
    cs.append(claim("V", "v", pool, class_priority=1, current=1, held=1, bound=0, wanted=1))
    if low == "backend":
        cs.append(claim("T", "lo", pool, wanted=1))
    return cs, ([("T", 1, 0, 1, 0)] if low == "bare" else [])


@MODES
@pytest.mark.parametrize("shape", [dict(t=False), dict(pool=13)], ids=["no-t", "room-for-both"])
def test_control_one_pending_equal_or_room_for_both_v_runs_and_the_bare_pod_waits(across, shape):
    cs, bare = _equals(**shape)
    for claims, out, running, _, _, us in _runs(cs, across, 3, bare):
        assert running[("V", "v")] == 1 and running[("bare", 0)] == 0, (_shares(out), running)
        assert any(running == ran for ran in _both_orders(claims, out, us)), (running, _both_orders(claims, out, us))


@MODES
@pytest.mark.parametrize("shape", [
    dict(), dict(a_ns="T"),
    dict(low=None), dict(low="backend")],
                         ids=["third-ns-a-bare-pod", "both-tenants-bare-pod", "no-bare-pod-denial",
                              "tenants-class-0-backend"])
# Fixed (was a strict xfail, both-tenants-bare-pod): pass 36 finding 1's open variant: with a and t both the tenant's, the two equal Pending replicas that do not fit together both held, the pool read a deficit of 4 and step 2 cut v's Pending replica for it (a cut for nobody; the scheduler alone places v); step 2 now cuts no one for a deficit such replicas make
# Fixed (was a strict xfail): pass 36 finding 1 (high): step 1 counts a's and t's Pending class-5 4-GPU replicas (each fits the 5 GPUs alone, not together) both in taken_above: v's class-1 replica is set apart and dropped, the idle GPU goes to T's class-0 pod or stays idle, for good (the scheduler alone: v 1, T 0)
def test_two_equals_pending_replicas_only_one_of_which_fits_set_apart_no_lower_replica(across, shape):
    cs, bare = _equals(**shape)
    for claims, out, running, _, _, us in _runs(cs, across, 3, bare):
        alone = _both_orders(claims, out, us)
        assert all(ran[("V", "v")] == 1 and _t(claims, ran, us) <= 4 for ran in alone), alone
        assert running[("V", "v")] == 1, (_shares(out), running)
        assert _t(claims, running, us) <= max(_t(claims, ran, us) for ran in alone), (_shares(out), running, alone)


# --- (2) a class-10 growth cuts a class-5 running replica beside a class-0 running pod --------------------------------

def _intermediate(w2: bool = True):
    """Pool 9 (seed 5, trial 1049 of this pass's fuzz): ``w2``: W's w2 (class 10) wants two 2-GPU replicas; X's x3
    (class 5) runs two 2-GPU replicas; X's x5 (class 0) runs one 4-GPU replica of four at its floor; V's v4 (class 0)
    one Pending 4-GPU replica at its floor; T's two Pending class-5 1-GPU bare pods."""
    cs = [claim("X", "x3", 9, class_priority=5, gpus_per_replica=2, current=2, held=2, bound=2, wanted=2),
          claim("V", "v4", 9, gpus_per_replica=4, current=1, held=1, bound=0, wanted=5, min_replicas=1),
          claim("X", "x5", 9, gpus_per_replica=4, current=4, held=4, bound=1, wanted=8, min_replicas=4)]
    if w2:
        cs.insert(0, claim("W", "w2", 9, class_priority=10, gpus_per_replica=2, wanted=2))
    return cs, [("T", 1, 0, 2, 5)]


@MODES
def test_control_without_the_class_10_growth_x3_keeps_both_replicas(across):
    cs, bare = _intermediate(w2=False)
    for _, out, running, _, _, _ in _runs(cs, across, 3, bare):
        assert _shares(out)[("X", "x3")] == 2 and running[("X", "x3")] == 2, (_shares(out), running)


@MODES
# Fixed (was a strict xfail): pass 36 finding 2 (high): w2's class-10 growth cuts x3's two running class-5 replicas although the scheduler preempts x5's running class-0 pod for it; T's class-5 bare pods take x3's GPUs for good (x3 2 -> 1, T 2 GPUs; the scheduler alone: x3 2, T 1)
def test_a_higher_growth_cuts_no_intermediate_running_replica_beside_a_lower_running_pod(across):
    cs, bare = _intermediate()
    for claims, out, running, _, _, us in _runs(cs, across, 3, bare):
        alone = _both_orders(claims, out, us)
        assert all(ran[("X", "x3")] == 2 for ran in alone), alone
        assert _shares(out)[("X", "x3")] == 2 and running[("X", "x3")] == 2, (_shares(out), running)
        assert _t(claims, running, us) <= max(_t(claims, ran, us) for ran in alone), (running, alone)


# --- held: scale-downs ------------------------------------------------------------------------------------------------

@MODES
@pytest.mark.parametrize("h", [True, False], ids=["higher-grower-takes-the-scale-down", "no-grower"])
def test_a_scale_down_in_room_for_lets_no_never_fitting_bare_pod_stop_a_growth(across, h):
    """Pool 8: X's x (class 10) runs four 1-GPU replicas and wants 0; (``h``) H's h (class 10) wants 4; V's v (class
    0) runs 4; C's c (class 5) wants 1; T's class-5 5-GPU bare pod (fits room_for's 1 + 4, never the pool beside h)."""
    cs = [running_claim("X", "x", 8, 4, class_priority=10, wanted=0), running_claim("V", "v", 8, 4),
          claim("C", "c", 8, class_priority=5, wanted=1)]
    if h:
        cs.append(claim("H", "h", 8, class_priority=10, wanted=4))
    for claims, out, running, _, _, us in _runs(cs, across, 3, [("T", 5, 0, 1, 5)]):
        assert running[("C", "c")] == 1, (_shares(out), running)
        assert any(running == ran for ran in _both_orders(claims, out, us)), (running, _both_orders(claims, out, us))


@MODES
@pytest.mark.parametrize("x_class", [10, None], ids=["class-10-x", "class-0-x"])
def test_a_scale_down_whose_pods_linger_cuts_nobody_and_grants_nothing_beyond_the_pool(across, x_class):
    """Pool 8: X's x runs four 1-GPU replicas and wants 0, its pods bound for two syncs after; H's h (class 5) wants
    4, its pods Pending while x's linger; V's v runs 4."""
    cs = [running_claim("X", "x", 8, 4, class_priority=x_class, wanted=0),
          claim("H", "h", 8, class_priority=5, wanted=4),
          running_claim("V", "v", 8, 4)]
    state, now = None, 1000.0
    for i in range(4):
        out, state = share(cs, now, state, across, {POOL: []},
                           {POOL: sum((c.bound or 0) * c.gpus_per_replica for c in cs)})
        shares = _shares(out)
        assert shares[("V", "v")] == 4 and sum(shares[c.key] * c.gpus_per_replica for c in cs) <= 8, (i, shares)
        bound = {"x": 4 if i < 2 else 0, "h": 0 if i < 2 else shares[("H", "h")], "v": 4}
        cs = [dataclasses.replace(c, current=shares[c.key], held=shares[c.key], bound=min(bound[c.name], 8))
              for c in cs]
        now += 30.0


# --- held: unread claims ----------------------------------------------------------------------------------------------

def _pass35_unread_hit():
    """Pool 9 (pass 35's unread hit, seed 2 trial 201 of the tenant-gain fuzz at 15 % unread, across): t0 (class 5)
    one Pending 4-GPU replica at its floor, wants 2; t1 (class 5) runs three 1-GPU replicas at its floor, wants 4; x2
    (class 10) runs one 2-GPU replica, wants 2 (its pods the unread ones); x3 (class 10) two Pending 8-GPU replicas;
    x4 (class 0) runs two 2-GPU replicas; w5 (class 5) three Pending 8-GPU replicas."""
    return [claim("t", "t0", 9, class_priority=5, gpus_per_replica=4, current=1, held=1, bound=0, wanted=2,
                  min_replicas=1),
            claim("t", "t1", 9, class_priority=5, current=3, held=3, bound=3, wanted=4, min_replicas=3),
            claim("x", "x2", 9, class_priority=10, gpus_per_replica=2, current=1, held=1, bound=1, wanted=2),
            claim("x", "x3", 9, class_priority=10, gpus_per_replica=8, current=2, held=2, bound=0, wanted=2),
            claim("x", "x4", 9, gpus_per_replica=2, current=2, held=2, bound=2, wanted=2),
            claim("w", "w5", 9, class_priority=5, gpus_per_replica=8, current=3, held=3, bound=0, wanted=3)]


@pytest.mark.parametrize("unread", [False, True], ids=["read", "x2-unread"])
def test_pass_35s_unread_hit_is_the_unread_backends_own_withheld_growth(unread):
    cs = _pass35_unread_hit()
    seen = (lambda c: _unread(c) if c.name == "x2" else c) if unread else None
    for claims, out, running, _, _, _ in _runs(cs, True, 2, (), seen):
        alone = _both_orders(claims, out)
        t = sum(running[c.key] * c.gpus_per_replica for c in claims if c.namespace == "t")
        t_alone = max(sum(ran[c.key] * c.gpus_per_replica for c in claims if c.namespace == "t") for ran in alone)
        if not unread:
            assert t <= t_alone, (_shares(out), running, alone)
            continue
        # the others lose no more than x2's growth withheld while unread (the tenant's older 4-GPU floor replica
        # fits on the class-0 GPUs x2's would have taken: T 7, the scheduler alone 4)
        withheld = (max(ran[("x", "x2")] for ran in alone) - running[("x", "x2")]) * 2
        lost = min(sum(max(0, ran[c.key] - running[c.key]) * c.gpus_per_replica for c in claims if c.namespace != "t")
                   for ran in alone)
        assert 0 < withheld and lost <= withheld, (_shares(out), running, alone)


def test_fuzz_the_tenant_gains_nothing_beyond_the_scheduler_alone_with_unread_claims():
    pass35._tenant_gain(3, 1000, 0.15)
