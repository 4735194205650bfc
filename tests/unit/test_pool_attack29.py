"""Twenty-ninth attacker pass on the GPU pool (autoscaling/pool.py ``share``), aimed at the four fixes of pass 28's
findings (8b6308d and the three commits before it): step 2's give-back of cuts a later cut made needless
(``fits_beneath``, the ``cuts`` list), step 3 passing over a lower victim while Pending pods no claim covers wait
(``third_waits``), the replicas of an unread claim that wait for sure (``surely_waiting``, ``idle_below``), and step 3's
preemption loop counting only replicas that may run; and what they may have broken. As a tenant (namespace T) who may
create/edit LLMBackends and bare pods in its namespace and use one PriorityClass (class 5, or 10 in finding 4). Shares
are fed back sync after sync through pass 26's kube-scheduler model (``_runs``: one bin of GPUs; waiting pods, the
highest pod priority and then the older first, take free GPUs or preempt lower pod priorities in claim order, only when
that makes them fit). "Scheduler alone": the same model with every backend at its wanted replicas. Where the model's
victim order could differ from the kube-scheduler's (it removes a node's lower pods, places the preemptor, then
reprieves the most important that still fit), the claim order is set so the model evicts what the kube-scheduler would
(the probe says so).

PROBES: 22 test functions, 99 cases (60 pass, 39 strict xfail): 15 functions hold (6 of them controls for the findings),
7 are findings (6 targeted, 1 fuzz seed that finds finding 4's effect by itself).

FINDING 1 (high; theft across namespaces; both modes; the tenant needs its one class, at a floor): step 2's give-back
(``fits_beneath(cut, g, g)``) counts every GPU that waits above the cut victim, whole replica or not, so a higher
Pending replica that the freed GPUs can never complete keeps the needless cuts. Pool 11: H (class 10, a third namespace)
has one Pending 8-GPU replica; V runs ``lo`` (three 1-GPU replicas, priority 0) and ``hi`` (one 8-GPU replica, priority
5); the tenant's ``e`` (class 5) has one Pending 4-GPU replica at minReplicas 1, and three Pending 1-GPU class-0 pods
(replicas of its ``d`` or bare pods). Step 2 cuts lo to 0, then hi; the give-back finds H (8) + e (4) waiting above lo
beside 11 freed GPUs and gives nothing back; H runs, e's 4-GPU pod never fits the 3 GPUs left (only lo's 3 could be
preempted for it), and the tenant's class-0 pods run on lo's GPUs: lo 3 -> 0, the tenant 0 -> 3. The kube-scheduler
alone evicts hi only (claim order hi before lo: on one node it reprieves lo's pods, which still fit) and e stays
Pending. With e at minReplicas 0 its Pending replica is cut and lo is given back (control); with e of 1 GPU lo gives
exactly the 1 the scheduler preempts (control). Same with e in a third namespace and with 4-GPU replicas in a pool of 6;
with e a third namespace's backend the tenant needs no class at all, only Pending class-0 pods. Fix: in the give-back,
count of the replicas that wait above the victim only those the GPUs the cuts free (and the running replicas below them
above their floors) can complete (``next_waiting``'s whole-replica rule), or cut e's uncompletable Pending replica from
the waiting count.

FINDING 2 (high; theft across namespaces; both modes; the tenant needs a class holder in the pool, its own or a third
namespace's, and one Pending class-0 replica): step 2 asks ``contested`` about the nominal taker's pod priority (the
highest holder that outranks the cut), not about the replica next in line for what the cut frees. Pool 9: a class-5
backend ``h`` runs one 1-GPU replica (any namespace); W runs ``w2`` (two 4-GPU replicas, priority 0) and has ``w3``
(priority 1) with one Pending 1-GPU replica; the tenant's ``t1`` (class 0) has one Pending 1-GPU replica and wants 3. w2
does not fit beneath h and its sibling w3 (1 + 1 + 8 > 9), so step 2 cuts a running 4-GPU replica of w2 "for h"; the
tenant's older Pending pod of w2's pod priority takes a GPU and step 3 grows t1 into the rest: W 8 -> 5 GPUs (w2 2 -> 1,
w3 0 -> 1), the tenant 0 -> 3. The scheduler alone changes nothing (w3 cannot preempt its equal). Step 3 refuses the
same reshuffle (``contested(w3, w2)``: another namespace's Pending pods of that pod priority wait, first come first
served: pass 14's rule); a bare pod of the tenant stops it in step 2 too (control: ``feeds_others``). An earlier
generator of the tenant-gain fuzz found it by itself (pool 16, a class-5 holder, W's 4-GPU replica cut for its 1-GPU
sibling). Fix: in step 2 ask ``contested`` (blocking Pending replicas of another namespace than the cut's) at the pod
priority of the replica ``next_waiting`` returns, as for bare pods.

FINDING 3 (medium; lasting loss, no theft; both modes): step 2 does not count the GPUs no pod holds when it follows the
cuts into the waiting replicas (``freed_for_waiting`` starts at 0, ``fits_beneath``), so it cuts one replica too many
for each idle GPU, and while a Pending floor overcommits the pool the victim never regrows into it. Pool 6: H's class-5
``t0`` runs one 2-GPU replica and has one Pending (wants 2); W runs three 1-GPU replicas; 1 GPU is idle; the tenant's
``v4`` (class 0) has one Pending 4-GPU replica at its floor. Step 2 cuts W to 1 (t0 needed 1 GPU beyond the idle one),
and with free < 0 for good (v4's floor) W stays at 1 beside an idle GPU, sync after sync. The scheduler alone preempts
one of W's pods (W 2). Without v4, W keeps 2 (control: step 2 stops at free >= 0). Fix: start the freed GPUs of step 2
at the idle GPUs no pod holds (``idle_gpus``), in ``next_waiting`` and ``fits_beneath``.

FINDING 4 (medium; lasting denial by the tenant's class, no theft; both modes): a Pending replica that can never be
completed (what lower pod priorities hold beside the free GPUs is smaller than it) still counts in the pool's deficit,
which "is covered first", so it stops every equal of another namespace from growing into GPUs the scheduler would
preempt for it. Pool 16: C's c (class 10) runs 4 1-GPU replicas and wants 8; the tenant's big (class 10, the tenant's
one class) runs one 8-GPU replica and has a second one Pending (wanted, at its floor or not: nobody outranks it); X
(class 0) runs 4 1-GPU replicas. The Pending 8-GPU pod never runs (4 lower GPUs to preempt), and c stays at 4 sync after
sync; the scheduler alone lets c's new pods preempt X (c 8). Without the Pending replica c grows to 8 (control). The
tenant-gain fuzz (seed 1, trial 63) finds its effect: a class-10 floor of uncompletable 8-GPU replicas freezes two
class-10 backends' growth, and the tenant's class-5 bare pods take the class-0 GPUs the scheduler would have given them.
Fix: in the deficit (``room``/``free``) and the preemption cap, count a Pending replica only while the free GPUs and the
running GPUs of lower pod priorities could complete it (step 2's whole-replica rule).

FINDING 5 (medium: the effect is high, but it needs two backends whose pods were not read; both modes):
``surely_waiting`` judges each unread claim alone against the GPUs the read pods leave, so two unread claims that each
fit that room alone but not together count no replica as waiting. Pool 11: V's b1 runs one 8-GPU replica (read); the
tenant's b2 and b3 (class 0, one 2-GPU replica each; b2 runs, b3 waits) were not read; 1 GPU is free; the tenant's t3
(class 5) wants one 1-GPU replica and the tenant has a 6-GPU class-0 bare pod. The pool reads a deficit of 1, t3 cuts b1
(8 GPUs) for its 1 GPU in the draws where V's namespace gives up first (18 of 40 draws), and the bare pod takes 6 of the
rest. The scheduler alone places t3 on the free GPU. With one of the two unread, b1 is never cut (control: pass 28's
fix). Same with b2/b3 in V's namespace or a third one. Fix: judge the unread claims together: the room the read pods
leave (``pool_gpus - read_running``) holds at most that many of their GPUs, the highest pod priority first; what is
beyond it waits for sure, the lowest pod priorities first.

FINDING 6 (low; churn: step 4 bypassed; needs the tenant's own backend unread): an unread lower claim's replicas count
as running (preemptible) in step 3's preemption loop, so they open the reservation step 4 keeps for a higher class. Pool
8: A's H (class 10, 8-GPU) held 8 GPUs 60 s ago and wants none; the tenant's d (class 0) has Pending replicas (8 GPUs,
whatever their size) at its floor, not read; the tenant's c (class 5) wants 8. c is granted 8 of the GPUs kept for H
(read, 0: pass 28's control). Breaks "counts each way as is safe for the others". Fix: for the reservation
(``kept_free``) and the preemption loop, count an unread lower claim's replicas as waiting (held, not running).

HELD: the give-back in judged mode (no pods read) and over equals of two namespaces (the freed GPUs counted once); a
class-10 bare pod that can never run (6 GPUs beside 4 of lower pods) does not deny another namespace's class its growth
(step 3's preemption loop gives it what the scheduler would); a class bare pod's split of a cut gives the tenant's
class-0 bare pod nothing and V no less than the scheduler alone; a third namespace's or the tenant's Pending class-10
replica (read or not) instead of a bare pod splits nothing; one unread claim beside the read ones makes no cut (40
draws); an unread Pending replica counted as room and cut again grants no GPU beyond the pool beside an equal of another
namespace; pass 28's phantom with the lower Pending replica unread grants nothing beyond the pool; step 4 holds against
read lower Pending replicas of 1/2/4/8 GPUs for HOLD_S and lets go after; V's own class backend clearing its sibling's
Pending replica gives the tenant no more than the same reshuffle without the sibling (judged not a finding: V's own
numbers, and the leftover of a whole replica is the documented "in turn"). Fuzz (pools of 4 to 16 GPUs, replicas of
1/2/4/8 GPUs, classes 5/10, numbers up to 10**6, floors, 30 % unread claims (held and bound None), bare pods of 1/2/4/8
GPUs and pod priorities 0/5/10 in every namespace, both modes, 6 syncs, 200 pools a seed): (a) no replica a backend
runs, holds and wants is cut in a share unless a backend outranks it by the documented rule; (b) floors never cut in a
share; (c) a grower holds no more than the pool beside a higher pod priority and its own namespace's equals (replicas a
status says were preempted excused); (d) shares settle where reads are right and no bare pod runs; (e, default mode) a
bare pod gets no more than the scheduler alone or the free GPUs plus what the model preempted.

UNSURE / NOT ASSERTED: (1) Finding 2's growth-only twin: with t1 holding nothing and wanting 3, step 2 still cuts w2 for
w3 and t1 grows into the 3 GPUs left over; that is the documented leftover rule ("go to the others of that first group
still short, in turn"), but it hands W's running GPUs to another namespace through W's own numbers; not asserted. (2) A
class taker whose step-2 cut (a victim above its floor) is followed by a step-3 preemption (a victim at its floor) keeps
both, and the surplus goes to the tenant's older Pending pods (found by an earlier generator of the tenant-gain fuzz):
the kube-scheduler does the same when the floor victim's pods are the older (it reprieves the older first), not when
they are the newer; the operator cannot know the ages, so not a finding. (3) Across namespaces (e) is off: a number's
cut leaves GPUs over that the oldest Pending pods get (pass 28's note). Nothing checked on a real cluster (multi-node
placement, pod ages).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from pool_scheduler import bare_gain_within_scheduler_alone, grower_beyond_pool
from test_pool_attack26 import _runs, _scheduled, _shares
from test_pool_attack28 import _kept, _outranks, _phantom, claim, pending_claim, running_claim

from llmbackend.autoscaling.pool import HOLD_S, Claim, PoolState, Unclaimed, share

POOL = ("gpu",)
MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])


def _unread(c: Claim) -> Claim:
    """``c`` as the pool sees a backend whose pods were not read (the operator's claim: held and bound None)."""
    return dataclasses.replace(c, held=None, bound=None)


# --- (1) step 2's give-back: a higher waiting replica the freed GPUs cannot complete ----------------------------------

def _give_back(pool: int, lo: int, big: int, e_size: int, e_min: int = 1, e_ns: str = "T", low: str | None = None):
    """H (class 10) has one Pending ``big``-GPU replica; V runs ``lo`` 1-GPU replicas (priority 0) and one ``big``-GPU
    one (priority 5); ``e`` (class 5, namespace ``e_ns``) has one Pending ``e_size``-GPU replica at minReplicas
    ``e_min``; ``low``: the tenant's ``lo`` Pending class-0 1-GPU pods, replicas of its ``d`` ("pending") or bare pods
    ("bare"). Claim order: hi before lo, so the model evicts hi first, as the kube-scheduler, which reprieves lo's
    pods on their node, does."""
    cs = [pending_claim("H", "H", pool, 1, big, class_priority=10, min_replicas=0),
          running_claim("V", "hi", pool, 1, big, priority=5),
          running_claim("V", "lo", pool, lo),
          pending_claim(e_ns, "e", pool, 1, e_size, class_priority=5, min_replicas=e_min)]
    bare = []
    if low == "pending":
        cs.append(pending_claim("T", "d", pool, lo))
    elif low == "bare":
        bare = [("T", 1, 0, lo, 0)]
    return cs, bare


@MODES
@pytest.mark.parametrize(("e_size", "e_min"), [(4, 0), (1, 1)], ids=["e-not-at-floor", "e-of-1-gpu"])
def test_control_a_class_replica_that_yields_or_completes_leaves_v_what_the_scheduler_leaves(across, e_size, e_min):
    cs, bare = _give_back(11, 3, 8, e_size, e_min, low="pending")
    _, out, running, _, alone, _ = next(_runs(cs, across, 1, bare))
    assert running[("H", "H")] == 1, running
    assert running[("V", "lo")] == alone[("V", "lo")] == 3 - (e_size == 1), (_shares(out), running, alone)
    assert running[("T", "d")] == alone[("T", "d")] == 0, (running, alone)


# Fixed (was a strict xfail): FINDING 1 (high): step 2's give-back counts every GPU that waits above the victim, whole replica or not, so the tenant's class-5 4-GPU Pending replica at its floor (never completable: only lo's 3 GPUs are below it) keeps V's needless lo cuts; H runs on hi's GPUs and the tenant's class-0 Pending pods run on lo's (pool 11: lo 3 -> 0, tenant 0 -> 3; the kube-scheduler alone evicts hi only). Fix: count only waiting replicas the cuts can complete (next_waiting's whole-replica rule) in fits_beneath's give-back.
@MODES
@pytest.mark.parametrize("low", ["pending", "bare"])
@pytest.mark.parametrize("e_ns", ["T", "X"], ids=["tenant-class", "third-class"])
@pytest.mark.parametrize("shape", [(11, 3, 8, 4), (6, 2, 4, 3)], ids=["8-gpu", "4-gpu"])
def test_give_back_is_not_blocked_by_a_higher_replica_the_freed_gpus_cannot_complete(across, low, e_ns, shape):
    pool, lo, big, e_size = shape
    cs, bare = _give_back(pool, lo, big, e_size, e_ns=e_ns, low=low)
    _, out, running, _, alone, _ = next(_runs(cs, across, 1, bare))
    assert alone[("V", "lo")] == lo and running[("H", "H")] == 1, (alone, running)
    assert _shares(out)[("V", "lo")] == lo, _shares(out)
    tenant = running[("T", "d")] if low == "pending" else running[("bare", 0)]
    assert running[("V", "lo")] == lo and tenant == 0, (_shares(out), running)


@MODES
def test_give_back_in_judged_mode_restores_the_needless_cuts(across):
    """Pass 28's finding 1 with no pod read at all: the pool judges from the ranks, gives lo back, and the tenant's
    Pending replicas run on nothing of V's."""
    cs, _ = _give_back(11, 3, 8, 1, e_min=0)
    cs = cs[:3] + [pending_claim("T", "d", 11, 3)]
    _, out, running, _, _, _ = next(_runs(cs, across, 1, (), _unread))
    assert _shares(out)[("V", "lo")] == 3 and running[("V", "lo")] == 3, (_shares(out), running)
    assert running[("H", "H")] == 1 and running[("T", "d")] == 0, running


@MODES
@pytest.mark.parametrize("now", [1000.0, 1001.0, 1002.0, 1003.0])
def test_give_back_counts_the_freed_gpus_once_over_equals_of_two_namespaces(across, now):
    """Pool 9: H (class 10) has one Pending 8-GPU replica; A and B (two namespaces, class 0) run one 1-GPU replica
    each and W one 7-GPU one. Whatever the draw cuts first, the give-back restores one of A and B, not both (their
    grants do not see each other, the freed GPUs do): H fits, and nothing is granted beyond the pool."""
    cs = [pending_claim("H", "H", 9, 1, 8, class_priority=10, min_replicas=0), running_claim("A", "a", 9, 1),
          running_claim("B", "b", 9, 1), running_claim("W", "w", 9, 1, 7)]
    out, _ = share(cs, now, None, across, {})
    shares = _shares(out)
    assert shares[("H", "H")] == 1 and shares[("W", "w")] == 0, shares
    assert shares[("A", "a")] + shares[("B", "b")] == 1, shares


# --- (2) step 2 asks about the nominal taker's pod priority, not the waiting replica's ------------------------------

def _sibling(holder_ns: str, low: str) -> tuple[list[Claim], list]:
    """Pool 9, full: a class-5 ``h`` (namespace ``holder_ns``) runs one 1-GPU replica; W runs w2 (two 4-GPU
    replicas, priority 0) and has w3 (priority 1) with one Pending 1-GPU replica; the tenant's class-0 pod waits:
    ``low`` "pending", one Pending replica of its t1 that wants 3, or "bare", a bare 1-GPU pod."""
    cs = [running_claim(holder_ns, "h", 9, 1, class_priority=5), running_claim("W", "w2", 9, 2, 4),
          pending_claim("W", "w3", 9, 1, priority=1, min_replicas=0)]
    bare = []
    if low == "pending":
        cs.append(claim("T", "t1", 9, current=1, held=1, bound=0, wanted=3))
    else:
        bare = [("T", 1, 0, 3, 0)]
    return cs, bare


@MODES
@pytest.mark.parametrize("holder_ns", ["H", "T"])
def test_control_a_tenants_bare_pod_stops_step_2_cutting_for_the_victims_sibling(across, holder_ns):
    cs, bare = _sibling(holder_ns, "bare")
    for _, out, running, _, _, _ in _runs(cs, across, 3, bare):
        assert running[("W", "w2")] == 2 and running[("bare", 0)] == 0, (_shares(out), running)


# Fixed (was a strict xfail): FINDING 2 (high): step 2 asks contested() about the nominal taker's pod priority (class-5 h, which waits for nothing), not the waiting replica's: it cuts W's running 4-GPU replica for W's own Pending 1-GPU sibling while the tenant's older Pending class-0 replica waits, and the tenant runs on W's GPUs (pool 9: W 8 -> 5 GPUs, tenant 0 -> 3; the scheduler alone changes nothing; step 3 refuses the same cut). Fix: ask contested() at the pod priority of the replica next_waiting returns, as feeds_others does for bare pods.
@MODES
@pytest.mark.parametrize("holder_ns", ["H", "T"])
def test_step_2_does_not_cut_for_a_sibling_while_another_namespaces_pending_pod_of_its_rank_waits(across, holder_ns):
    cs, bare = _sibling(holder_ns, "pending")
    _, out, running, _, alone, _ = next(_runs(cs, across, 1, bare))
    assert alone[("W", "w2")] == 2 and alone[("T", "t1")] == 0, alone
    assert running[("W", "w2")] == 2 and running[("T", "t1")] == 0, (_shares(out), running)


# --- (3) step 2 does not count idle GPUs ----------------------------------------------------------------------------

def _idle(tenant_floor: bool) -> list[Claim]:
    """Pool 6: H's t0 (class 5, 2-GPU) runs one replica and has one Pending (wants 2); W runs three 1-GPU replicas;
    1 GPU is idle; ``tenant_floor``: the tenant's v4 (class 0) has one Pending 4-GPU replica at its floor."""
    cs = [claim("H", "t0", 6, class_priority=5, gpus_per_replica=2, current=2, held=2, bound=1, wanted=2),
          running_claim("W", "w2", 6, 3)]
    if tenant_floor:
        cs.append(pending_claim("T", "v4", 6, 1, 4))
    return cs


@MODES
def test_control_without_a_pending_floor_step_2_cuts_one_replica_and_w_keeps_two(across):
    for _, _, running, _, alone, _ in _runs(_idle(False), across, 4):
        assert running[("W", "w2")] == alone[("W", "w2")] == 2 and running[("H", "t0")] == 2, (running, alone)


# Open (2026-12-06): starting step 2's freed GPUs at the idle ones, as suggested, let step 2 cut for a replica that a
# running bare pod's GPU (which the pool does not see) kept from completing
# (test_a_class_bare_pod_splits_no_cut_for_the_tenants_class_0_bare_pod failed); not kept.
# Fixed (was a strict xfail): FINDING 3 (medium): step 2 does not count the GPUs no pod holds (freed_for_waiting starts at 0), so it cuts W's 1-GPU replicas twice for t0's 2-GPU Pending replica beside an idle GPU, and while the tenant's Pending 4-GPU floor overcommits the pool W never regrows into it (pool 6: W 3 -> 1 for good, 1 GPU idle; the scheduler alone leaves W 2). Fix: start step 2's freed GPUs at the idle ones (idle_gpus) in next_waiting and fits_beneath. Fixed (2026-12-07): step 2 starts at the GPUs no pod holds where the operator read what the pods bound to the pool's nodes hold (share's in_use, controller/run.py _unclaimed); not known, it starts at 0 as before.
@MODES
def test_step_2_counts_idle_gpus_and_a_pending_floor_keeps_no_gpu_idle_for_good(across):
    for _, out, running, _, alone, _ in _runs(_idle(True), across, 4):
        assert running[("H", "t0")] == 2, running
        assert running[("W", "w2")] == 2, (_shares(out), running, alone)


@MODES
@pytest.mark.parametrize("read", [True, False], ids=["in-use-read", "in-use-not-known"])
@pytest.mark.parametrize("bare_priority", [0, 10])
def test_step_2_hands_waiting_replicas_no_gpu_a_running_pod_no_claim_covers_holds(across, read, bare_priority):
    """Pool 6 of finding 3, with X's bare 1-GPU pod running on the GPU no claim holds: t0's Pending replica needs a
    cut of W (the scheduler alone evicts one of W's pods too), and it runs from the first sync, whether or not the
    pool knows what the pods bound to its nodes hold."""
    for _, out, running, _, alone, _ in _runs(_idle(True), across, 4, [("X", 1, 1, 0, bare_priority)], bound_read=read):
        assert running[("H", "t0")] == 2 and running[("bare", 0)] == 1, (_shares(out), running)
        assert running[("W", "w2")] >= alone[("W", "w2")] == 1, (_shares(out), running, alone)


# --- (3b) a Pending replica that can never be completed counts in the deficit ------------------------------------

def _uncompletable(pending: int, floor: int) -> list[Claim]:
    """Pool 16: C's c (class 10) runs 4 1-GPU replicas and wants 8; the tenant's big (class 10) runs one 8-GPU
    replica and has ``pending`` more Pending (wanted), at minReplicas ``floor``; X (class 0) runs 4 1-GPU replicas."""
    return [running_claim("C", "c", 16, 4, class_priority=10, wanted=8),
            claim("T", "big", 16, class_priority=10, gpus_per_replica=8, current=1 + pending, held=1 + pending,
                  bound=1, wanted=1 + pending, min_replicas=floor),
            running_claim("X", "x", 16, 4)]


@MODES
def test_control_without_the_pending_8_gpu_replica_c_preempts_x_as_the_scheduler_would(across):
    runs = list(_runs(_uncompletable(0, 1), across, 3))
    _, out, running, _, alone, _ = runs[-1]
    assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)


# Fixed (was a strict xfail): FINDING 4 (medium): a Pending replica that can never be completed (the tenant's class-10 8-GPU one beside 4 GPUs of lower pods) still counts in the pool's deficit, covered first, so C's class-10 c never grows into X's class-0 GPUs the scheduler would preempt for it (pool 16: c stays 4 for good; scheduler alone: 8). Fix: count a Pending replica in the deficit and the preemption cap only while free GPUs and lower running ones could complete it.
@MODES
@pytest.mark.parametrize("floor", [1, 2], ids=["above-floor", "at-floor"])
def test_a_pending_replica_that_can_never_run_does_not_freeze_an_equals_growth(across, floor):
    runs = list(_runs(_uncompletable(1, floor), across, 3))
    _, out, running, _, alone, _ = runs[-1]
    assert running[("T", "big")] == 1, running
    assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)


@MODES
@pytest.mark.parametrize("outranked", [False, True], ids=["alone", "beneath-a-sibling"])
def test_replicas_nothing_could_place_stay_unless_something_outranks_them(across, outranked):
    """The finding-4 fix's rule for the replicas it sets apart (never placed: ``_never_placed``): they hold nothing,
    and the backend keeps them while nothing outranks it (equals are first come first served); beneath a sibling of a
    higher priority they go, down to its floor, and its status says it waits. c grows to 8 either way."""
    cs = _uncompletable(2, 1)
    # a sibling that wants nothing outranks nobody (it takes nothing); one that wants a replica does
    cs.append(claim("T", "top", 16, class_priority=10, priority=5, wanted=int(outranked)))
    out, _ = share(cs, 1000.0, None, across)
    big = out[("T", "big")]
    assert big.replicas == (1 if outranked else 3), _shares(out)
    # (across namespaces top outranks c too, but the cuts of c it could make are the 1 GPU it is short of, which
    # places no 8-GPU replica: both are set apart and go, and none counts as preempted; pass 32's finding 4)
    assert big.preempted_by is None, big
    assert "2 replica(s), 16 GPU(s)" in (big.waiting_for_capacity or ""), big
    assert out[("C", "c")].replicas == (7 if outranked else 8), _shares(out)  # (top's replica: 1 GPU)


# --- (4) step 3 passes over a lower victim while pods no claim covers wait (third_waits) ---------------------------

@MODES
def test_a_class_bare_pod_that_can_never_run_does_not_deny_another_namespaces_class_growth(across):
    """Pool 12: C's c (class 10) runs 8 1-GPU replicas and wants 16; V (class 0) runs 4; the tenant's 6-GPU class-10
    bare pod can never run (4 GPUs of lower pods to preempt). ``third_waits`` passes over V, but the preemption loop
    grants c what the scheduler gives it: c runs 12 from the first sync, V 0, the bare pod nothing."""
    cs = [running_claim("C", "c", 12, 8, class_priority=10, wanted=16), running_claim("V", "v", 12, 4)]
    for _, out, running, _, alone, _ in _runs(cs, across, 3, [("T", 6, 0, 1, 10)]):
        assert running[("C", "c")] == alone[("C", "c")] == 12, (_shares(out), running, alone)
        assert running[("bare", 0)] == 0, running


@MODES
@pytest.mark.parametrize("where", ["T", "X"])
def test_a_class_bare_pod_splits_no_cut_for_the_tenants_class_0_bare_pod(across, where):
    """Pool 8: V (class 0) runs 8 1-GPU replicas; the tenant's t0 (class 10) wants one 8-GPU replica; a class-10
    1-GPU bare pod waits in ``where`` and the tenant's class-0 7-GPU bare pod waits. V loses no more than with the
    scheduler alone and the class-0 pod gets nothing, sync after sync."""
    cs = [running_claim("V", "v", 8, 8), claim("T", "t0", 8, class_priority=10, gpus_per_replica=8, wanted=1)]
    for _, out, running, before, alone, _ in _runs(cs, across, 3, [(where, 1, 0, 1, 10), ("T", 7, 0, 1, 0)]):
        assert running[("V", "v")] >= min(before[("V", "v")], alone[("V", "v")]), (_shares(out), running, alone)
        assert running[("bare", 1)] == 0, running


@MODES
@pytest.mark.parametrize("unread", [False, True], ids=["read", "unread"])
@pytest.mark.parametrize("e_ns", ["X", "T"])
def test_a_pending_class_replica_instead_of_a_bare_pod_splits_nothing(across, unread, e_ns):
    """Pass 28's finding 5 with a claimed Pending class-10 4-GPU replica (at its floor, read or not) instead of the
    bare pod: V's a (class 0, two 4-GPU replicas) keeps what the scheduler alone keeps, the tenant's class-0 4-GPU
    bare pod gets nothing."""
    cs = [running_claim("V", "a", 8, 2, 4), claim("T", "t0", 8, class_priority=10, gpus_per_replica=8, wanted=1),
          pending_claim(e_ns, "e", 8, 1, 4, class_priority=10)]
    seen = (lambda c: _unread(c) if c.name == "e" else c) if unread else None
    _, out, running, _, alone, _ = next(_runs(cs, across, 1, [("T", 4, 0, 1, 0)], seen))
    assert running[("V", "a")] >= alone[("V", "a")] and running[("bare", 0)] == 0, (_shares(out), running, alone)


# --- (5) unread claims: replicas that wait for sure (surely_waiting, idle_below) ------------------------------------

def _two_unread(namespace: str) -> list[Claim]:
    """Pool 11: V's b1 runs one 8-GPU replica; ``namespace``'s b2 runs one 2-GPU replica and b3 has one Pending (both
    class 0); 1 GPU is free; the tenant's t3 (class 5) wants one 1-GPU replica."""
    return [running_claim("V", "b1", 11, 1, 8), running_claim(namespace, "b2", 11, 1, 2),
            pending_claim(namespace, "b3", 11, 1, 2, min_replicas=0), claim("T", "t3", 11, class_priority=5, wanted=1)]


def _cuts_of_b1(cs: list[Claim], unread: tuple[str, ...], across: bool) -> list[float]:
    seen = [_unread(c) if c.name in unread else c for c in cs]
    return [now for now in map(float, range(1000, 1040))
            if share(seen, now, None, across, {POOL: [Unclaimed("T", 0, 6)]})[0][("V", "b1")].replicas < 1]


@MODES
@pytest.mark.parametrize("unread", [(), ("b2",), ("b3",)], ids=["read", "b2-unread", "b3-unread"])
def test_control_one_unread_claim_beside_read_ones_makes_no_cut_of_another_namespace(across, unread):
    assert _cuts_of_b1(_two_unread("T"), unread, across) == []


# Fixed (was a strict xfail): FINDING 5 (medium; high effect, needs two unread claims): surely_waiting judges each unread claim alone against the GPUs the read pods leave, so two unread 2-GPU claims beside 3 such GPUs count nothing as waiting; the pool reads a deficit of 1 although a GPU is free, and the tenant's class-5 t3 cuts V's 8-GPU replica for its 1 GPU (18 of 40 draws); its 6-GPU bare pod takes the rest (the scheduler alone places t3 on the free GPU). Fix: judge the unread claims together (at most pool - read_running of their GPUs may run, the highest pod priority first).
@MODES
@pytest.mark.parametrize("namespace", ["T", "V", "W"])
def test_two_unread_claims_do_not_make_a_class_cut_another_namespace_for_a_free_gpu(across, namespace):
    cs = _two_unread(namespace)
    cut = _cuts_of_b1(cs, ("b2", "b3"), across)
    if cut:  # what the cut does, placed by the model: the tenant's bare pod runs on V's GPUs
        out, _ = share([_unread(c) if c.name in ("b2", "b3") else c for c in cs], cut[0], None, across,
                       {POOL: [Unclaimed("T", 0, 6)]})
        running = _scheduled(cs, out, [("T", 6, 0, 1, 0)])
        assert running[("bare", 0)] == 0, (_shares(out), running)
    assert cut == []


@MODES
def test_an_unread_pending_replica_counted_as_room_and_cut_again_grants_nothing_beyond_the_pool(across):
    """Pool 8: X (class 5, another namespace) runs 6; the tenant's d (class 0) has one Pending 4-GPU replica, not read
    (it waits for sure: 2 GPUs are left beside X); the tenant's c (class 5) wants 4. Its room counts d's GPUs, and
    cutting d (counted as running) frees them again, but c is granted only the 2 GPUs X leaves."""
    cs = [running_claim("X", "x", 8, 6, class_priority=5), _unread(pending_claim("T", "d", 8, 1, 4)),
          claim("T", "c", 8, class_priority=5, wanted=4)]
    for now in map(float, range(1000, 1010)):
        out, _ = share(cs, now, None, across, {})
        assert _shares(out)[("T", "c")] <= 2 and _shares(out)[("X", "x")] == 6, _shares(out)


# --- (6) step 3's preemption loop and step 4's reservation ----------------------------------------------------------

@MODES
def test_the_phantom_of_pass_28_with_the_lower_pending_replica_unread_grants_nothing_beyond_the_pool(across):
    cs = [_unread(c) if c.name == "a" else c for c in _phantom(3)]
    out, _ = share(cs, 1000.0, None, across, {})
    assert _shares(out)[("h", "H")] == 2 and _shares(out)[("t", "t0")] <= 2, _shares(out)


def _reserved(g: int, unread: bool) -> tuple[list[Claim], PoolState]:
    """Pool 8: A's H (class 10, 8-GPU) held 8 GPUs 60 s ago and wants none; the tenant's d (class 0) has 8 // ``g``
    Pending ``g``-GPU replicas at its floor (``unread``: not read); the tenant's c (class 5, 1-GPU) wants 8."""
    d = pending_claim("T", "d", 8, 8 // g, g)
    cs = [claim("A", "H", 8, class_priority=10, gpus_per_replica=8, held=0), _unread(d) if unread else d,
          claim("T", "c", 8, class_priority=5, wanted=8)]
    return cs, PoolState(granted={(POOL, ("A", "H")): [(1000.0, 8)]})


@MODES
@pytest.mark.parametrize("g", [1, 2, 4, 8])
def test_the_reservation_holds_against_read_lower_pending_replicas_of_every_size(across, g):
    cs, state = _reserved(g, False)
    assert _shares(share(cs, 1060.0, state, across, {})[0])[("T", "c")] == 0
    assert _shares(share(cs, 1000.0 + HOLD_S + 1, state, across, {})[0])[("T", "c")] == 8


# Fixed (was a strict xfail): FINDING 6 (low, churn): an unread lower claim's replicas count as running in step 3's preemption loop, so the tenant's unread class-0 Pending floor opens the 8 GPUs step 4 keeps for A's class-10 H within HOLD_S: the tenant's class-5 c is granted 8 (read: 0). Breaks 'counts each way as is safe for the others'. Fix: count an unread lower claim's replicas as waiting for kept_free and the preemption loop.
@MODES
@pytest.mark.parametrize("g", [1, 4, 8])
def test_an_unread_lower_claim_does_not_open_the_reservation(across, g):
    cs, state = _reserved(g, True)
    assert _shares(share(cs, 1060.0, state, across, {})[0])[("T", "c")] == 0


# --- (7) V's own class clearing its sibling's Pending replica (judged) ---------------------------------------------

@MODES
def test_vs_own_class_clearing_its_siblings_pending_replica_gives_the_tenant_no_more_than_without_it(across):
    """Pool 4: V's t0 (class 0) runs one 4-GPU replica, its a2 (class 10, priority 5) wants one 1-GPU replica and
    (``t4``) its t4 (class 10, priority 0) has one Pending 4-GPU replica; the tenant's three class-0 1-GPU bare pods
    wait. Step 2 cuts t0 for t4, step 3 clears t4 for a2 (V's own numbers) and 3 GPUs go to the tenant; the scheduler
    alone would run t4. Judged not a finding: without t4 the same reshuffle (a2 cuts t0 for 1 GPU) gives the tenant
    the same 3 GPUs, as the scheduler alone does; V's numbers say a2 before t4."""
    got = {}
    for t4 in (True, False):
        cs = [running_claim("V", "t0", 4, 1, 4), claim("V", "a2", 4, class_priority=10, priority=5, wanted=1)]
        if t4:
            cs.append(pending_claim("V", "t4", 4, 1, 4, class_priority=10, min_replicas=0))
        _, out, running, _, alone, _ = next(_runs(cs, across, 1, [("T", 1, 0, 3, 0)]))
        got[t4] = running[("bare", 0)]
        if not t4:
            assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)
    assert got[True] <= got[False], got


# --- (8) fuzz -----------------------------------------------------------------------------------------------------

def _fuzz_pool(rng: random.Random, pools: tuple[int, ...] = (4, 6, 8, 11, 12, 16), most: int = 6,
               namespaces: str = "tabc", classes: tuple = (None, None, 5, 10), bare_classes: tuple = (0, 0, 5, 10),
               bare_namespaces: str = "tabcx"):
    """2 to ``most`` backends (the first the tenant's) of ``namespaces``, 1/2/4/8 GPUs a replica, a fifth with fewer
    running than fit, pod priorities of ``classes``; bare pods of ``bare_classes`` in up to three of
    ``bare_namespaces``. Pass 30 reuses it with more levels."""
    pool = rng.choice(pools)
    cs, used = [], 0
    for i in range(rng.randint(2, most)):
        g = min(pool, rng.choice([1, 2, 4, 8]))
        cur = rng.randint(0, 3)
        bound = min(cur, max(0, (pool - used) // g))
        if rng.random() < 0.2:
            bound = rng.randint(0, bound)
        used += bound * g
        minimum = rng.choice([0, 0, 1, cur])
        ns = rng.choice(namespaces) if i else "t"
        cs.append(claim(ns, f"{ns}{i}", pool, priority=rng.choice([0, 1, 5, 10**6]), current=cur, held=cur,
                        bound=bound, wanted=max(cur, minimum) + rng.randint(0, 2), min_replicas=minimum,
                        gpus_per_replica=g, class_priority=rng.choice(classes)))
    bare = [(ns, rng.choice([1, 2, 4, 8]), 0, rng.randint(1, 2), rng.choice(bare_classes))
            for ns in rng.sample(bare_namespaces, rng.randint(0, 3))]
    return cs, pool, bare


def _preempted(share_) -> int:
    return sum(int(n) for n in re.findall(r"(\d+) replica", share_.preempted_by or ""))


def _fuzz(seed: int, trials: int, unread_p: float, bare_p: float, pool_of=_fuzz_pool) -> None:
    rng = random.Random(seed)
    for trial in range(trials):
        across = trial % 2 == 0
        cs, pool, bare = pool_of(rng)
        if rng.random() > bare_p:
            bare = []
        unread = {c.key for c in cs if rng.random() < unread_p}

        def seen(c, unread=unread):
            return _unread(c) if c.key in unread else c
        shares, bare_ran = [], False
        for claims, out, running, before, alone, us in _runs(cs, across, 6, bare, seen):
            ctx = (seed, trial, across, unread, claims, us, _shares(out), running, before, alone)
            shares.append(_shares(out))
            bare_ran = bare_ran or any(running[("bare", i)] for i in range(len(us)))
            for v in claims:
                # (b) floors are never cut in a share
                assert out[v.key].replicas >= min(v.current, v.min_replicas), ctx
                # (a) a replica it runs, holds and wants is cut only where something outranks it
                if out[v.key].replicas < min(v.bound or 0, v.wanted, v.current):
                    assert any(_outranks(t, v, across) for t in claims if t.key != v.key), ctx
            # (e) default mode: bare pods of namespaces that lost no running replica gain no more than the scheduler
            # alone gives, or the free GPUs and what the model preempted
            if not across:
                assert bare_gain_within_scheduler_alone(pool, claims, out, running, before, alone, us), ctx
            # (c) a grower holds no more than the pool beside a higher pod priority and its namespace's equals
            # (replicas its status says were preempted excused: their grant stays while their pods wait)
            if not any(before[("bare", i)] for i in range(len(us))):
                beyond = grower_beyond_pool(pool, claims, out, lambda d: _kept(seen(d)), _preempted,  # noqa: B023
                                            [(p, g) for _, g, _, w, p in us for _ in range(w)])
                assert beyond is None, (beyond, ctx)
        # (d) the shares settle where the reads are right and no bare pod ran
        assert unread or bare_ran or shares[-1] == shares[-2], (seed, trial, across, cs, bare, shares[-3:])


@pytest.mark.parametrize(("seed", "unread_p", "bare_p"), [(291, 0.0, 0.0), (292, 0.0, 1.0), (293, 0.3, 1.0),
                                                          (294, 0.3, 0.0)])
def test_fuzz_invariants_hold_through_the_scheduler_model(seed, unread_p, bare_p):
    _fuzz(seed, 200, unread_p, bare_p)


def _tenant_pool(rng: random.Random):
    """Two backends of the tenant t (class 5 or none), 1 to 5 of other namespaces (classes 5/10 or none), and the
    tenant's bare pods of 1/2/4 GPUs (pod priority 0 or 5)."""
    pool = rng.choice([4, 6, 8, 9, 11, 12, 16])
    cs, used = [], 0
    for i in range(rng.randint(3, 7)):
        g = min(pool, rng.choice([1, 1, 2, 4, 8]))
        cur = rng.randint(0, 3)
        bound = min(cur, max(0, (pool - used) // g))
        if rng.random() < 0.3:
            bound = rng.randint(0, bound)
        used += bound * g
        minimum = rng.choice([0, 0, 1, cur])
        ns = "t" if i < 2 else rng.choice("vwx")
        cp = rng.choice([None, 5]) if ns == "t" else rng.choice([None, None, 5, 10])
        cs.append(claim(ns, f"{ns}{i}", pool, priority=rng.choice([0, 1, 5]), current=cur, held=cur, bound=bound,
                        wanted=max(cur, minimum) + rng.randint(0, 2), min_replicas=minimum, gpus_per_replica=g,
                        class_priority=cp))
    bare = [("t", rng.choice([1, 2, 4]), 0, rng.randint(1, 3), rng.choice([0, 0, 5]))] if rng.random() < 0.7 else []
    return cs, pool, bare


# Fixed (was a strict xfail): FINDING 4's effect, found by this fuzz (seed 1, trial 63, pool 16, default mode): v's class-10 8-GPU backend at a floor of 3 runs 1 and has 2 Pending that can never be completed (7 GPUs of lower pods); the deficit they make stops w2's and v3's class-10 growth, which the scheduler would place by preempting class-0 pods, and the tenant's class-5 bare pods run on those GPUs instead (tenant 3 -> 6 GPUs; scheduler alone: 0).
# Fixed (was a strict xfail): FINDING 3's effect, found by this fuzz once finding 4 was fixed (seed 1, trial 178, pool 9, default mode): x's class-10 backend at its floor of 3 has 3 Pending 1-GPU replicas beside 3 idle GPUs; step 2 does not count idle GPUs and cuts v2's running class-5 4-GPU replica for them, and the tenant's class-0 4-GPU bare pod runs on it (tenant 2 -> 6 GPUs; scheduler alone: 2, free before: 3). Fixed with finding 3 (2026-12-07); trial 233 (a tie between equals the scheduler breaks by creation time) is read with both orders.
def test_fuzz_the_tenant_runs_no_more_than_the_scheduler_alone_or_the_free_gpus_give_it():
    """Default mode, 3 syncs, 300 pools: the tenant's GPUs (its backends' and its bare pods') after a sync are at most
    what the scheduler alone gives it, or what it ran plus the GPUs free before, unless no other namespace's backend
    runs less than with the scheduler alone (trial 170: the scheduler alone evicts the tenant's 1-GPU floor replica,
    the pool keeps it on what a 4-GPU cut leaves over, and the backend cut loses the same replica either way). The
    scheduler alone places pods of one pod priority in the order they were made, which the pool cannot know: it is
    read with the backends' new pods made in both orders (trial 233: x3's two class-10 pods before w2's 8-GPU one
    leave 2 GPUs of a 4-GPU cut over, and the tenant's class-5 pods take them, with the pool as with the scheduler)."""
    rng = random.Random(1)
    for trial in range(300):
        cs, pool, bare = _tenant_pool(rng)
        for claims, out, running, before, alone, us in _runs(cs, False, 3, bare):
            def of_tenant(ran, claims=claims, us=us):
                return sum(ran[c.key] * c.gpus_per_replica for c in claims if c.namespace == "t") + sum(
                    ran[("bare", i)] * b[1] for i, b in enumerate(us))
            at_wanted = {c.key: dataclasses.replace(out[c.key], replicas=max(c.wanted, c.min_replicas)) for c in claims}
            orders = [alone, _scheduled(claims[::-1], at_wanted, us)]
            free_before = pool - sum(before[c.key] * c.gpus_per_replica for c in claims) - sum(
                before[("bare", i)] * b[1] for i, b in enumerate(us))
            assert any(of_tenant(running) <= max(of_tenant(ran), of_tenant(before) + max(0, free_before))
                       or not any(running[c.key] < ran[c.key] for c in claims if c.namespace != "t")
                       for ran in orders), (trial, claims, us, _shares(out), running, before, orders)
