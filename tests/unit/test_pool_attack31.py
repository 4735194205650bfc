"""Thirty-first attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did
not write the code, as a tenant (namespace T) who may create LLMBackends, bare pods and pods of the PriorityClasses
it may use, in its own namespace. Aimed at the newest code, c787fdb: ``_never_placed`` (Pending replicas nothing
could place hold nothing) and what reads it (``contested`` through ``never_gpus``, ``older_waiting``, the share's
"they stay while nothing outranks them, else go to the floor"). Shares are fed back sync after sync through pass 26's
kube-scheduler model (``_runs``); "the scheduler alone" is the same model with every backend at its wanted replicas.

PROBES: 7 test functions, 21 cases (13 pass, 8 strict xfail; all pass since both findings were fixed): 5 functions hold (3 of them controls for the
findings), 2 are the findings (6 cases of finding 1, 2 of finding 2).

FINDING 1 (high; growth frozen for good, and with a second class the tenant's bare pods take what the frozen backend
would have got; both modes): ``_never_placed`` counts a running equal's replicas as freeable (only its floor fixed)
whenever ANY backend that wants replicas outranks it (``outranked_by_a_taker``), not only where something would cut
it for the Pending replica in question. A sibling that is satisfied (it wants 1 and holds 1), or a 0-GPU backend,
is such an "outranker": the equal's GPUs then count as room for another namespace's Pending replica that nothing will
ever cut for, so that replica is held again, its GPUs make the pool's deficit, and pass 29's finding 4 is back. Pool
17: C's c (class 10) runs 4 1-GPU replicas and wants 8; the tenant's big (class 10, 8-GPU) runs 1 and has a second
Pending at its floor of 2; X (class 0) runs 4; C also has c2 (class 10, priority 5) running its 1 wanted replica. c
stays at 4 sync after sync; the scheduler alone preempts X for c (c 8). With the tenant's four class-5 1-GPU bare pods,
they take X's 4 GPUs instead (tenant 0 -> 4 GPUs; scheduler alone: 0). The same without C's help: pool 21, the
tenant adds its own satisfied class-10 ``top`` (priority 5, 1 or 0 GPUs a replica) and ``filler`` (four running 1-GPU
replicas): c stays 4 (bare pods 4, alone 0/1); across namespaces the tenant's ``top`` of priority 10**6 alone does it.
Controls: without big's Pending replica c gets 8 in every variant; with no outranking sibling pass 29's fix holds. Fix:
in ``_never_placed`` count a same-priority running backend as freeable (above its floor) for a Pending replica only if
that replica's own backend outranks it (the pool cuts an equal only for an outranker, and the kube-scheduler never
preempts an equal), and let a backend count as an outranker only if it has GPUs a replica and is short.

FINDING 2 (high by this pass's rubric: growth frozen for good, no tenant gain; both modes): ``contested`` counts a
third namespace's never-placed Pending replicas (``never_gpus``) as pods that take what a cut frees, but they are
never placed precisely because no cut the pool makes can complete them (the outranked equals were counted at their
floors already). Pool 8: A's hi (priority 5) runs 2 1-GPU replicas and wants 6, A's lo (priority 0) runs 4; the
tenant's t has one Pending 8-GPU replica at its floor of 1. hi takes the 2 free GPUs and never cuts its own lo (hi 4
for good); without t, hi gets 6 (lo 2). The 8-GPU pod can never fit the 4 GPUs lo could free beside hi's. Fix: count
``never_gpus`` in ``contested`` only where what the cut frees beside the GPUs nothing holds could complete such a
replica (at most the pool less what ``_never_placed`` took as fixed), or not at all.

HELD: the tenant's running equal-priority pods filling the pool do not make another namespace's Pending replicas go in
default mode (nothing outranks them: they stay, first come first served); controls of both findings; a fuzz of pools
with 8-GPU Pending replicas at floors, satisfied siblings, 0-GPU backends, classes 5/10, numbers up to 10**6, bare
pods, 0 or 20 % unread claims, both modes, 6 syncs, 150 pools per seed, with pass 29's invariants ((a) a running,
held, wanted replica is cut only where something outranks it, (b) floors, (c) no grower beyond the pool, (d) shares
settle, (e) bare pods gain no more than the scheduler alone) held for 2 seeds. Those invariants do not see finding 1
or 2 (nothing is cut; a backend is denied), which is why the targeted probes found them and the fuzz did not.

SUSPECTED, NOT SHOWN: across namespaces a satisfied backend of a higher number (the tenant's ``fill`` of priority
10**6) makes another namespace's never-placed Pending replicas go to their floor, cut for nobody short (documented
rule, and the number outranks them there, so not reported); step 2's ``feeds_others`` counts as freeable only lower
pod priorities' running GPUs, not same-priority ones its waiting replica outranks (across mode, or a sibling), so an
outranking Pending replica is never completed by step 2 either; ``may_run``, ``kept_free`` and ``after_siblings`` were
read but not probed in the time given. Nothing checked on a real cluster (one bin of GPUs, not nodes).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): only a backend short of running what it wants, with GPUs a replica, outranks in
``_never_placed``; ``contested`` no longer counts replicas set apart (every GPU a cut could free them is counted in
their room already); GPUs a backend grows by go to its replicas set apart first; a sync with a backend's pods not read
keeps the last read's judgement where it set more apart (pass 17's unread fuzz). The reviewer's probe (4) found a
third: a sibling short only by a replica nothing could place outranked; outrankers are now only backends a replica
could be placed for."""

from __future__ import annotations

import random

import pytest
import test_pool_attack29 as pass29
from test_pool_attack26 import _runs, _shares
from test_pool_attack28 import claim, running_claim

MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
BARE = [("T", 1, 0, 4, 5)]  # the tenant's four class-5 1-GPU bare pods


# --- (1) _never_placed: an outranker that is not short makes an equal's GPUs count as room ---------------------------

def _frozen(sibling: str, big_pending: int, top_gpus: int = 1):
    """C's c (class 10) runs 4 1-GPU replicas, wants 8; the tenant's big (class 10, 8-GPU) runs 1 and has
    ``big_pending`` more Pending at its floor; X (class 0) runs 4. ``sibling``: "C" (C's own c2, priority 5, holds its
    1 wanted replica; pool 17), "tenant" (the tenant's top, priority 5, holds its 1 wanted replica of ``top_gpus``
    GPUs, and filler, four running 1-GPU replicas; pool 21), "number" (the tenant's top of priority 10**6; pool 17)."""
    pool = 21 if sibling == "tenant" else 17
    cs = [running_claim("C", "c", pool, 4, class_priority=10, wanted=8),
          claim("T", "big", pool, class_priority=10, gpus_per_replica=8, current=1 + big_pending,
                held=1 + big_pending, bound=1, wanted=1 + big_pending, min_replicas=1 + big_pending),
          running_claim("X", "x", pool, 4)]
    if sibling == "C":
        cs.append(running_claim("C", "c2", pool, 1, class_priority=10, priority=5))
    elif sibling == "tenant":
        cs.append(running_claim("T", "filler", pool, 4, class_priority=10))
        cs.append(running_claim("T", "top", pool, 1, top_gpus, class_priority=10, priority=5))
    elif sibling == "number":
        cs.append(running_claim("T", "top", pool, 1, top_gpus, class_priority=10, priority=10**6))
    return cs


VARIANTS = [("C", False, 1), ("C", True, 1), ("tenant", False, 1), ("tenant", False, 0), ("number", True, 1),
            ("number", True, 0)]
IDS = ["c-sibling-default", "c-sibling-across", "tenant-sibling", "tenant-0gpu-sibling", "number", "0gpu-number"]


@pytest.mark.parametrize(("sibling", "across", "top_gpus"), VARIANTS, ids=IDS)
def test_control_without_the_pending_replica_c_preempts_x_as_the_scheduler_alone(sibling, across, top_gpus):
    for _, out, running, _, alone, _ in _runs(_frozen(sibling, 0, top_gpus), across, 3, BARE):
        assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)
        assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)


@MODES
def test_control_with_no_outranking_sibling_the_pending_replica_is_set_apart(across):
    """Pass 29's fix as it stands: nothing outranks c or big, big's Pending 8-GPU replica holds nothing, c grows."""
    for _, out, running, _, alone, _ in _runs(_frozen("", 1), across, 3, BARE):
        assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)


# Fixed (was a strict xfail for every case): FINDING 1 (high): _never_placed counts a running equal as freeable (floor only) whenever any backend wanting replicas outranks it, even a satisfied or 0-GPU one, so a Pending replica nothing will ever cut for counts as placeable and its GPUs make the deficit again (pass 29 finding 4 back). Pool 17: C's c (class 10) runs 4, wants 8; the tenant's big (class 10, 8-GPU) runs 1 + 1 Pending at its floor; X (class 0) runs 4; C's satisfied c2 (priority 5), or the tenant's own satisfied top + filler (pool 21), or across namespaces its top of priority 10**6: c stays 4 for good (scheduler alone: 8) and the tenant's class-5 bare pods take X's 4 GPUs (alone: 0 or 1). Fix: count an equal as freeable only for a Pending replica whose own backend outranks it, and only short GPU backends as outrankers.


@pytest.mark.parametrize(("sibling", "across", "top_gpus"), VARIANTS, ids=IDS)
def test_a_pending_replica_nothing_will_cut_for_does_not_freeze_an_equals_growth(sibling, across, top_gpus):
    for _, out, running, _, alone, _ in _runs(_frozen(sibling, 1, top_gpus), across, 3, BARE):
        assert running[("T", "big")] == alone[("T", "big")] == 1, (running, alone)
        assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)
        assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)


# --- (2) contested: a never-placed replica of a third namespace stops a namespace's own reshuffle --------------------

def _reshuffle(tenant: bool):
    """Pool 8: A's hi (priority 5) runs 2 1-GPU replicas, wants 6; A's lo (priority 0) runs 4; ``tenant``: the
    tenant's t has one Pending 8-GPU replica at its floor (it can never fit the 6 GPUs hi's pods leave)."""
    cs = [running_claim("A", "hi", 8, 2, priority=5, wanted=6), running_claim("A", "lo", 8, 4)]
    if tenant:
        cs.append(claim("T", "t", 8, gpus_per_replica=8, current=1, held=1, bound=0, wanted=1, min_replicas=1))
    return cs


@MODES
def test_control_without_the_tenants_pending_replica_hi_takes_los_replicas(across):
    for _, out, running, _, _, _ in _runs(_reshuffle(False), across, 3):
        assert running[("A", "hi")] == 6 and running[("A", "lo")] == 2, (_shares(out), running)


@MODES
# Fixed (was a strict xfail): FINDING 2 (high: growth frozen for good, no tenant gain): contested counts a third namespace's never-placed Pending replicas (never_gpus) as taking what a cut frees, though no cut the pool makes can complete them. Pool 8: A's hi (priority 5) runs 2, wants 6; A's lo runs 4; the tenant's t has one Pending 8-GPU replica at its floor. hi takes the 2 free GPUs and never cuts lo (hi 4 for good; without t: 6). Fix: count never_gpus in contested only where what the cut frees (beside the GPUs nothing holds) could complete such a replica, or not at all.
def test_a_replica_that_can_never_be_placed_does_not_stop_a_namespaces_own_reshuffle(across):
    for _, out, running, _, _, _ in _runs(_reshuffle(True), across, 3):
        assert running[("T", "t")] == 0, running
        assert running[("A", "hi")] == 6 and running[("A", "lo")] == 2, (_shares(out), running)


# --- (3) held: a tenant's equal pods filling the pool do not make another namespace's Pending replicas go -----------

def test_a_tenants_equal_pods_filling_the_pool_do_not_cut_another_namespaces_pending_replicas():
    """Default mode, pool 8: the tenant's fill (priority 10**6) runs 6 1-GPU replicas it wants; V's v has two Pending
    4-GPU replicas (floor 0). They can never be placed beside fill's pods, but nothing outranks V: they stay (first come
    first served) sync after sync."""
    cs = [running_claim("T", "fill", 8, 6, priority=10**6),
          claim("V", "v", 8, gpus_per_replica=4, current=2, held=2, bound=0, wanted=2)]
    for _, out, _running, _, _, _ in _runs(cs, False, 3):
        assert _shares(out)[("V", "v")] == 2 and _shares(out)[("T", "fill")] == 6, _shares(out)
        assert out[("V", "v")].preempted_by is None, out[("V", "v")]


# --- (4) fuzz: pass 29's invariants with never-placed replicas, satisfied siblings and 0-GPU backends -----------------

def _fuzz_pool(rng: random.Random):
    """Pools of 8 to 17 GPUs, 3 to 6 backends (half of them the tenant's), 1-GPU backends sometimes 0-GPU, half of the
    backends with Pending replicas, floors at the current count often, a fifth satisfied (wanting what they hold or 1),
    classes 5/10, numbers up to 10**6, bare pods of classes 0/5."""
    pool = rng.choice([8, 9, 12, 16, 17])
    cs, used = [], 0
    for i in range(rng.randint(3, 6)):
        g = min(pool, rng.choice([1, 1, 2, 4, 8]))
        cur = rng.randint(0, 3)
        bound = min(cur, max(0, (pool - used) // g))
        if rng.random() < 0.5:
            bound = rng.randint(0, bound)
        used += bound * g
        minimum = rng.choice([0, 1, cur, cur])
        ns = rng.choice("ttab") if i else "t"
        wanted = max(cur, minimum) + rng.choice([0, 0, 1, 2]) if rng.random() < 0.8 else max(minimum, min(cur, 1))
        cs.append(claim(ns, f"{ns}{i}", pool, priority=rng.choice([0, 5, 10**6]), current=cur, held=cur, bound=bound,
                        wanted=wanted, min_replicas=minimum, gpus_per_replica=rng.choice([1, 1, 0]) if g == 1 else g,
                        class_priority=rng.choice([None, 5, 10])))
    bare = [(ns, rng.choice([1, 2, 4]), 0, rng.randint(1, 2), rng.choice([0, 5]))
            for ns in rng.sample("tabx", rng.randint(0, 2))]
    return cs, pool, bare


@pytest.mark.parametrize(("seed", "unread_p", "bare_p"), [(311, 0.0, 1.0), (314, 0.2, 0.0)])
def test_fuzz_pass_29s_invariants_hold_with_never_placed_replicas_and_satisfied_siblings(seed, unread_p, bare_p):
    pass29._fuzz(seed, 150, unread_p, bare_p, _fuzz_pool)


# --- (4) the reviewer's probe after the fix: a sibling short only by a replica nothing could place ------------------

@MODES
# Fixed (was a strict xfail): FINDING 3 (high; found by the reviewer after fixing findings 1-2): a backend short only by a replica nothing could place still counts as an outranker in _never_placed. Pool 21, finding 1's tenant variant with the tenant's top (class 10, priority 5) holding one Pending 16-GPU replica it can never run: filler's 4 GPUs count as room for big's Pending 8-GPU replica, which then holds GPUs and makes the deficit; no holder outranks filler, so nothing is cut and c stays 4 for good (scheduler alone: 8), the tenant's class-5 bare pods taking X's GPUs (4; alone 1). Fix: count as outrankers only backends whose shortness some replica could fill (a Pending replica placeable, or growth of a size that fits), recomputing once the replicas set apart are known.
def test_a_sibling_short_only_by_a_replica_nothing_could_place_outranks_nobody(across):
    cs = [c for c in _frozen("tenant", 1) if c.name != "top"]
    cs.append(claim("T", "top", 21, class_priority=10, priority=5, gpus_per_replica=16, current=1, held=1, bound=0,
                    wanted=1, min_replicas=1))
    for _, out, running, _, alone, _ in _runs(cs, across, 3, BARE):
        assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)
