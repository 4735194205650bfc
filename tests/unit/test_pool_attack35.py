"""Thirty-fifth attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did
not write the code, as a tenant (namespace T) who may create LLMBackends, bare pods and pods of the PriorityClasses it
may use, in its own namespace, and as plain bad luck (pod lists that fail, lists read at different moments). Aimed at
f45e8b4 (pass 34's fixes) and the two commits before it: ``room_for``'s new cap (``min(max(wanted, g_v), max(g_v,
givable.below(c)))`` + idle + ``cut_so_far`` by the taker's pod priority), step 2's ``feeds_others`` counting the
equals the waiting replica's backend outranks, ``_never_placed`` and set-apart replicas in ``others``, and the memory
of unread backends judged together "those the last read set apart last". Shares are fed back sync after sync through
pass 26's kube-scheduler model (``_runs``, ``in_use`` = the claims' bound GPUs + the running bare pods); "the scheduler
alone" is the same model with every backend at its wanted replicas, read in both claim orders (``_both_orders``).

PROBES: 13 test functions, 39 cases (24 pass, 15 strict xfail): 7 functions hold (5 controls, one for each finding;
a fuzz of pass 29's invariants and a tenant-gain fuzz over pools with scale-downs, set-apart replicas, bare pods and
unread claims), 6 are findings (5 targeted, 1 fuzz seed that finds finding 4's lasting shape by itself).

FINDING 1 (high: a running wanted replica cut for nobody and the tenant gains GPUs the scheduler alone never gives it;
both modes; the tenant needs only one Pending pod, bare or a replica set apart, of its own pod priority, no class):
``room_for`` counts, beside what the cut frees, the GPUs no pod holds (``idle_gpus``: from the pods) and this pass's
cuts (``cut_so_far``), but not the GPUs a backend's own scale-down frees this pass (step 1: its grant below what it
runs). Their pods go with the cut's, and the older Pending pod takes all of them. Pool 8 (class 0): x (T's own, or a
third namespace V's) runs four 1-GPU replicas and now wants 0; A's lo (priority 0) runs 4; A's hi (priority 5) wants
5; T has one Pending 5-GPU pod (a bare pod, or its backend t's replica at its floor, set apart). hi takes x's 4 freed
GPUs and cuts one of lo for its fifth; ``third_waits`` reads ``room_for = 1 + 0 + 0`` and the 5-GPU pod does not fit,
so lo is cut; the 5 GPUs (x's 4, lo's 1) go to T's older pod: T 0 (4) -> 5 GPUs, hi 0, lo 4 -> 3. The scheduler alone
places hi's pods on x's 4 (lo 4, hi 4, T 0). Controls: x keeps its replicas (no scale-down: A's reshuffle, hi 4, lo 0,
T nothing), or T's pod of 6 GPUs (never fits: hi 5). Docs: "makes no cut whose freed GPUs such pods of another
namespace than the victim's would get". Fix: add to ``room_for`` (and step 2's ``feeds_others``, ``others.top``) the
GPUs this pass's grants free below what runs (``sum(max(0, runs(v) - grant[v]) * g_v)``, read as the grants fall;
a scale-down frees GPUs for any pod priority).

FINDING 2 (high: the same effect, no scale-down needed; both modes; the tenant needs one Pending pod as large as two
of the victim's replicas): ``room_for`` counts ``max(wanted GPUs, g_v)``, but step 3 cuts whole replicas of v until
c's replica is complete, which frees ``ceil(wanted / g_v) * g_v`` (docs: "1 of two 2-GPU replicas taken for a 3-GPU
one"). Pool 4 (class 0): A's lo (priority 0) runs two 2-GPU replicas; A's hi (priority 5) wants one 3-GPU replica; T
has one Pending 4-GPU pod (bare, or a replica at its floor, set apart). ``room_for = min(max(3, 2), max(2, 4)) = 3``:
the 4-GPU pod does not fit, hi cuts both of lo's replicas, and T's older pod takes the 4 GPUs for good (hi's 3-GPU
pod never runs; T 0 -> 4, A 4 -> 0). The scheduler alone moves nothing. Controls: T's pod of 3 GPUs (``third_waits``
sees it: no cut) or of 5 (never fits: hi runs). Fix: in ``room_for`` round what c still wants up to whole replicas of
v: ``max(-(-wanted_gpus // g) * g, g)``, still capped by ``givable.below(c)`` rounded the same way.

FINDING 3 (medium: a grant beyond the pool, but only while two of the tenant's pod lists fail sync after sync; both
modes): the memory of unread backends places "those the last read set apart last", but a replica set apart is a
Pending pod older than any replica granted since, and the kube-scheduler places the older first. Pool 8: A's h (class
10) runs 4; W's w (class 5, priority 10) runs 4; T's u1 (class 5, one 4-GPU replica at its floor) waits and is set
apart. h's job ends; T adds u2 (class 5, priority 5, one 2-GPU replica), which takes 2 of the 4 free GPUs; u1's older
pod gets h's 4 GPUs, u2's waits. With u1 and u2 unread, ``read_room`` (4) goes to u2 first, u1's memory is kept (its
running replica holds nothing), and w (now wanting 6) is granted 6: 12 GPUs granted in a pool of 8, w's 2 new pods
wait, sync after sync. Read (or u1 alone unread): w 4. Fix: remember, a backend, the replicas read running at the last
read, and give ``read_room`` first to those, then to the replicas set apart (older), then to the rest (granted since).

FINDING 4 (high: in one shape an equal of another namespace is denied and the tenant's lower bare pod gains for
one sync (heals), in another the tenant's replica runs for good on GPUs the scheduler alone gives the equal; both
modes): ``_never_placed`` judges a Pending replica against the pods running at a higher pod priority (as its
docstring says), not against that pod priority's grants this pass, its Pending replicas held and its growth, which
the scheduler places first. Targeted (growth, heals): pool 12: X's x (class 0) runs two 6-GPU replicas; T's t0
(class 5) has two Pending 6-GPU replicas at its floor; V's v2 (class 10) wants one 1-GPU replica; W's w4 (class 5)
wants one 3-GPU replica; T has a Pending 3-GPU class-0 bare pod. Room for t0 = 12: both replicas hold (12 GPUs), v2
is granted 1 more (13 at class 5 and above), w4 gets nothing; v2 and t0 preempt x, only one of t0's replicas fits
beside v2, and the 5 GPUs left go to T's bare pod (T 0 -> 9 GPUs; the scheduler alone gives w4 3 and T 6). Next sync
t0's second replica is set apart and w4 preempts the bare pod. Controls: without v2 (t0 runs 2, as alone), or without
w4 (the bare pod gets what the scheduler alone gives it). Found by the tenant-gain fuzz (seed 4, trial 314, default,
pool 8; lasting): X's x5 (class 10) holds three Pending 1-GPU replicas, V's v3 (class 0) scales down from three 2-GPU
replicas to one; T's t1 (class 5, priority 5) has one Pending 4-GPU replica at its floor, judged to fit beside X's x2
(class 5, 2 running) alone (room 6); x5's three pods take 3 of the 4 GPUs v3 frees first, so t1 can never run there,
yet it holds 4 GPUs, step 2 cuts x2 (3 -> 1) for x5, and t1 runs on what that frees, for good: T 0 -> 4, x2 1 (the
scheduler alone: x2 5, T 0). Fix: judge ``_never_placed``'s room net of the GPUs granted at a higher pod priority
beyond what runs there (its held Pending replicas; and re-judge once a higher one grew in step 3: replicas that no
longer fit beside its grants hold nothing, their GPUs go to the tier's turns).

FINDING 5 (high: tenant gain kept for good, in the draws where T's turn comes first (now=1000 here); both modes; the
tenant needs only a backend of a class another namespace's older Pending replica has): the other side of finding 4:
``_never_placed`` does not see a scale-down of this pass, so an older Pending replica that the freed GPUs will place
is set apart; a higher class short outranks it, so its replica "goes", and the GPUs it would have taken go by the turn
draw to the tenant's new replica. Pool 9: X's x3 (class 10) runs one 4-GPU replica and now wants 0; V's v4 (class 5)
runs one 3-GPU replica and has one Pending (older); W's w2 (class 10) wants one 3-GPU replica; T's t0 (class 5) wants
one 3-GPU replica; 2 GPUs idle. v4's Pending replica is set apart (room 9 - 7 = 2), dropped (w2 short outranks it),
and t0 takes the 3 GPUs w2 leaves of x3's: v4 1, T 3 GPUs, and so on after. The scheduler alone places v4's older pod
(v4 2, T 0). Controls: x3 keeps its replica (w2 preempts v4: the pool and the scheduler alone agree), or no w2 (v4
keeps its replica: 2). An earlier draw of the tenant-gain fuzz found it by itself (a class-10 4-GPU scale-down
beside v4's older class-5 replica and a short class-10 w2, pool 9, across). Fix: as finding 1's,
count in ``_never_placed``'s room the GPUs this pass's scale-downs free (running_at from ``min(runs, kept grant)``).

HELD: pass 29's invariants (a) a running, held, wanted replica is cut only where something outranks it, (b) floors,
(c) no grower beyond the pool, (d) settling, (e) bare gain within the scheduler alone, over pools with 25 % large
replicas at their floor with a Pending one (set apart most often), 25 % backends scaling down, replica sizes
1/2/3/4/6/8, bare pods of the tenant (1-5 GPUs, classes 0/5), 15 % or no unread claims, both modes, 6 syncs, 300
pools a seed; the tenant's GPUs after each sync are within what the scheduler alone gives it (both tie orders, and
with the tenant's own backends at their shares: its own reshuffle is its own doing), or what it ran plus the GPUs free
before, unless no other namespace runs less, over 1,000 pools a seed with unread claims off (seeds 2 and 3). Step 2's
new ``feeds_others`` equal counting was read against a class-0 cut of another namespace for a class-5 waiting
replica its own backend completes by its own reshuffle: the tenant gains nothing it could not do by scaling its own
lower backend down (the kube-scheduler would then preempt the class-0 pod itself); not a finding. ``cut_so_far``
restores (give-back) subtract what they added (absorbed cuts are never restored).

SUSPECTED, NOT SHOWN: (1) with unread claims the tenant-gain fuzz finds pools (seed 1 trial 910, seed 2 trial 201,
seed 3 trial 688 at unread 0.15) where an unread backend judged running is trimmed in step 2 and the tenant's bare
pod takes the room its Pending pods would have had; not classified (the unread rule "counts each way as is safe" is
for the others, not for the unread backend itself). (2) Step 2's analog of finding 1 (``feeds_others``'s
``others.top(has + g + idle)`` leaves scale-downs out too): in the shapes tried ``_never_placed`` sets the waiting
replica's excess apart first, so step 3 makes the cut; not shown separately. (3) An earlier draw of the fuzz found seed 6
trial 37 (across: the tenant's own 1-GPU scale-down beside a class-10 newcomer and T's 3-GPU bare pods; likely finding
1 or 4) and this one seed 5 trial 125 (across, T's class-5 Pending floor beside a class-10 grower); neither reduced.
Seed 1 trial 361 is the model's: it preempts the lowest pod first even where the kube-scheduler would reprieve it (a
class-0 replica of T beside a class-5 4-GPU victim), so the scheduler alone reads T lower than it is.
Nothing checked on a real cluster (one bin of GPUs, not nodes; all pods of a sync's scale-downs go together).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): ``room_for`` counts the GPUs this pass's scale-downs free (``scaled_down``, also in
``feeds_others``) and what the taker still wants in whole replicas of the victim (findings 1, 2); ``_never_placed``
judges the pod priorities from the highest down: a replica fits beside what the higher ones take, their running pods
and their Pending replicas that could be placed, and a backend that wants fewer replicas than it runs counts at what
it keeps (finding 5, and finding 4's lasting shape; its one-sync shape stays open, medium); finding 3 went with the
level-by-level judgement. The shared fuzz check ``grower_beyond_pool`` reads a Pending replica as placeable beside the
higher pod priorities' placeable Pending replicas too (the kube-scheduler places those first). Finding 4's one-sync
shape was fixed after pass 39 (2026-12-07): step 1 counts a higher pod priority's growth for the lower ones."""

from __future__ import annotations

import dataclasses
import random

import pytest
import test_pool_attack29 as pass29
from test_pool_attack26 import _runs, _scheduled, _shares
from test_pool_attack28 import claim, running_claim
from test_pool_attack29 import _unread
from test_pool_attack34 import _both_orders

from llmbackend.autoscaling.pool import share

POOL = ("gpu",)
MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])


def _tenant_gpus(claims, ran, bare=()) -> int:
    return sum(ran[c.key] * c.gpus_per_replica for c in claims if c.namespace == "T") + sum(
        ran[("bare", i)] * b[1] for i, b in enumerate(bare) if b[0] == "T")


def _tenant_pod(pool: int, size: int, how: str):
    """T's one Pending ``size``-GPU pod of class 0: a bare pod, or its backend t's replica at its floor."""
    if how == "bare":
        return [], [("T", size, 0, 1, 0)]
    return [claim("T", "t", pool, gpus_per_replica=size, current=1, held=1, bound=0, wanted=1, min_replicas=1)], []


# --- (1) room_for leaves out the GPUs this pass's scale-downs free ---------------------------------------------------

def _scale_down(x_ns: str, x_wanted: int, size: int, how: str):
    """Pool 8 (class 0): ``x_ns``'s x runs four 1-GPU replicas and wants ``x_wanted``; A's lo runs 4; A's hi (priority
    5) wants 5; T's ``size``-GPU Pending pod (``how``)."""
    cs, bare = _tenant_pod(8, size, how)
    return [running_claim(x_ns, "x", 8, 4, wanted=x_wanted), running_claim("A", "lo", 8, 4),
            claim("A", "hi", 8, priority=5, wanted=5), *cs], bare


@MODES
@pytest.mark.parametrize(("x_wanted", "size", "hi_runs"), [(4, 5, None), (0, 6, 5)], ids=["no-scale-down",
                                                                                           "pod-of-6"])
def test_control_without_a_scale_down_or_with_a_pod_that_never_fits_t_gets_nothing(across, x_wanted, size, hi_runs):
    """No scale-down: A's own reshuffle (default mode; across, hi may cut x too and room_for's cap of 8 sees the
    5-GPU pod: no cut), T's pod gets nothing; a 6-GPU pod never fits: hi runs 5."""
    cs, bare = _scale_down("V", x_wanted, size, "bare")
    _, out, running, _, _, us = next(_runs(cs, across, 1, bare))
    assert running[("bare", 0)] == 0 and hi_runs in (None, running[("A", "hi")]), (_shares(out), running)
    assert running[("A", "hi")] + running[("A", "lo")] + running[("V", "x")] == 8, running


@MODES
@pytest.mark.parametrize(("x_ns", "how"), [("V", "bare"), ("T", "set-apart")], ids=["third-ns-x-bare-pod",
                                                                                    "own-x-set-apart-replica"])
# Fixed (was a strict xfail): pass 35 finding 1 (high): room_for leaves out the GPUs x's scale-down frees this pass: A's lo is cut for hi's fifth replica and T's older 5-GPU pod takes x's 4 + lo's 1 (T 5 GPUs, hi 0; the scheduler alone: lo 4, hi 4, T 0)
def test_a_cut_beside_a_scale_down_feeds_no_older_pod_of_the_tenant(across, x_ns, how):
    cs, bare = _scale_down(x_ns, 0, 5, how)
    claims, out, running, _, _, us = next(_runs(cs, across, 1, bare))
    alone = _both_orders(claims, out, us)
    assert all(ran[("A", "lo")] == 4 and _tenant_gpus(claims, ran, us) == 0 for ran in alone), alone
    assert _tenant_gpus(claims, running, us) <= max(_tenant_gpus(claims, ran, us) for ran in alone), (_shares(out),
                                                                                                       running)
    assert running[("A", "lo")] + running[("A", "hi")] >= 8, (_shares(out), running)


# --- (2) room_for does not round the cut up to whole replicas of the victim -----------------------------------------

def _rounding(size: int, how: str):
    """Pool 4 (class 0): A's lo runs two 2-GPU replicas; A's hi (priority 5) wants one 3-GPU replica; T's ``size``-GPU
    Pending pod (``how``)."""
    cs, bare = _tenant_pod(4, size, how)
    return [running_claim("A", "lo", 4, 2, 2), claim("A", "hi", 4, priority=5, gpus_per_replica=3, wanted=1), *cs], bare


@MODES
@pytest.mark.parametrize(("size", "hi_runs"), [(3, 0), (5, 1)], ids=["pod-of-3-stops-the-cut", "pod-of-5-never-fits"])
def test_control_a_pod_that_fits_room_for_stops_the_cut_and_one_that_never_fits_does_not(across, size, hi_runs):
    cs, bare = _rounding(size, "bare")
    for _, out, running, _, _, _ in _runs(cs, across, 2, bare):
        assert running[("bare", 0)] == 0 and running[("A", "hi")] == hi_runs, (_shares(out), running)


@MODES
@pytest.mark.parametrize("how", ["bare", "set-apart"])
# Fixed (was a strict xfail): pass 35 finding 2 (high): room_for counts max(3 wanted, 2) = 3 GPUs, but hi cuts two of lo's 2-GPU replicas (4 GPUs); T's older 4-GPU pod takes them for good (T 4, A 0; the scheduler alone moves nothing)
def test_a_cut_of_whole_replicas_larger_than_the_takers_need_feeds_no_older_pod(across, how):
    cs, bare = _rounding(4, how)
    for claims, out, running, _, _, us in _runs(cs, across, 2, bare):
        assert _tenant_gpus(claims, running, us) == 0, (_shares(out), running)
        assert running[("A", "lo")] * 2 + running[("A", "hi")] * 3 >= 3, (_shares(out), running)


# --- (3) the memory of unread backends: set apart last, though older ------------------------------------------------

def _memory(across: bool, unread: tuple[str, ...]) -> list[tuple[dict, dict]]:
    """Pool 8: A's h (class 10) runs 4; W's w (class 5, priority 10) runs 4; T's u1 (class 5, one 4-GPU replica at its
    floor) waits, set apart. Then h wants 0 and T adds u2 (class 5, priority 5, one 2-GPU replica); from the next sync
    ``unread`` are not read and w wants 6. Each sync: (shares, running after it)."""
    cs = [running_claim("A", "h", 8, 4, class_priority=10), running_claim("W", "w", 8, 4, class_priority=5,
                                                                          priority=10),
          claim("T", "u1", 8, class_priority=5, gpus_per_replica=4, current=1, held=1, bound=0, wanted=1,
                min_replicas=1)]
    out, state = share(cs, 1000.0, None, across, {}, {POOL: 8})
    assert state.never_placed == {(POOL, ("T", "u1")): 1}, state.never_placed

    def step(cs, out):
        running = _scheduled(cs, out, [])
        return [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas, bound=running[c.key])
                for c in cs], running
    cs, _ = step(cs, out)
    cs = [dataclasses.replace(c, wanted=0) if c.name == "h" else c for c in cs]
    cs.append(claim("T", "u2", 8, class_priority=5, priority=5, gpus_per_replica=2, wanted=1))
    now, seen = 1000.0, []
    for i in range(4):
        now += 400.0  # (past HOLD_S: nothing kept for h)
        view = [_unread(c) if c.name in unread and i else c for c in cs]
        out, state = share(view, now, state, across, {}, {POOL: sum((c.bound or 0) * c.gpus_per_replica for c in cs)})
        cs, running = step(cs, out)
        seen.append((_shares(out), running))
        if i == 0:
            assert running[("T", "u1")] == 1 and running[("T", "u2")] == 0, running  # the older pod got h's GPUs
            cs = [dataclasses.replace(c, wanted=6) if c.name == "w" else c for c in cs]
    return seen


@MODES
@pytest.mark.parametrize("unread", [(), ("u1",)], ids=["all-read", "u1-unread"])
def test_control_read_or_one_unread_w_is_granted_no_gpu_u1_runs_on(across, unread):
    for shares, running in _memory(across, unread):
        assert shares[("W", "w")] == 4 and running[("T", "u1")] == 1, (shares, running)


@MODES
# Fixed (was a strict xfail): pass 35 finding 3 (medium): the memory of unread backends places those the last read set apart last, but u1's set-apart pod is older than u2's and runs: with both unread u1's memory is kept and w is granted u1's GPUs (12 granted in a pool of 8)
def test_two_unread_backends_grant_no_gpu_an_older_set_apart_replica_runs_on(across):
    for shares, running in _memory(across, ("u1", "u2")):
        assert running[("T", "u1")] == 1, running
        assert shares[("W", "w")] == 4, (shares, running)


# --- (4) _never_placed does not see a higher pod priority's growth this pass -------------------------------------------

def _higher_growth(v2: bool = True, w4: bool = True):
    """Pool 12: X's x (class 0) runs two 6-GPU replicas; T's t0 (class 5) has two Pending 6-GPU replicas at its floor;
    ``v2``: V's v2 (class 10) wants one 1-GPU replica; ``w4``: W's w4 (class 5) wants one 3-GPU replica; T's Pending
    3-GPU class-0 bare pod."""
    cs = [claim("T", "t0", 12, class_priority=5, gpus_per_replica=6, current=2, held=2, bound=0, wanted=2,
                min_replicas=2), running_claim("X", "x", 12, 2, 6)]
    if w4:
        cs.append(claim("W", "w4", 12, class_priority=5, gpus_per_replica=3, wanted=1))
    if v2:
        cs.append(claim("V", "v2", 12, class_priority=10, wanted=1))
    return cs, [("T", 3, 0, 1, 0)]


@MODES
@pytest.mark.parametrize("shape", [dict(v2=False), dict(w4=False)], ids=["no-v2", "no-w4"])
def test_control_without_the_higher_growth_or_the_equal_the_tenant_gets_what_the_scheduler_alone_gives(across, shape):
    cs, bare = _higher_growth(**shape)
    for claims, out, running, _, _, us in _runs(cs, across, 2, bare):
        alone = _both_orders(claims, out, us)
        assert any(_tenant_gpus(claims, running, us) <= _tenant_gpus(claims, ran, us) for ran in alone), (running,
                                                                                                          alone)


@MODES
# Open (2026-12-07, reviewer): the lasting shape of finding 4 (the fuzz's trial 314: a higher pod priority's Pending
# replicas) is fixed; this shape needs step 1 to see the growth step 3 grants a higher pod priority in the same pass,
# and heals a sync later, when that growth is Pending replicas step 1 counts. Medium as it stands.
# Fixed (was a strict xfail): pass 35 finding 4 (high; this shape heals): _never_placed counts both of t0's Pending 6-GPU replicas beside the pods, not beside v2's class-10 grant: they hold 12 GPUs, w4 is denied, one of them runs and T's class-0 bare pod takes the 5 GPUs left for a sync (T 9, alone 6; w4 0, alone 1)
def test_a_higher_pod_prioritys_growth_leaves_no_equal_denied_for_the_tenants_lower_pod(across):
    cs, bare = _higher_growth()
    claims, out, running, _, _, us = next(_runs(cs, across, 1, bare))
    alone = _both_orders(claims, out, us)
    assert all(ran[("W", "w4")] == 1 and _tenant_gpus(claims, ran, us) == 6 for ran in alone), alone
    assert running[("W", "w4")] == 1 and running[("bare", 0)] == 0, (_shares(out), running)


# --- (5) _never_placed does not see a scale-down this pass ----------------------------------------------------------

def _scale_down_apart(x_wanted: int = 0, w2: bool = True):
    """Pool 9: X's x3 (class 10) runs one 4-GPU replica and wants ``x_wanted``; V's v4 (class 5) runs one 3-GPU replica
    and has one Pending (older than any new pod); ``w2``: W's w2 (class 10) wants one 3-GPU replica; T's t0 (class 5)
    wants one 3-GPU replica; 2 GPUs idle."""
    cs = [claim("T", "t0", 9, class_priority=5, gpus_per_replica=3, wanted=1),
          running_claim("X", "x3", 9, 1, 4, class_priority=10, wanted=x_wanted),
          claim("V", "v4", 9, class_priority=5, gpus_per_replica=3, current=2, held=2, bound=1, wanted=2)]
    if w2:
        cs.append(claim("W", "w2", 9, class_priority=10, gpus_per_replica=3, wanted=1))
    return cs


@MODES
@pytest.mark.parametrize(("shape", "v4_runs"), [(dict(x_wanted=1), 0), (dict(w2=False), 2)],
                         ids=["no-scale-down", "no-w2"])
def test_control_without_the_scale_down_or_the_short_class_the_pool_agrees_with_the_scheduler(across, shape, v4_runs):
    for claims, out, running, _, _, _ in _runs(_scale_down_apart(**shape), across, 2):
        alone = _both_orders(claims, out)
        assert running[("V", "v4")] == v4_runs and any(running == ran for ran in alone), (_shares(out), running, alone)


@MODES
# Fixed (was a strict xfail): pass 35 finding 5 (high): _never_placed does not see x3's scale-down, so v4's older Pending replica is set apart, dropped (w2 short outranks it), and T's t0 takes its 3 GPUs by the turn draw, for good (the scheduler alone: v4 2, T 0)
def test_an_older_pending_replica_a_scale_down_places_is_not_dropped_for_the_tenants_new_one(across):
    for i, (claims, out, running, _, _, _) in enumerate(_runs(_scale_down_apart(), across, 2)):
        alone = _both_orders(claims, out)
        assert i or all(ran[("V", "v4")] == 2 and ran[("T", "t0")] == 0 for ran in alone), alone
        assert running[("V", "v4")] == 2 and running[("T", "t0")] == 0, (_shares(out), running)


# --- fuzz: scale-downs, set-apart replicas, bare pods, unread claims -------------------------------------------------

def _pool35(rng: random.Random):
    """Pools of 4 to 16 GPUs, 3 to 6 backends (the first two the tenant t's, the rest of v/w/x), 25 % of them a large
    (4/6/8-GPU) replica at its floor with one Pending more than run, the rest 1/2/3/4/8 GPUs with Pending replicas
    30 % of the time; 25 % of those that run scale down; wants up to 4 more; classes 5 (t) and 5/10 (others);
    priorities 0/5; the tenant's bare pods of 1-5 GPUs and classes 0/5, 60 % of the pools."""
    pool = rng.choice([4, 6, 8, 9, 12, 16])
    cs, used = [], 0
    for i in range(rng.randint(3, 6)):
        ns = "t" if i < 2 else rng.choice("vwx")
        big = rng.random() < 0.25
        g = min(pool, rng.choice([4, 6, 8] if big else [1, 1, 2, 3, 4, 8]))
        cur = rng.randint(0, 3) + big
        bound = min(cur - big, max(0, (pool - used) // g))
        if rng.random() < 0.3:
            bound = rng.randint(0, bound)
        used += bound * g
        minimum = cur if big else rng.choice([0, 0, 1, cur])
        wanted = max(cur, minimum) + rng.choice([0, 0, 1, 2, 4])
        if not big and cur and rng.random() < 0.25:
            wanted = rng.randint(0, cur - 1)
            minimum = min(minimum, wanted)
        cp = rng.choice([None, 5]) if ns == "t" else rng.choice([None, None, 5, 10])
        cs.append(claim(ns, f"{ns}{i}", pool, priority=rng.choice([0, 5]), current=cur, held=cur, bound=bound,
                        wanted=wanted, min_replicas=minimum, gpus_per_replica=g, class_priority=cp))
    bare = [("t", rng.choice([1, 2, 3, 4, 5]), 0, rng.randint(1, 2), rng.choice([0, 0, 5]))] if rng.random() < 0.6 \
        else []
    return cs, pool, bare


@pytest.mark.parametrize(("seed", "unread_p"), [(351, 0.15), (352, 0.0)])
def test_fuzz_pass_29s_invariants_hold_with_scale_downs_set_apart_replicas_and_bare_pods(seed, unread_p):
    pass29._fuzz(seed, 300, unread_p, 1.0, _pool35)


def _trial_pool(rng: random.Random, trial: int, unread_p: float | None = None):
    """One pool of the tenant-gain fuzz (``_pool35``): across mode on odd trials with every priority 0 (numbers
    ordering namespaces are the admin's flag), and ``unread_p``: that share of the claims not read (the same each
    sync; pass 36)."""
    cs, pool, bare = _pool35(rng)
    across = trial % 2 == 1
    if across:
        cs = [dataclasses.replace(c, priority=0) for c in cs]
    unread = set() if unread_p is None else {c.key for c in cs if rng.random() < unread_p}
    return cs, pool, bare, across, unread


def tenant_gain_hits(cs, pool, bare, across, unread, syncs: int = 3) -> list[tuple[int, tuple]]:
    """The syncs (with what each read and ran) after which the tenant's GPUs (t's backends and bare pods) are more
    than the scheduler alone gives it (new pods of equals in both orders, and with t's own backends at their shares:
    its own reshuffle is its own doing) and than what it ran plus the GPUs free before, while another namespace runs
    less than with the scheduler alone."""
    def seen(c):
        return pass29._unread(c) if c.key in unread else c
    hits = []
    for i, (claims, out, running, before, alone, us) in enumerate(_runs(cs, across, syncs, bare, seen)):
        def of_t(ran, claims=claims, us=us):
            return sum(ran[c.key] * c.gpus_per_replica for c in claims if c.namespace == "t") + sum(
                ran[("bare", j)] * b[1] for j, b in enumerate(us))
        at_wanted = {c.key: dataclasses.replace(out[c.key], replicas=max(c.wanted, c.min_replicas)) for c in claims}
        own = {k: out[k] if k[0] == "t" else s for k, s in at_wanted.items()}
        orders = [alone, _scheduled(claims[::-1], at_wanted, us), _scheduled(claims, own, us),
                  _scheduled(claims[::-1], own, us)]
        free_before = pool - sum(before[c.key] * c.gpus_per_replica for c in claims) - sum(
            before[("bare", j)] * b[1] for j, b in enumerate(us))
        if not any(of_t(running) <= max(of_t(ran), of_t(before) + max(0, free_before))
                   or not any(running[c.key] < ran[c.key] for c in claims if c.namespace != "t") for ran in orders):
            hits.append((i, (claims, us, _shares(out), running, before, orders)))
    return hits


def _tenant_gain(seed: int, trials: int, unread_p: float | None = None) -> None:
    """No trial of ``seed`` has a sync at which the tenant gains (``tenant_gain_hits``)."""
    rng = random.Random(seed)
    for trial in range(trials):
        cs, pool, bare, across, unread = _trial_pool(rng, trial, unread_p)
        hits = tenant_gain_hits(cs, pool, bare, across, unread)
        assert not hits, (seed, trial, across, unread, hits[0])


@pytest.mark.parametrize("seed", [2, 3])
def test_fuzz_the_tenant_gains_nothing_beyond_the_scheduler_alone_over_scale_downs_and_set_apart_replicas(seed):
    _tenant_gain(seed, 1000)


# Fixed (was a strict xfail): pass 35 finding 4's lasting shape, found by the fuzz (seed 4, trial 314, default, pool 8): t1's Pending class-5 4-GPU replica is judged beside the running pods, not x5's three Pending class-10 replicas placed first; it holds 4 GPUs, x2 is cut for x5 and t1 runs on what that frees, for good (T 0 -> 4; the scheduler alone: x2 5, T 0)
def test_fuzz_the_tenant_gains_nothing_beyond_the_scheduler_alone_seed_4():
    _tenant_gain(4, 1000)
