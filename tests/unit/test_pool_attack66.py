"""Sixty-sixth attacker pass on the GPU pool. Seat: an independent attacker who did not write the code, as a tenant
(namespace T) who may create LLMBackends (any spec fields the CRD allows: priority, minReplicas, maxReplicas, GPUs a
replica, any priorityClassName, W's included) and pods in its own namespace, attacking W. Aimed at passes 64-65's
three fixes in ``share()`` (``others_from``; ``unplaced_for``/``refused_for``/``unheld_after``; and above all 2afe806's
``running_below``: running pods of a lower pod priority at their floors counted in ``feeds_others``,
``leftover_above`` and ``after_siblings`` as what the kube-scheduler preempts for a waiting replica). share()-level
probes over pass 26's ``_runs`` (the kube-scheduler model between syncs, 30 s apart; 12 syncs, past ``HOLD_S``).
Time-boxed pass (2 cores, about 30 minutes).

Search: two seeded fuzzes (not kept as tests; /tmp scripts), each hit judged at sync 1, 5 and 12 against the
scheduler model alone (every backend at max(wanted, minReplicas), claims in both orders: W's worst and T's best of
the two). A hit: a namespace other than T runs fewer GPUs than alone while T runs more. (1) General, seed 1, about
4 800 pools in 100 CPU s (4-16 GPUs, 3-6 backends of T/W/X, 1/2/3/4/8-GPU replicas, classes none/3/5/7/10,
priorities 0/5/10, floors, scale-downs, Pending replicas, T's bare pods 30 %; both modes): with ``wanted`` clamped to
``minReplicas`` one lasting default-mode hit (trial 2521: finding 2's shape) and a few dozen first-sync-only hits
(the pool's one-sync lag against the model's immediate preemption; not classified further). (2) Directed at
``running_below``, seed 7, about 6 100 pools in 90 CPU s (T: one or two levels of class-7/10 Pending replicas of
2/3/4/8 GPUs and low-class floors; W: class-5/7 replicas above their floors, growing, and sometimes a Pending
class-7/10 replica of its own; X: low floors 40 %; default mode): 118 first-sync-only hits, 8 lasting. Run again
against the code before 2afe806 (fe24d03, in a scratch copy): 7 of the 8 are the same there (finding 2's shape:
W's refused Pending replica, W's lower growth, T's lower pods beside it), 1 is new with ``running_below``
(trial 6280: finding 1, reduced below).

PROBES: 7 test functions, 27 cases (15 pass, 12 strict xfail; about 1.5 s).

FINDING 1 (high: deterministic, both modes, lasting - every sync, past HOLD_S - no admin precondition: T uses W's
PriorityClass, which the seat grants; W's shape is an ordinary one, a Pending replica of its large backend; a
regression of 2afe806, the pass-65 fix: the probe's 8 cases pass against fe24d03's share()): step 2 now cuts W's class-7 replicas for a class-10 replica that the
GPUs no pod holds plus T's own class-3 pods would complete, and the give-back keeps the cuts, so the scheduler
preempts fewer of T's pods and W loses what the scheduler alone never takes. Pool 12: T's t2 (class 3, 1-GPU,
minReplicas 3) runs 3; W's w4 (class 7, 1-GPU, minReplicas 2) runs 4; 5 GPUs idle; T's t0 (class 10, priority 0,
8-GPU) has 2 Pending replicas, T's t1 (class 10, priority 10, 8-GPU) 1; W's w5 (class 10, priority 10, 8-GPU) 1.
The three 8-GPU grants leave step 2 a deficit of 19, so the floor check (``preemptible`` below the victim >=
``-free``) does not stop it; ``feeds_others`` for the cut of w4 (taker t1, next waiting replica t0) now reads
``has`` 5 + ``running_below(10)`` 7 >= 8 (before 2afe806: 5 + 2 above w4's floor < 8, refused), so w4 is cut twice,
to its floor. ``leftover_above`` then spends the freed GPUs first (5 idle + 2 cut = 7) and the lower pods for the
rest (t0 takes 8), leaves 0, and keeps both cuts. Shares (t0, t1, t2, w4, w5) = (1, 1, 3, 2, 1) every sync: t0
runs on the 5 idle GPUs, w4's 2 and one of t2's pods; t2 keeps 2, w4 runs 2. The scheduler alone: the first class-10
pod preempts the lowest pods first, t2's 3 (5 + 3 = 8), and never touches w4 (w4 4, t2 0; W 4 GPUs, or 12 where
w5's pod is the older one). T gains 2 GPUs, W loses 2, for good. The same in ``across`` mode, with pools of 11 and
13 (W loses 1 and 2); with t2 in a third namespace X, W still loses 2 and X keeps them. Without t2, without w5, or
with t0 wanting 1, w4 keeps 4 (W's w5 matters: with X's or T's replica there, the cut feeds a third namespace and is
refused, or heals). Probe ``test_ws_replicas_are_cut_for_a_class_that_ts_lower_pods_and_idle_gpus_would_place``;
control ``test_control_without_ts_lower_pods_w5_or_t0s_second_replica_w4_keeps_its_replicas``. Suspected fix: the
scheduler preempts the lowest pod priority first, so a cut of a victim at level lv is needed only for what the
GPUs no pod holds, the cuts of levels below lv and the running pods of pod priorities below lv (``running_below(lv)``
less what higher waiting replicas took of them) do not complete. In ``leftover_above``/``after_siblings`` spend
those lower pods BEFORE the GPUs the cut of lv freed (today the freed GPUs go first, so a cut the lower pods make
needless is never given back); and in ``feeds_others`` do not count the victim's own level as freeable beyond what
the pods below it leave short.

FINDING 2 (high: deterministic, default mode, lasting - every sync, past HOLD_S - no admin precondition: T uses W's
PriorityClass, which the seat grants; W's shape is an ordinary one; NOT new with passes 64-65: present at 544271c
and fe24d03 alike; pass 64 finding 1's fix does not reach it, pass 65's suggestion (b) would): a Pending replica of
W whose own reshuffle step 2 refuses (``third_waits``: T's Pending pods of W's class would take what the cut frees)
keeps its grant, and ``unplaced_for`` gives W's lower growth back only GPUs no pod holds; none is idle, so W's growth
that the scheduler places by preempting T's LOWER running pods is never granted, and T's lower pods keep their GPUs.
Pool 4: W's w1 (class 7, priority 5, 4-GPU) 1 Pending replica; W's w2 (class 7, priority 0, 1-GPU) runs 3, wants 6;
T's t0 (class 3, 1-GPU) runs 1; T's t3 (class 7, 2-GPU) 2 Pending replicas that never fit. Shares (t0, t3, w1, w2) =
(1, 2, 1, 3) every sync: t0 runs 1 GPU beside W's class-7 demand. The scheduler alone: w2's next pod preempts t0
(t3's 2-GPU pod cannot: 1 GPU below it; w1's 4-GPU pod neither): w2 4, t0 0 (W 4 GPUs). The same with t0 of no class,
at minReplicas 1, and with t3 wanting 1. Without t3 the pool makes W's own reshuffle (w1 1, W 4 GPUs); without w1,
w2 4; in ``across`` mode w1 runs. Fuzz (2) trials 2396, 3768, 3841, 4022, 4183, 4913, 4971 look the same shape (not
each reduced). Probe ``test_ws_refused_replica_keeps_ws_growth_off_ts_lower_pods``; control
``test_control_without_ts_class_pods_or_w1_or_across_w_runs_4_gpus``. Suspected fix: ``unplaced_for`` (or step 3's
room for a grower of the refused level and below) counts, beside the GPUs no pod holds, the running pods of pod
priorities below the grower's that the scheduler preempts for it (``staying_at`` below its level, not yet counted
for the refused replicas), up to the refused replicas' GPUs; or the refused replica's grant is dropped for the sync
when the GPUs no pod holds and the lower pods do not place it.

HELD: (1) T's floors counted twice by several waiting replicas: T's two class-10 4-GPU Pending replicas beside T's
3-GPU class-0 floor and W's class-5 pods above their floor (pool 7): W is cut to 3, as the scheduler alone preempts
(``leftover_above``'s ``lower_used`` keeps the floor for the first replica):
``test_ts_floor_counted_for_two_waiting_replicas_takes_no_more_of_w``. (2) A third namespace's Pending class-10
replica in finding 1's scene (X's instead of W's w5): the cut of w4 is refused as feeding X, w4 keeps 4:
``test_a_third_namespaces_class_pod_stops_the_cut_w4_keeps_its_replicas``. (3) Statuses in both findings' scenes
name no backend of another namespace: ``test_statuses_name_no_other_namespaces_backend``. (4) Finding 1 with T's t5 in
place of W's w5 heals before sync 12 (not a T attack: T's own class-10 replicas then reshuffle T).

SUSPECTED, NOT SHOWN: (a) ``after_siblings`` takes ``running_below(v.level)`` whole, not less what the waiting
replicas above v's level took in ``leftover_above`` (``lower_used``): lower floors counted again for v's siblings, so
a sibling's cut may be kept needlessly; not built to a scene in the time box. (b) ``leftover_above`` subtracts
``lower_used`` across levels: floors a class-10 replica took between levels 5 and 10 are subtracted again from a
class-5 replica's ``running_below(5)`` (undercount: a cut given back that W's own reshuffle needed); not built.
(c) Both findings through the production loop (pass 48's ``_loop``) with pods read per node. (d) The first-sync-only
hits of both fuzzes (not classified).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): both findings. Finding 1 (the regression of 2afe806): ``leftover_above`` now spends,
for each waiting replica, the running pods below the cuts' level first (the scheduler preempts the lowest first), then
the GPUs the cuts freed, then the running pods between; ``after_siblings`` spends the lower pods the waiting above left
(``below_left``) before the freed GPUs; so a cut those pods make needless is given back (w4 keeps 4). Finding 2: step
3's preemption cap beside the higher pod priorities' grants adds back the GPUs granted to Pending replicas no pod will
hold this sync (``unplaced_from``), no more than the grower's pods may be placed on (``left_for``: the GPUs no pod holds
and the lower running pods the scheduler preempts for it once the Pending replicas before it are placed), and
``unplaced_for`` counts those lower pods too: W's w2 preempts T's t0 (W 4 GPUs). A first form of finding 2's fix (the
cap with the whole unplaced count) broke pass 34 seed 344 trial 360 (a tenant's class-5 growth beside an equal running
pod that fills the pool); bounded by ``left_for`` it holds.
"""
from __future__ import annotations

import pytest
from test_pool_attack26 import _runs
from test_pool_attack28 import MODES, claim
from test_pool_attack64 import assert_statuses_name_no_other_namespaces_backend

SYNCS = 12  # 12 syncs 30 s apart: past HOLD_S (300 s), so step 4's hysteresis has healed what it would


def _c(ns, name, pool, cls, priority, g, run, current, wanted, min_replicas=0):
    return claim(ns, name, pool, class_priority=cls, priority=priority, current=current, held=current, bound=run,
                 wanted=wanted, min_replicas=min_replicas, gpus_per_replica=g)


def _last(cs, across, syncs=SYNCS):
    return [running for _, _, running, _, _, _ in _runs(cs, across, syncs)]


def _ns_gpus(cs, running, namespace: str) -> int:
    return sum(running.get(c.key, 0) * c.gpus_per_replica for c in cs if c.namespace == namespace)


# --- (1) running_below: W's replicas cut for a class the idle GPUs and T's lower pods would place ----------------


def _lower_first(pool: int = 12, t2: str | None = "T", w5: str | None = "W", t0: int = 2):
    """Pool ``pool``: ``t2``'s t2 (class 3, 1-GPU, min 3) runs 3; W's w4 (class 7, 1-GPU, min 2) runs ``pool - 8``;
    T's t0 (class 10, priority 0, 8-GPU) ``t0`` Pending replicas; T's t1 (class 10, priority 10, 8-GPU) 1 Pending;
    ``w5``'s w5 (class 10, priority 10, 8-GPU) 1 Pending."""
    cs = []
    if t2:
        cs.append(_c(t2, "t2", pool, 3, 0, 1, 3, 3, 3, 3))
    cs.append(_c("T", "t0", pool, 10, 0, 8, 0, t0, t0))
    cs.append(_c("W", "w4", pool, 7, 0, 1, pool - 8, pool - 8, pool - 8, 2))
    cs.append(_c("T", "t1", pool, 10, 10, 8, 0, 1, 1))
    if w5:
        cs.append(_c(w5, "w5", pool, 10, 10, 8, 0, 1, 1))
    return cs


@MODES
@pytest.mark.parametrize("kw", [dict(), dict(pool=11), dict(pool=13), dict(t2="X")],
                         ids=["pool-12", "pool-11", "pool-13", "lower-pods-of-x"])
# Fixed (was a strict xfail): pass 66 finding 1: running_below lets step 2 cut W's class-7 replicas for a class-10 replica that idle GPUs and T's class-3 pods complete, and leftover_above spends the freed GPUs first, so the cuts are kept for good
def test_ws_replicas_are_cut_for_a_class_that_ts_lower_pods_and_idle_gpus_would_place(across, kw):
    """The scheduler alone preempts the lowest pods first (t2's 3 beside the idle GPUs) and never touches w4."""
    cs = _lower_first(**kw)
    runs = _last(cs, across)
    w4 = next(c for c in cs if c.name == "w4")
    for running in runs[1:]:
        assert running[w4.key] == w4.bound, runs[-1]


@MODES
@pytest.mark.parametrize("kw", [dict(t2=None), dict(w5=None), dict(t0=1)], ids=["no-t2", "no-w5", "t0-wants-1"])
def test_control_without_ts_lower_pods_w5_or_t0s_second_replica_w4_keeps_its_replicas(across, kw):
    cs = _lower_first(**kw)
    runs = _last(cs, across)
    for running in runs[1:]:
        assert running[("W", "w4")] == 4, runs[-1]
        assert running.get(("T", "t2"), 0) == 0, runs[-1]  # (the scheduler preempts t2 for a class-10 pod)


# --- (2) W's refused Pending replica keeps W's growth off T's lower running pods -------------------------------


def _refused(t3: int = 2, w1: bool = True, t0_class: int | None = 3, t0_min: int = 0):
    """Pool 4: W's w1 (class 7, priority 5, 4-GPU) 1 Pending; W's w2 (class 7, priority 0, 1-GPU) runs 3, wants 6;
    T's t0 (class ``t0_class``, 1-GPU, min ``t0_min``) runs 1; T's t3 (class 7, 2-GPU) ``t3`` Pending replicas."""
    pool = 4
    cs = [_c("T", "t0", pool, t0_class, 0, 1, 1, 1, 1, t0_min)]
    if w1:
        cs.append(_c("W", "w1", pool, 7, 5, 4, 0, 1, 1))
    cs.append(_c("W", "w2", pool, 7, 0, 1, 3, 3, 6))
    if t3:
        cs.append(_c("T", "t3", pool, 7, 0, 2, 0, t3, t3))
    return cs


@pytest.mark.parametrize("kw", [dict(), dict(t0_class=None), dict(t0_min=1), dict(t3=1)],
                         ids=["t0-class-3", "t0-no-class", "t0-at-its-floor", "t3-wants-1"])
# Fixed (was a strict xfail): pass 66 finding 2: W's refused Pending replica keeps its grant and unplaced_for returns only idle GPUs, so W's growth never preempts T's lower t0 and t0 keeps its GPU beside W's class-7 demand for good
def test_ws_refused_replica_keeps_ws_growth_off_ts_lower_pods(kw):
    """Fixed: the GPUs granted to W's refused replica that no pod will hold leave step 3's preemption cap
    (``unplaced_from``), and ``unplaced_for`` counts the lower running pods the scheduler preempts for the grower."""
    cs = _refused(**kw)
    runs = _last(cs, False)
    for running in runs[-3:]:
        # the scheduler alone: w2's next class-7 pod preempts t0 (w2 4, t0 0; W 4 GPUs)
        assert running[("T", "t0")] == 0 and _ns_gpus(cs, running, "W") == 4, runs[-1]


@pytest.mark.parametrize(("kw", "across"), [(dict(t3=0), False), (dict(w1=False), False), (dict(), True)],
                         ids=["no-t3", "no-w1", "across"])
def test_control_without_ts_class_pods_or_w1_or_across_w_runs_4_gpus(kw, across):
    cs = _refused(**kw)
    runs = _last(cs, across)
    for running in runs[-3:]:
        assert running[("T", "t0")] == 0 and _ns_gpus(cs, running, "W") == 4, runs[-1]


# --- HELD -------------------------------------------------------------------------------------------------------


@MODES
def test_ts_floor_counted_for_two_waiting_replicas_takes_no_more_of_w(across):
    """Pool 7: T's th (class 10, 4-GPU) 2 Pending; T's tl (no class, 1-GPU, min 3) runs 3; W's w (class 5, 1-GPU)
    runs 4. The scheduler alone: th's first pod preempts tl's 3 and one of w's; the second finds 3 below it."""
    pool = 7
    cs = [_c("T", "th", pool, 10, 0, 4, 0, 2, 2), _c("T", "tl", pool, None, 0, 1, 3, 3, 3, 3),
          _c("W", "w", pool, 5, 0, 1, 4, 4, 4)]
    for running in _last(cs, across):
        assert running[("W", "w")] == 3 and running[("T", "th")] == 1 and running[("T", "tl")] == 0, running


@MODES
def test_a_third_namespaces_class_pod_stops_the_cut_w4_keeps_its_replicas(across):
    cs = _lower_first(w5="X")
    for running in _last(cs, across)[1:]:
        assert running[("W", "w4")] == 4, running


@pytest.mark.parametrize("scene", ["lower-first", "refused"])
def test_statuses_name_no_other_namespaces_backend(scene):
    assert_statuses_name_no_other_namespaces_backend(_lower_first() if scene == "lower-first" else _refused(), False)
