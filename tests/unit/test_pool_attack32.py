"""Thirty-second attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did
not write the code, as a tenant (namespace T) who may create LLMBackends, bare pods and pods of the PriorityClasses it
may use, in its own namespace, and as plain bad luck (pod lists that fail). Aimed at the newest code, b0651e6 and
79c4e93: ``_never_placed``'s outrankers ("takers": short, GPUs a replica, a replica of theirs could be placed), the
"fillable" rounds (at most 4), ``PoolState.never_placed`` (a sync with a backend not read keeps the last read's
judgement) and the no-drop rule. Shares are fed back sync after sync through pass 26's kube-scheduler model
(``_runs``); "the scheduler alone" is the same model with every backend at its wanted replicas.

PROBES: 11 test functions, 26 cases (14 pass, 12 strict xfail): 7 functions hold (4 of them controls for the
findings), 4 are the findings.

Findings 1, 2 and 4 share one root: ``_never_placed`` counts an equal's running GPUs above its floor as room for ANY
Pending replica of that pod priority as soon as SOME taker outranks the equal, however little that taker needs and
whether or not it will ever get it. Each finding is a way to keep such a taker in the set while nothing the pool does
ever frees those GPUs for the Pending replica; the replica then holds GPUs, its deficit "is covered first", and an
equal of another namespace never grows (pass 29's finding 4 back again). One fix closes all three (pass 31's first
suggestion): count an equal as freeable for a Pending replica only where that replica's own backend outranks it (the
pool cuts an equal only for an outranker, and the kube-scheduler never preempts one), and in any case at most the GPUs
the outrankers are short of. (Checked in a scratch run, not committed: ``_never_placed`` monkeypatched to count an
equal as freeable only where the Pending replica's own backend outranks it, default mode, passes findings 1, 2 and 4's
default cases and pass 31's default tests; finding 3 needs its own fix.)

FINDING 1 (high: growth frozen for good; both modes; the tenant needs one class and 10 backends): the "fillable"
rounds stop after 4 while the taker set still shrinks. Each round can remove exactly one taker: T's t1..t4 (class 5,
priorities 8, 6, 4, 2; no replica, each wants one of 7, 6, 5, 4 GPUs) interleaved with T's v1..v4 (priorities 7, 5, 3,
1; one running 1-GPU replica each, floor 0): with t_k gone, v_k counts as fixed and t_(k+1) no longer fits. After
round 4 ``never`` is the one computed while t4 still outranked v4, so T's x (class 5, priority 0, one Pending 3-GPU
replica at its floor) counts v4's GPU as room and is judged placeable (truly only V's class-0 L's 2 GPUs are: T's S,
priority 100, runs 1 and is fixed). Pool 7 (S 1, v 4, L 2); W (class 5, another namespace) wants two 1-GPU replicas. x
holds 3 GPUs of a full pool, W stays at 0 sync after sync (status: "held by ... 10 GPU(s)" of a pool of 7); the
scheduler alone preempts L for W (W 2). With 3 links (pool 6, x of 3 GPUs) the 4th round sets x apart and W gets 2
(control); 5 links freeze too. Fix: iterate to the fixpoint (it only shrinks: at most one round a taker), or the root
fix above.

FINDING 2 (high: growth frozen for good, and the tenant's bare pods take what the frozen backend would have got; both
modes): a backend that can never take a GPU is still a taker. Takers are ``wanted > runs`` with GPUs a replica and
room for one; an ``unplaceable`` backend (its pods fit no node of the pool: a memory request no node has, which the
tenant writes) or one whose namespace's quota admits nothing more (``quota``) claims nothing in step 3 (``wants``), so
it stays short for good and outranks for good. Pass 31's pool 21: C's c (class 10) runs 4 of 8 wanted; T's big (class
10, 8-GPU) runs 1 and has 1 Pending at its floor; X (class 0) runs 4; T's filler (class 10) runs 4; T's top (class 10,
priority 5, 1 GPU) wants 1 and is unplaceable (or quota 0). filler's 4 GPUs count as room for big's Pending replica,
which then holds 8 GPUs: c stays at 4 (scheduler alone 8) and T's four class-5 bare pods take X's 4 GPUs (the
scheduler alone, top's pod never running, gives them 1). Control: the same top without big's Pending replica: c 8. The
docs' rule broken: "a backend that ... is short only by replicas that nothing could place ... outranks nobody here".
Fix: a taker also needs ``wants > grant`` as step 3 reads it (not unplaceable, not idle, quota room), or the root fix.

FINDING 3 (high: growth frozen for good, the tenant's bare pods gain; both modes; plain bad luck or a tenant): step 2
never cuts an equal for a Pending replica that outranks it, but ``_never_placed`` counts that equal as freeable. Pool
5: T's hi (class 5, priority 5) has one Pending 4-GPU replica at its floor; T's lo (class 5, priority 0) runs two
1-GPU replicas; V's L (class 0) runs 1; 2 GPUs are free; W (class 5) wants two 1-GPU replicas. hi is a short taker
that outranks lo, so lo counts at its floor: room 5, hi's replica judged placeable, holding 4 GPUs. Step 2's
``feeds_others`` counts as freeable only running GPUs of lower pod priorities (L's 1; lo is of hi's own pod priority):
0 + 1 < 4, "feeds others", so lo is never cut (nor is it in step 3: hi is not short of its grant). hi waits for good,
its deficit stops W (0 for good; scheduler alone 2) and T's class-0 bare pods take the 2 free GPUs. Across namespaces
lo may be another namespace's (priority 0 under hi's 5). Control: default mode with lo in a third namespace, W 2. Pass
31 suspected this (step 2's ``feeds_others``) and did not show it. Fix: in ``feeds_others`` count as freeable the
running GPUs above their floors of the backends of the waiting replica's pod priority that it outranks (what
``_never_placed`` counts), so step 2 makes the documented reshuffle; or count them in ``_never_placed`` only where
step 2 would cut them.

FINDING 4 (high: growth frozen for good, the tenant's bare pods gain; default mode): a sibling short of a replica that
COULD be placed is a taker, and the deficit its outranking causes is what stops its own growth, so it stays short for
good. Pass 31's pool 21 (finding 1's tenant variant) with top running 1 of 2 wanted (1 GPU; the tenant sets
minReplicas 2): filler's 4 GPUs count as room for big's Pending 8-GPU replica, big holds 8, the pool is 8 over, top
never grows and c stays at 4 (scheduler alone 8) while T's bare pods take X's 4 GPUs (alone 0). Control: top wanting
the 1 it runs (pass 31's fix): c 8. Across namespaces top's number lets step 3 cut filler for it on the first sync and
c settles where the scheduler alone puts it (held). Fix: the root fix (top needs 1 GPU of filler's 4; big's own
backend outranks nobody).

HELD: across namespaces finding 4's short top grows and c settles at the scheduler alone's 7; a tenant's backend whose
pods are never read (a new backend each sync, a list that fails), satisfied, beside pass 31's pool 21: c still grows
to 8 (the no-drop rule and the memory change nothing there); an unread backend whose set-apart replica the scheduler
placed while it was unread (the higher pods it waited on finished) keeps its share, and no other backend is granted
the GPUs the memory still counts as nobody's (both modes); the controls above.

SUSPECTED, NOT SHOWN: ``PoolState.never_placed`` for a backend not read is kept for as long as it stays unread
(``waits`` is then its whole ``current``), so its replicas placed meanwhile count as holding nothing; the held probe
found its own growth re-granting them first, but an equal of another namespace served first in turn could be granted
GPUs that run the unread backend's pods (a grant beyond the pool until the next read: low). The no-drop rule keeps
another namespace's set-apart replicas while any backend is unread; a tenant that keeps one unread (a new LLMBackend
each sync) suspends "go down to minReplicas once a short backend outranks them" for everyone, which matters only if a
kept Pending pod is later placed ahead of the outranker's growth (medium at most, not probed). "Idle" takers (replicas
whose pods are unschedulable for another reason than GPUs) are finding 2's third variant, not modelled (the scheduler
model would run their pods). Nothing checked on a real cluster (one bin of GPUs, not nodes).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): the outrankers in ``_never_placed`` are read to the end (a round a taker at most:
finding 1); a taker is a backend that could still claim (``pool._short``: not unplaceable, no idle replicas, quota
room: finding 2); an equal's GPUs count as freeable only for takers of its own pod priority that outrank it, and no
more than those takers are short of (finding 4, and with it 1 and 2). Finding 3 is fixed by pass 29's finding 3 fix
(step 2 hands the waiting replica the GPUs no pod holds, so it completes hi by cutting lo) and by the cap (hi's
shortage frees lo's GPUs for it only). Pass 33 then found the cap per pod priority too loose (a taker's shortage
lifted equals it does not outrank): an equal's GPUs now count only where the Pending replica's own backend outranks it;
``_short`` still decides which backends make set-apart replicas go."""

from __future__ import annotations

import dataclasses

import pytest
import test_pool_attack31 as pass31
from test_pool_attack26 import _runs, _scheduled, _shares
from test_pool_attack28 import claim, pending_claim, running_claim
from test_pool_attack29 import _unread

from llmbackend.autoscaling.pool import share

MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
BARE = pass31.BARE  # the tenant's four class-5 1-GPU bare pods


# --- (1) the "fillable" rounds stop at 4 while the taker set still shrinks ------------------------------------------

def _chain(links: int) -> list:
    """T's S (class 5, priority 100) runs 1 GPU; T's t1..t_links (class 5, priorities 2*links .. 2, no replica, each
    wants one) interleaved with T's v1..v_links (priorities 2*links-1 .. 1, one running 1-GPU replica each, floor 0);
    t_k's replica is ``links + 4 - k`` GPUs, one more than the pool leaves it once v_k is fixed; T's x (priority 0)
    has one Pending 3-GPU replica at its floor; V's L (class 0) runs 2; W (class 5) wants two 1-GPU replicas. Pool
    ``links + 3``, full. Each round of ``_never_placed`` removes one t."""
    pool = links + 3
    cs = [running_claim("T", "S", pool, 1, class_priority=5, priority=100)]
    for k in range(1, links + 1):
        cs.append(claim("T", f"t{k}", pool, class_priority=5, priority=2 * (links - k) + 2,
                        gpus_per_replica=links + 4 - k, wanted=1))
        cs.append(running_claim("T", f"v{k}", pool, 1, class_priority=5, priority=2 * (links - k) + 1))
    cs.append(pending_claim("T", "x", pool, 1, 3, class_priority=5))
    cs.append(running_claim("V", "L", pool, 2))
    cs.append(claim("W", "w", pool, class_priority=5, wanted=2))
    return cs


@MODES
def test_control_a_chain_of_three_hopeless_takers_is_read_to_the_end_and_w_grows(across):
    for _, out, running, _, alone, _ in _runs(_chain(3), across, 3):
        assert running[("T", "x")] == 0 and alone[("W", "w")] == 2, (running, alone)
        assert running[("W", "w")] == 2, (_shares(out), running)


@MODES
@pytest.mark.parametrize("links", [4, 5])
# Fixed (was a strict xfail): pass 32 finding 1 (high): the fillable rounds stop at 4 while the taker set still shrinks; a chain of 4 hopeless takers in T (each gone un-outranks the next's victim) leaves never as computed while t4 still outranked v4, so T's hopeless 3-GPU Pending replica counts v4's GPU as room, holds 3 GPUs of a full pool of 7 and W's growth into L's class-0 GPUs waits for good (W 0; scheduler alone 2)
def test_a_chain_of_hopeless_takers_longer_than_the_rounds_does_not_freeze_an_equals_growth(across, links):
    for _, out, running, _, alone, _ in _runs(_chain(links), across, 3):
        assert running[("T", "x")] == 0 and alone[("W", "w")] == 2, (running, alone)
        assert running[("W", "w")] == 2, (_shares(out), running)


# --- (2) a taker that can never take: unplaceable, or no quota room ---------------------------------------------------

def _never_taking(kind: str, big_pending: int = 1) -> list:
    """Pass 31's pool 21 (its finding 1, tenant variant) with T's top (class 10, priority 5, 1 GPU) wanting 1 and
    holding none: ``unplaceable`` (its pods fit no node of the pool) or ``quota`` (its namespace's quota admits no
    more of it)."""
    cs = [c for c in pass31._frozen("tenant", big_pending) if c.name != "top"]
    top = dict(class_priority=10, priority=5, wanted=1)
    if kind == "unplaceable":
        cs.append(claim("T", "top", 21, unplaceable="no node of the pool has 2Ti of memory", **top))
    else:
        cs.append(claim("T", "top", 21, quota=0, **top))
    return cs


def _alone_without(cs: list, name: str, across: bool, bare) -> dict:
    """The scheduler alone, the backend ``name`` left out (its pods never run: the model would place them)."""
    return next(_runs([c for c in cs if c.name != name], across, 1, bare))[4]


@MODES
@pytest.mark.parametrize("kind", ["unplaceable", "quota"])
def test_control_without_the_pending_replica_a_never_taking_top_changes_nothing(across, kind):
    bare = BARE if kind == "unplaceable" else []
    for _, out, running, _, _, _ in _runs(_never_taking(kind, 0), across, 3, bare):
        assert running[("C", "c")] == 8 and _shares(out)[("T", "top")] == 0, (_shares(out), running)


@MODES
@pytest.mark.parametrize("kind", ["unplaceable", "quota"])
# Fixed (was a strict xfail): pass 32 finding 2 (high): an unplaceable or quota-capped backend (wanted > runs, never granted) is a taker in _never_placed for good; T's such top outranks T's filler, filler's GPUs count as room for big's hopeless 8-GPU Pending replica, which holds GPUs: c stays 4 (scheduler alone 8) and T's class-5 bare pods take X's 4 GPUs (alone 1)
def test_a_taker_that_can_never_take_does_not_make_a_hopeless_replica_hold_gpus(across, kind):
    cs = _never_taking(kind)
    bare = BARE if kind == "unplaceable" else []
    alone = _alone_without(cs, "top", across, bare)
    assert alone[("C", "c")] == 8, alone
    for _, out, running, _, _, _ in _runs(cs, across, 3, bare):
        assert running[("C", "c")] == 8, (_shares(out), running)
        if bare:
            assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)


# --- (3) step 2 never cuts an equal for the Pending replica that outranks it -----------------------------------------

def _outranked_equal(lo_namespace: str) -> list:
    """Pool 5: T's hi (class 5, priority 5) has one Pending 4-GPU replica at its floor; ``lo_namespace``'s lo (class
    5, priority 0) runs two 1-GPU replicas; V's L (class 0) runs 1; 2 GPUs are free; W (class 5) wants two 1-GPU
    replicas. The scheduler alone never places hi (2 free + 1 lower < 4) and gives W the 2 free GPUs."""
    return [claim("T", "hi", 5, class_priority=5, priority=5, gpus_per_replica=4, current=1, held=1, bound=0,
                  wanted=1, min_replicas=1),
            running_claim(lo_namespace, "lo", 5, 2, class_priority=5),
            running_claim("V", "L", 5, 1),
            claim("W", "w", 5, class_priority=5, wanted=2)]


def test_control_an_equal_of_a_third_namespace_is_not_counted_for_hi_and_w_grows():
    """Default mode: lo in a third namespace is not hi's to cut, hi's replica is set apart, W grows as alone."""
    for _, out, running, _, alone, _ in _runs(_outranked_equal("X"), False, 3, [("T", 1, 0, 2, 0)]):
        assert running[("W", "w")] == alone[("W", "w")] == 2, (_shares(out), running, alone)
        assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)


@pytest.mark.parametrize(("across", "lo_namespace"), [(False, "T"), (True, "T"), (True, "X")],
                         ids=["default-sibling", "across-sibling", "across-third-namespace"])
# Fixed (was a strict xfail): pass 32 finding 3 (high): _never_placed counts an equal that hi outranks (T's own lo; across namespaces any lower number) as freeable for hi's Pending 4-GPU replica, so it holds 4 GPUs, but step 2's feeds_others counts as freeable only lower pod priorities (1 GPU) and never cuts lo: hi waits for good, its deficit stops W (0; scheduler alone 2) and T's class-0 bare pods take the 2 free GPUs
def test_a_pending_replica_step_2_never_completes_does_not_freeze_an_equals_growth(across, lo_namespace):
    for i, (_, out, running, _, alone, _) in enumerate(_runs(_outranked_equal(lo_namespace), across, 3,
                                                             [("T", 1, 0, 2, 0)])):
        if i == 0:
            bare_alone = alone[("bare", 0)]
            assert alone[("W", "w")] == 2 and alone[("T", "hi")] == 0, alone
        # either the documented reshuffle happens (step 2 cuts lo, hi runs) or hi holds nothing and W grows
        assert running[("T", "hi")] == 1 or running[("W", "w")] == 2, (_shares(out), running)
        assert running[("T", "hi")] == 1 or running[("bare", 0)] <= bare_alone, (running, bare_alone)


# --- (4) a short sibling whose growth the deficit it causes stops -------------------------------------------------

def _short_top(top_wanted: int, top_gpus: int) -> list:
    """Pass 31's pool 21 (finding 1, tenant variant): T's top (class 10, priority 5) runs 1 replica of ``top_gpus``
    GPUs and wants ``top_wanted``."""
    return [dataclasses.replace(c, wanted=top_wanted) if c.name == "top" else c
            for c in pass31._frozen("tenant", 1, top_gpus)]


@MODES
def test_control_a_satisfied_top_does_not_freeze_c(across):
    for _, out, running, _, alone, _ in _runs(_short_top(1, 1), across, 3, BARE):
        assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)


def test_across_namespaces_the_short_top_grows_and_c_settles_where_the_scheduler_alone_does():
    """Across namespaces top's number outranks filler and c's equals in step 3 as well: top cuts filler for its
    second replica on the first sync, is satisfied, and c settles at what the scheduler alone gives it."""
    syncs = list(_runs(_short_top(2, 1), True, 4, BARE))
    _, out, running, _, alone, _ = syncs[-1]
    assert running[("T", "top")] == 2 and running[("C", "c")] == alone[("C", "c")], (_shares(out), running, alone)
    assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)


# Fixed (was a strict xfail): pass 32 finding 4 (high): T's top short of a replica that could be placed (it runs 1, wants 2) is a taker; its outranking counts filler's 4 GPUs as room for big's hopeless 8-GPU Pending replica, which holds GPUs, and the deficit stops top's own growth, so it stays short for good: c 4 (scheduler alone 8) and T's class-5 bare pods take X's 4 GPUs (alone 0)
def test_a_short_sibling_whose_growth_waits_on_the_deficit_does_not_freeze_c():
    syncs = list(_runs(_short_top(2, 1), False, 4, BARE))
    _, out, running, _, alone, _ = syncs[-1]  # (one sync to settle: the top may grow first)
    assert running[("C", "c")] == alone[("C", "c")], (_shares(out), running, alone)
    assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)


# --- (5) held: backends not read, the no-drop rule and the memory ---------------------------------------------------

@MODES
def test_a_tenants_backend_never_read_does_not_freeze_c(across):
    """Pass 31's pool 21 without top, and T's u (class 10, priority 5) running the 1 replica it wants, its pods never
    read (a new LLMBackend each sync, or a list that fails): the no-drop rule and the memory are on every sync, and
    big's hopeless replica is still set apart: c grows to 8."""
    cs = [c for c in pass31._frozen("tenant", 1) if c.name != "top"]
    cs.append(running_claim("T", "u", 21, 1, class_priority=10, priority=5))
    for _, out, running, _, alone, _ in _runs(cs, across, 4, BARE, lambda c: _unread(c) if c.name == "u" else c):
        assert running[("C", "c")] == alone[("C", "c")] == 8, (_shares(out), running, alone)
        assert running[("bare", 0)] <= alone[("bare", 0)], (running, alone)


@MODES
def test_an_unread_backends_set_apart_replica_placed_meanwhile_grants_nobody_its_gpus(across):
    """Pool 8: H (class 10) runs 4 and then wants none; T's u (class 5, 4-GPU, floor 2) runs 1 and has 1 Pending,
    set apart at the first read (no room beside H); W (class 5) wants four 1-GPU replicas. From the second sync on
    u's pods are not read: H's pods go, the scheduler places u's Pending pod, and the memory still sets one of u's
    replicas apart. u keeps its 2 replicas and nobody is granted the 4 GPUs its placed pod runs on."""
    cs = [running_claim("H", "h", 8, 4, class_priority=10),
          claim("T", "u", 8, class_priority=5, gpus_per_replica=4, current=2, held=2, bound=1, wanted=2,
                min_replicas=2),
          claim("W", "w", 8, class_priority=5, wanted=4)]
    state, now = None, 1000.0
    for sync in range(6):
        seen = [_unread(c) if sync and c.name == "u" else c for c in cs]
        if sync == 1:
            cs = [dataclasses.replace(c, wanted=0, min_replicas=0) if c.name == "h" else c for c in cs]
            seen = [dataclasses.replace(c, wanted=0, min_replicas=0) if c.name == "h" else c for c in seen]
        out, state = share(seen, now, state, across, {})
        running = _scheduled(cs, out, [])
        assert _shares(out)[("T", "u")] == 2, (sync, _shares(out))
        assert _shares(out)[("W", "w")] * 1 + running[("T", "u")] * 4 + running[("H", "h")] <= 8, (
            sync, _shares(out), running)
        cs = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas, bound=running[c.key])
              for c in cs]
        now += 30.0
    assert running[("T", "u")] == 2, running
