"""Thirty-fourth attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did
not write the code, as a tenant (namespace T) who may create LLMBackends, bare pods and pods of the PriorityClasses it
may use, in its own namespace, and as plain bad luck (pod lists that fail, lists read at different moments). Aimed at
4cabbf4 (pass 33's fixes): ``_never_placed``'s room (an equal counts at its floor only where the Pending replica's own
backend outranks it), replicas set apart fed into ``others`` (``third_waits``/``older_waiting``/``feeds_others``),
``room_for``'s ``cut_so_far``, step 2's skip of a deficit made only by unread backends' sure-waiting replicas
(``unread_waiting``), and the memory of an unread backend cut to ``read_room // g``. Shares are fed back sync after
sync through pass 26's kube-scheduler model (``_runs``, ``in_use`` = the claims' bound GPUs + the running bare pods);
"the scheduler alone" is the same model with every backend at its wanted replicas, read in both claim orders.

PROBES: 10 test functions, 40 cases (28 pass, 12 strict xfail): 6 functions hold (4 controls, one for each finding,
finding 1's also holding the own-namespace case; 2 fuzzes), 4 are the findings (2 high, 1 medium, 1 low).

FINDING 1 (high: growth frozen for good, no tenant gain; both modes; the tenant needs only one 8-GPU Pending replica at
its floor, no class): ``room_for(c, v)`` counts the taker's whole shortage (``wants - grant`` in GPUs) as what a cut
of v frees, so a replica set apart as never placed (now one of ``others``) "fits" what the cut frees once the taker is
short by its size, though the cuts could never free that much. Pass 31's finding 2 back through the new feed of
set-apart replicas into ``others``. Pool 8 (class 0): A's hi (priority 5) runs two 1-GPU replicas and wants 12; A's lo
(priority 0) runs 4; T's t has one Pending 8-GPU replica at its floor (set apart: room 8 - 6 = 2). hi takes the 2 free
GPUs, then ``contested(hi, lo)`` -> ``third_waits``: ``room_for = (12 - 4) + 0 idle = 8`` and t's 8-GPU pod counts,
so lo is never cut: hi stays at 4 sync after sync (without t: 8, lo 0). The same in step 2 (hi holds 2 Pending
replicas beside lo's 6: hi runs 2 for good, lo 6). t can never be placed: lo's 4 (6) GPUs are all a cut could free.
With hi wanting 4 (short by 2 or 0), the reshuffle happens beside t (control); with t in A itself (A's own set-apart
replica), ``third_waits`` leaves v's namespace out and the reshuffle happens (held). The scheduler alone leaves hi
where it is (it never reshuffles equals by number): the loss is against the documented reshuffle ("It is still a
Pending pod, which takes what a cut frees first if it fits there"), as pass 31's finding 2 was. Fix: bound
``room_for`` by what cuts could free: ``min(max(wanted_gpus, g_v), running GPUs above floors of the backends c may
cut) + idle + cut_so_far``, or count a set-apart replica only where its own room (``_never_placed``) plus what the
cut frees reaches its size.

FINDING 2 (high: growth frozen for good and the tenant keeps GPUs the scheduler alone would take; both modes; the
tenant needs the taker's class and a Pending replica at its floor beside its own running equal): pass 32's finding 3
back without idle GPUs. ``_never_placed`` now counts the GPUs above their floors of the equals the Pending replica's
own backend outranks as room for it, whether or not that backend is short; but hi's Pending replica is held (not short)
so step 3 never cuts for it, and step 2's ``feeds_others`` counts of a same-pod-priority cut only its one replica
(``max(own, g)``), never the equals' GPUs, so it never cuts lo either. Pool 6: T's hi (class 5, priority 5) has one
Pending 4-GPU replica (floor 1 or 0); T's lo (class 5, priority 0) runs four 1-GPU replicas (floor 0); T's x (class 0)
runs two; W's w (class 5) wants two 1-GPU replicas. hi's room = 6 - 4 + 4 = 6: it holds 4 GPUs, the pool is 4 over,
nothing is cut, w stays at 0 sync after sync and x keeps its 2 GPUs. The scheduler alone (either order) places w on
x's GPUs (w 2, x 0; hi never fits: 2 lower GPUs beside lo). Across namespaces lo may be a third namespace's (priority
0 under hi's 5). Controls: without hi, or lo at its floor, w grows to 2. Fix: in ``feeds_others`` count as freeable
the running GPUs above their floors of the backends of the waiting replica's pod priority that its backend outranks
(``running_givable.equals_below(w)``, what ``_never_placed`` counts), so step 2 makes the documented reshuffle; or
count them in ``_never_placed`` only for a backend step 3 treats as short.

FINDING 3 (low: one sync late, heals; both modes): ``cut_so_far`` counts GPUs freed for a taker of a higher pod
priority, whose new pods take them before any Pending pod of a lower one, as a hole a set-apart replica of the lower
pod priority could take. Pool 6: C's c1 (class 10) wants four 1-GPU replicas; V's X (class 0) runs 4; W's hi (class 5,
priority 5) wants one; W's lo (class 5) runs 2; T's big (class 5) has one Pending 5-GPU replica at its floor (set
apart). c1 cuts X (cut_so_far 4), then W's own reshuffle (hi cuts one of lo) reads ``room_for = 1 + 0 + 4 = 5`` and
stops for big, though X's 4 GPUs go to c1's class-10 pods first and lo's one GPU is all big could find. hi waits a
sync (next sync cut_so_far is 0 and it cuts lo). Controls: big of 6 GPUs, or no big: hi 1 on the first sync. Fix: add
to ``cut_so_far`` only cuts made for takers of a pod priority not above the Pending pods it is read for (what a higher
taker's pods take is no hole), e.g. one counter a pod priority.

FINDING 4 (medium: an equal of another namespace is denied free GPUs, but only while two of the tenant's backends stay
unread, sync after sync; both modes): the memory of an unread backend is cut to ``held - read_room // g`` judged for
each unread backend alone, while ``may_run`` judges them together (pass 29's finding 5, in the memory this time). Pool
15: A's h (class 10) runs 4; T's u1 (class 5, 4-GPU) runs 1; T's u2 (class 5, 4-GPU, floor 2) runs 1 and has 1
Pending, set apart at the first read (room 15 - 12 = 3); W's e (class 5) then wants three 1-GPU replicas. With u1 and
u2 unread, read_room = 11 holds u2's two replicas alone, so its memory is dropped, its Pending replica holds 4 GPUs
and the 3 free GPUs are e's no more: e stays at 0 while the lists fail (read: 3; the scheduler alone: 3; may_run says
one of u2's replicas waits for sure). Control: only u2 unread, the memory holds and e gets 3. Fix: keep the memory of
an unread backend up to ``held - may_run`` (the joint judgement), not ``read_room // g`` alone.

HELD: a backend's own namespace's set-apart replica does not stop that namespace's reshuffle (``third_waits`` leaves
the victim's namespace out; finding 1's control, both modes); shares settle under reads that alternate (a random half
of the backends, or one, unread every other sync: pass 29's and pass 31's pools, 10 syncs, 300 pools each, no
period-2 churn where the all-read run settles); pass 29's invariants (a) a running, held, wanted replica is cut only
where something outranks it, (b) floors, (c) no grower beyond the pool, (d) settling, (e) bare gain within the
scheduler alone, over pools where 30 % of the backends are a large (4/6/8-GPU) replica at its floor with one Pending
more than run (86 % of the pools have a replica set apart), wanting up to 8 more, bare pods of classes 0/5/10, 20 %
or no unread claims, both modes, 6 syncs, 400 pools a seed. Step 2's ``unread_waiting`` skip was read against the
all-read case: it skips a cut only when the read backends' grants fit beside what the unread may run, where the read
case makes no step 2 either; no probe broke it (a tenant's unread backend is still cut itself: its own figure is left
out).

SUSPECTED, NOT SHOWN: (1) a tenant fuzz (pass 29's check, with the scheduler alone also read with the tenant's own
backends at its shares) found in default mode only (a) X's own reshuffle (x5 cuts a 4-GPU x3 for 2 GPUs) whose
leftover 2 GPUs go to the tenant's class-5 growth by the turn draw (pass 29's UNSURE (1), documented leftover rule),
and (b) a tie between T's and V's new class-0 pods for one freed GPU, which the scheduler breaks by creation time; in
across mode the gains come from numbers ordering namespaces (the admin's flag). (2) Finding 3 recurs each sync a
higher class keeps cutting in a burst as large as the set-apart replica; not probed beyond one sync. (3) A backend's
own set-apart replica blocks its own cut of an equal of another namespace (``--priority-across-namespaces``) for a
sync when a higher backend's scale-down frees GPUs this pass (``_never_placed`` reads the pods, not the grants); it
heals the next sync, not probed. Nothing checked on a real cluster (one bin of GPUs, not nodes).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): ``room_for`` is capped at what the backends the taker may cut hold above their floors
(finding 1); step 2's ``feeds_others`` counts as freeable for the waiting replica the running GPUs of the equals its
backend outranks (finding 2: the documented reshuffle now completes hi; the probe's premise is read on the first sync
only); ``cut_so_far`` is kept by the taker's pod priority and read up to the asking taker's (finding 3); the memory of
backends not read is judged together, those the last read set apart placed last (finding 4)."""

from __future__ import annotations

import dataclasses
import random

import pytest
import test_pool_attack29 as pass29
import test_pool_attack31 as pass31
from test_pool_attack26 import _runs, _scheduled, _shares
from test_pool_attack28 import claim, running_claim
from test_pool_attack29 import _unread

from llmbackend.autoscaling.pool import share

POOL = ("gpu",)
MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])


def _both_orders(claims, out, bare=()):
    """What the scheduler alone runs with every backend at its wanted replicas, new pods of equals made in the claims'
    order and in the reverse one (the pool cannot know which is older)."""
    at_wanted = {c.key: dataclasses.replace(out[c.key], replicas=max(c.wanted, c.min_replicas)) for c in claims}
    return [_scheduled(claims, at_wanted, list(bare)), _scheduled(claims[::-1], at_wanted, list(bare))]


# --- (1) room_for counts the taker's whole shortage as what a cut frees --------------------------------------------

def _whole_shortage(hi_wants: int, t_ns: str | None, step2: bool):
    """Pool 8 (class 0): A's hi (priority 5) runs 2 1-GPU replicas (``step2``: and holds 2 Pending beside lo's 6) and
    wants ``hi_wants``; A's lo (priority 0) runs 4 (6); ``t_ns``: that namespace's t has one Pending 8-GPU replica at
    its floor (never placeable: lo's GPUs are all a cut could free)."""
    if step2:
        cs = [claim("A", "hi", 8, priority=5, current=4, held=4, bound=2, wanted=hi_wants),
              running_claim("A", "lo", 8, 6)]
    else:
        cs = [running_claim("A", "hi", 8, 2, priority=5, wanted=hi_wants), running_claim("A", "lo", 8, 4)]
    if t_ns:
        cs.append(claim(t_ns, "t", 8, gpus_per_replica=8, current=1, held=1, bound=0, wanted=1, min_replicas=1))
    return cs


@MODES
@pytest.mark.parametrize("step2", [False, True], ids=["step-3", "step-2"])
@pytest.mark.parametrize(("hi_wants", "t_ns", "hi_final"),
                         [(12, None, 8), (4, "T", 4), (12, "A", 8)], ids=["no-t", "hi-short-by-little", "t-of-A"])
def test_control_the_reshuffle_happens_without_a_set_apart_replica_as_large_as_the_shortage(across, step2, hi_wants,
                                                                                            t_ns, hi_final):
    """Without t, with hi short by less than t's 8 GPUs, or with t in A itself (its own reshuffle: ``third_waits``
    leaves the victim's namespace out), hi cuts lo."""
    *_, (_, out, running, _, _, _) = _runs(_whole_shortage(hi_wants, t_ns, step2), across, 3)
    assert running[("A", "hi")] == hi_final and running[("A", "lo")] == 8 - hi_final, (_shares(out), running)
    assert running.get(("T", "t"), 0) == 0 and running.get(("A", "t"), 0) == 0, running


@MODES
@pytest.mark.parametrize("step2", [False, True], ids=["step-3", "step-2"])
# Fixed (was a strict xfail): pass 34 finding 1 (high): room_for counts the taker's whole shortage as what a cut frees, so T's set-apart 8-GPU replica (never placeable) stops A's own reshuffle for good: hi 4 (step 2: 2) instead of 8
def test_a_set_apart_replica_the_cuts_could_never_complete_does_not_freeze_a_namespaces_reshuffle(across, step2):
    runs = [(out, running) for _, out, running, _, _, _ in _runs(_whole_shortage(12, "T", step2), across, 3)]
    assert all(running[("T", "t")] == 0 for _, running in runs), runs
    out, running = runs[-1]
    assert running[("A", "hi")] == 8 and running[("A", "lo")] == 0, (_shares(out), running)


# --- (2) an equal the Pending replica outranks counts as room, but nothing cuts it for that replica ----------------

def _outranked_equal(hi: bool = True, lo_ns: str = "T", lo_min: int = 0, hi_min: int = 1):
    """Pool 6, no idle GPU: T's hi (class 5, priority 5) has one Pending 4-GPU replica (floor ``hi_min``);
    ``lo_ns``'s lo (class 5, priority 0) runs 4 1-GPU replicas (floor ``lo_min``); T's x (class 0) runs 2; W's w
    (class 5) wants 2."""
    cs = [running_claim(lo_ns, "lo", 6, 4, class_priority=5, min_replicas=lo_min), running_claim("T", "x", 6, 2),
          claim("W", "w", 6, class_priority=5, wanted=2)]
    if hi:
        cs.insert(0, claim("T", "hi", 6, class_priority=5, priority=5, gpus_per_replica=4, current=1, held=1, bound=0,
                           wanted=1, min_replicas=hi_min))
    return cs


def _tenant_gpus(claims, ran) -> int:
    return sum(ran[c.key] * c.gpus_per_replica for c in claims if c.namespace == "T")


@MODES
@pytest.mark.parametrize("shape", [dict(hi=False), dict(lo_min=4)], ids=["no-hi", "lo-at-floor"])
def test_control_without_room_from_an_outranked_equal_w_preempts_x_as_the_scheduler_alone(across, shape):
    for claims, out, running, _, _, _ in _runs(_outranked_equal(**shape), across, 3):
        assert running[("W", "w")] == 2 and running[("T", "x")] == 0, (_shares(out), running)
        assert all(running[("W", "w")] == ran[("W", "w")] for ran in _both_orders(claims, out)), running


@pytest.mark.parametrize(("across", "lo_ns", "hi_min"), [(False, "T", 1), (False, "T", 0), (True, "T", 1),
                                                         (True, "X", 1)],
                         ids=["default", "default-hi-floor-0", "across", "across-third-namespace-lo"])
# Fixed (was a strict xfail): pass 34 finding 2 (high): _never_placed counts lo (outranked by hi's own backend) as room, so hi's Pending 4-GPU replica holds 4 GPUs, but feeds_others counts one GPU of an equal cut and step 3 sees hi satisfied: nothing cuts lo, w stays 0 for good (alone 2) and T's x keeps 2 GPUs the scheduler alone would give w
def test_a_pending_replica_nothing_cuts_for_does_not_freeze_an_equal_nor_keep_the_tenant_lower_gpus(across, lo_ns,
                                                                                                    hi_min):
    for i, (claims, out, running, _, _, _) in enumerate(_runs(_outranked_equal(lo_ns=lo_ns, hi_min=hi_min), across,
                                                                3)):
        alone = _both_orders(claims, out)
        # (the premise, from the first sync's pods: once hi runs, the scheduler alone keeps it)
        assert i > 0 or all(ran[("W", "w")] == 2 and ran[("T", "hi")] == 0 for ran in alone), alone
        # either the documented reshuffle happens (hi runs on lo's GPUs) or hi holds nothing and w grows as alone
        assert running[("T", "hi")] == 1 or running[("W", "w")] == 2, (_shares(out), running)
        assert running[("T", "hi")] == 1 or any(_tenant_gpus(claims, running) <= _tenant_gpus(claims, ran)
                                                for ran in alone), (running, alone)


# --- (3) cut_so_far counts GPUs a higher pod priority's pods take ---------------------------------------------------

def _burst(big: int | None, c1: bool = True):
    """Pool 6: V's X (class 0) runs 4; W's lo (class 5) runs 2; W's hi (class 5, priority 5) wants 1; ``big``: T's big
    (class 5) has one Pending ``big``-GPU replica at its floor (set apart); ``c1``: C's c1 (class 10) wants 4."""
    cs = [running_claim("V", "X", 6, 4), running_claim("W", "lo", 6, 2, class_priority=5),
          claim("W", "hi", 6, class_priority=5, priority=5, wanted=1)]
    if big:
        cs.append(claim("T", "big", 6, class_priority=5, gpus_per_replica=big, current=1, held=1, bound=0, wanted=1,
                        min_replicas=1))
    if c1:
        cs.append(claim("C", "c1", 6, class_priority=10, wanted=4))
    return cs


@MODES
@pytest.mark.parametrize("big", [6, None], ids=["big-of-6", "no-big"])
def test_control_ws_reshuffle_happens_on_the_first_sync(across, big):
    _, out, running, _, _, _ = next(_runs(_burst(big), across, 1))
    assert running[("C", "c1")] == 4 and running[("W", "hi")] == 1 and running[("W", "lo")] == 1, (_shares(out),
                                                                                                     running)


@MODES
# Fixed (was a strict xfail): pass 34 finding 3 (low): cut_so_far counts the 4 GPUs c1's class-10 cut of X frees (c1's pods take them first) as a hole T's class-5 5-GPU set-apart replica could take, so W's own reshuffle waits a sync
def test_gpus_a_higher_pod_priority_takes_make_no_hole_for_a_lower_pending_pod(across):
    runs = [(out, running) for _, out, running, _, _, _ in _runs(_burst(5), across, 2)]
    assert runs[-1][1][("W", "hi")] == 1 and runs[-1][1][("T", "big")] == 0, runs[-1]  # it heals the next sync
    out, running = runs[0]
    assert running[("C", "c1")] == 4 and running[("W", "hi")] == 1, (_shares(out), running)


# --- (4) the memory of unread backends, each judged alone ------------------------------------------------------------

def _memory(across: bool, unread: tuple[str, ...]) -> list[tuple[dict, dict, dict]]:
    """Pool 15: A's h (class 10) runs 4; T's u1 (class 5, 4-GPU) runs 1; T's u2 (class 5, 4-GPU, floor 2) runs 1 and
    has 1 Pending (set apart at the first read: 3 GPUs beside the rest); W's e (class 5) wants nothing, then three
    1-GPU replicas while ``unread`` stay unread. Each later sync: (shares, running after it, the memory)."""
    cs = [running_claim("A", "h", 15, 4, class_priority=10), running_claim("T", "u1", 15, 1, 4, class_priority=5),
          claim("T", "u2", 15, class_priority=5, gpus_per_replica=4, current=2, held=2, bound=1, wanted=2,
                min_replicas=2),
          claim("W", "e", 15, class_priority=5)]
    out, state = share(cs, 1000.0, None, across, {}, {POOL: 12})
    assert state.never_placed == {(POOL, ("T", "u2")): 1}, state.never_placed
    cs = [dataclasses.replace(c, wanted=3) if c.name == "e" else c for c in cs]
    now, seen = 1000.0, []
    for _ in range(3):
        now += 30.0
        view = [_unread(c) if c.name in unread else c for c in cs]
        out, state = share(view, now, state, across, {}, {POOL: sum((c.bound or 0) * c.gpus_per_replica for c in cs)})
        running = _scheduled(cs, out, [])
        seen.append((_shares(out), running, dict(state.never_placed)))
        cs = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas, bound=running[c.key])
              for c in cs]
    return seen


@MODES
@pytest.mark.parametrize("unread", [(), ("u2",)], ids=["all-read", "u2-unread"])
def test_control_with_one_unread_backend_the_memory_holds_and_e_takes_the_free_gpus(across, unread):
    for shares, running, _ in _memory(across, unread):
        assert running[("W", "e")] == 3 and running[("T", "u2")] == 1, (shares, running)


@MODES
# Fixed (was a strict xfail): pass 34 finding 4 (medium): the memory of each unread backend is judged alone against read_room (u1 and u2 each fit 11 GPUs, not together), so u2's set-apart replica holds 4 GPUs again and e is denied the 3 free GPUs while T's two lists fail
def test_two_unread_backends_keep_the_memory_that_one_of_them_waits_for_sure(across):
    for shares, running, memory in _memory(across, ("u1", "u2")):
        assert running[("T", "u2")] == 1, running
        assert running[("W", "e")] == 3, (shares, running, memory)


# --- (5) fuzz: alternating reads, and pass 29's invariants with set-apart replicas ----------------------------------

def _alternating(seed: int, trials: int, pool_of) -> None:
    """A random half of the backends unread every other sync, 10 syncs: where the all-read run settles, so do the
    shares (no period-2 churn from the memory of unread backends)."""
    rng = random.Random(seed)
    for trial in range(trials):
        across = trial % 2 == 0
        cs, _, bare = pool_of(rng)
        flaky = {c.key for c in cs if rng.random() < 0.5}

        def shares_of(alternate: bool, cs=cs, bare=bare, flaky=flaky, across=across) -> list[dict]:
            sync = {"n": 0}

            def seen(d):
                return _unread(d) if alternate and d.key in flaky and sync["n"] % 2 else d
            got = []
            for _, out, _, _, _, _ in _runs(cs, across, 10, bare, seen):
                got.append(_shares(out))
                sync["n"] += 1
            return got
        base = shares_of(False)
        if base[-1] != base[-2]:
            continue
        alt = shares_of(True)
        assert alt[-1] == alt[-2] == alt[-3], (seed, trial, across, flaky, cs, bare, alt[-4:], base[-1])


@pytest.mark.parametrize(("seed", "generator"), [(343, pass31._fuzz_pool), (344, pass29._fuzz_pool)],
                         ids=["pass-31-pools", "pass-29-pools"])
def test_fuzz_shares_settle_under_reads_that_alternate(seed, generator):
    _alternating(seed, 300, generator)


def _set_apart_pool(rng: random.Random):
    """Pools of 6 to 16 GPUs, 3 to 6 backends (the tenant's t most often), 30 % of them a large replica (4/6/8 GPUs) at
    its floor with one Pending more than run (often set apart), the rest 1/2/4/8 GPUs with Pending replicas half the
    time; wants up to 8 more; classes 5/10, numbers up to 10**6; bare pods of 1-8 GPUs and classes 0/5/10."""
    pool = rng.choice([6, 8, 9, 12, 16])
    cs, used = [], 0
    for i in range(rng.randint(3, 6)):
        ns = rng.choice("ttab") if i else "t"
        big = rng.random() < 0.3
        g = min(pool, rng.choice([4, 6, 8] if big else [1, 1, 2, 4, 8]))
        cur = rng.randint(0, 3) + big
        bound = min(cur - big, max(0, (pool - used) // g))
        if rng.random() < 0.5:
            bound = rng.randint(0, bound)
        used += bound * g
        minimum = cur if big else rng.choice([0, 1, cur])
        cs.append(claim(ns, f"{ns}{i}", pool, priority=rng.choice([0, 5, 10**6]), current=cur, held=cur, bound=bound,
                        wanted=max(cur, minimum) + rng.choice([0, 0, 1, 2, 8]), min_replicas=minimum,
                        gpus_per_replica=g, class_priority=rng.choice([None, 5, 10])))
    bare = [(ns, rng.choice([1, 2, 4, 8]), 0, rng.randint(1, 2), rng.choice([0, 5, 10]))
            for ns in rng.sample("tabx", rng.randint(0, 2))]
    return cs, pool, bare


@pytest.mark.parametrize(("seed", "unread_p"), [(343, 0.2), (344, 0.0)])
def test_fuzz_pass_29s_invariants_hold_with_set_apart_replicas_bare_pods_and_unread_claims(seed, unread_p):
    pass29._fuzz(seed, 400, unread_p, 1.0, _set_apart_pool)
