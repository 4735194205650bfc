"""Fifty-seventh attacker pass on the GPU pool. Seat: an independent attacker who did not write the code, as a tenant
(namespace T) who may create LLMBackends and pods (any labels, ownerReferences, annotations, nodeSelectors,
affinities, the priorityClassName it may use) in its own namespace, attacking W. Aimed at 71171b7 and 61339af: step
3's give-back of earlier cuts from the last cut's leftover (pool.py), ``set_apart_first`` with
``Claim.waiting_since``, ``holding.could_run_on(nodes, like=)`` with its GPU bound, and the loop's settle memory
``run._landed_memory`` keyed by (namespace, pod priority, GPUs, node). Loop probes run the production path
(``Operator._share_pools`` over live pod lists: pass 48's ``_loop``) on pass 52's two nodes, syncs ``SYNC_S`` (15 s)
apart; share()-level probes use pass 26's ``_runs``. Time-boxed pass (2 cores, 30 minutes).

PROBES: 7 test functions, 19 cases (15 pass, 4 strict xfail; about 3 s).

FINDING 1 (high by the rubric - deterministic, both modes, W waits for good while the tenant re-creates one bare
pod every 30 s alternating its GPU count, no admin precondition - with pass 54 finding 2's caveat that
InterPodAffinity is a documented "Not covered" filter; a new, worse shape of pass 56 finding 3, which 61339af fixed
for a pod re-created under another name only): the settle memory is keyed by (namespace, pod priority, GPUs, node)
and a kind not seen for ``SCHEDULER_SETTLE_S`` is forgotten, so a pod of another SIZE starts its own clock. Pass 56's
scene (pool n1 (8) + n2 (8), every pod priority 0; T's t (2-GPU) runs 4 on n1; W's w (2-GPU, min 1) runs 2 on n2
and wants 4; T's t2 (8-GPU) one Pending replica of 10:30; T's bare pod with a required anti-affinity to w's pods):
T replaces its bare pod every two syncs (30 s), 2 GPUs, then 1, then 2 ...; each kind is new (or forgotten) when it
comes back, the ledger lands it on n2 and the pool grants w 3 at every sync (8 syncs shown). The scheduler alone:
the bare pod never lands on n2 (anti-affinity), w 4. Probe
``test_a_bare_pod_alternating_its_gpus_holds_no_growth_of_w_for_good``; control
``test_control_one_kind_kept_is_refused_after_the_settle_time_and_without_t2_w_grows`` (one kind kept, 2 or 1 GPU:
[3, 3, 4, 4, 4, 4, 4, 4]; alternating without t2: 4 throughout). Suspected fix: keep the clock by (namespace, node)
- a namespace's pods the scheduler leaves Pending beside free GPUs of a node for the settle time are refused there
whatever their size or priority, until one of that namespace's pods binds there - or, better, read the pod's
PodScheduled condition: a pod judged Unschedulable (lastTransitionTime/lastProbeTime) after the node's GPUs it would
land on were free is refused there at once.

FINDING 2 (medium: deterministic, both modes, one sync - W's pods are scaled away and come back the next sync, a cold
start - no admin precondition; not from the two commits: 7112f34 and 71171b7 behave the same): step 3's pass-over
``older_waiting(c, v) + g > cuttable_in(c, v.namespace)`` fires with ``older_waiting`` 0 whenever what a namespace
holds above its floors is less than ONE of the taker's replicas, so a tenant whose cuttable GPUs are fewer than a
higher grower's replica is never cut and the pool cuts a higher pod priority of another namespace instead. Pool 6
full: T's t (class 0, 1-GPU, min 0) runs 2; W's w (class 5, 2-GPU, min 0) runs 2; X's h (class 10, 3-GPU) is new and
wants 1. The pool cuts both of w's replicas (t passed over: 0 + 3 > 2) and keeps t's 2: (t, w) = (2, 0); the next sync
w preempts t back: (1, 1). The scheduler alone: h preempts the lowest first - t's two pods, then one of w's - and t's
Pending pod takes the GPU left: (1, 1) at once (the kube-scheduler's reprieve keeps the higher w pod too). Probe
``test_a_tenant_whose_cuttable_gpus_are_fewer_than_one_replica_is_cut_first_as_the_lowest``; control
``test_control_two_class_0_replicas_or_a_smaller_taker_cut_the_lowest_first`` (t runs 3 of class 0 and h asks 3, or t
runs 2 and h asks 2: no pass-over, t's pods make h's room, w keeps 2). Suspected fix: pass a namespace over only where
it has older waiting pods (``older_waiting(c, v) > 0``) that would take what its cuts free; with none, its cuts go to
c together with the next victims', whatever the namespace's total.

HELD: (1) The give-back: a tenant's earlier lower cut below the last cut's pod priority is not given back
(``test_a_give_back_restores_no_cut_below_the_last_cuts_pod_priority``: T's class-0 pods cut, W's class-5 w keeps one,
as the scheduler's lowest-first); a give-back of a victim of the last cut's own size needs a leftover of that size
(read in code: ``back = min(n, usable // gv)``); the books ``given``/``took`` go down by the replicas given back only
for entries ``give`` recorded (``completed`` holds only entries not restored in the loop). (2) ``set_apart_first``: a
backend's set-apart replicas are its youngest pods; an old pod of t's that stands for no replica (adopted, pinned:
``could_run_on`` refuses it) is in ``waiting_since`` but dates none of its set-apart replicas while t has a younger
one (``test_an_old_pod_standing_for_no_replica_dates_no_set_apart_replica``: t 0, w4 2, both modes; through the loop,
a scratch run not kept as a test, the pinned pod of 10:05 and the template pod of 10:40 give ``waiting_since`` both
and W's growth into n2 is 3, as the scheduler places t's 10:40 pod first). (3) ``_landed_memory`` is by namespace: a T
pod cannot make a W pod refused (T cannot create pods in W). (4) The 20 000-trial tenant-gain fuzz (pass 35's
``_tenant_gain`` trial pools, seeds 574-593, 1000 trials each, plus 571-573 at 400): 8 hits, all at the first sync
only (577/770, 577/898, 579/901, 580/354, 582/620, 588/0, 589/243, 593/546; no unread backends), none lasting two
syncs; not classified (finding 2's pass-over may be among them).

SUSPECTED, NOT SHOWN: (a) finding 1 with alternating pod priorities: a class-1 bare pod is landed on n1 over T's own
class-0 pods (the scheduler would preempt them: correct), so only sizes gave a clean shape; with three or more GPU
counts the rotation works with one pod per kind per 30 s too (not built). (b) ``pending_since`` is still
``waiting_since[0]``, an old pod that stands for no replica included: step 1's ``placed_first`` then counts fewer of
the other namespaces' unclaimed pods before t's replica (pre-existing, as ``oldest_waiting``; no gain shown). (c) The
victim choice among equal pod priorities (t 1-GPU x2 and w 2-GPU x2, both class 0, h 3-GPU: the pool cuts w twice,
lasting) rests on which two pods the kube-scheduler reprieves (the oldest): pass 55's "(B) the model's victim choice".
(d) Ties of ``waiting_since`` (creationTimestamp has one-second resolution) go to the tier's order (not built).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): finding 1: the loop also remembers, for each node of a pool, since when it has had each
count of GPUs free (``holding.gpus_free_since``); a Pending pod the scheduler first judged unschedulable
(PodScheduled's lastTransitionTime) ``holding.JUDGED_MARGIN_S`` or more after the node had its GPUs free was judged
with them free: the ledger lands it there no more, at once (a pod created again, of any size, is judged anew). The
rotation scene now gives its pods creation and judgement times on the syncs' clock. Finding 2 stays open (medium,
one sync): passing a namespace over only where it has older waiting pods broke the rules of passes 10, 13 and 41 (a
tenant below every priority cut another namespace's kept replicas; a cut backend then did not fit beneath those that
outrank it); tried, not landed.
"""
from __future__ import annotations

import dataclasses
import datetime

import pytest
from test_pool_attack26 import _runs, _shares
from test_pool_attack28 import MODES, claim, running_claim
from test_pool_attack48 import _loop, _operator, _rs_pod, _target
from test_pool_attack49 import _at
from test_pool_attack52 import NODES2, SYNC_S, _nodes
from test_pool_attack54 import _anti_bare
from test_pool_attack56 import _leftover

# --- (1) the settle memory by (namespace, pod priority, GPUs, node): a pod of another size starts over -------------


def _sized(pod: dict, gpus: int) -> dict:
    for container in pod["spec"]["containers"]:
        for section in container.get("resources", {}).values():
            if "nvidia.com/gpu" in section:
                section["nvidia.com/gpu"] = str(gpus)
    return pod


def _stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rotation(monkeypatch, across, sizes=(2, 1), syncs=8, t2=True):
    """Pass 56's ``_growth`` scene with T's anti-affinity bare pod re-created every two syncs (30 s) under a new name,
    its GPUs cycling through ``sizes``. Returns w's decisions."""
    t = [_at(_rs_pod("T", "t", f"t-abc-{i}", 2, "n1"), 1) for i in range(4)]
    w = [_at(_rs_pod("W", "w", f"w-abc-{i}", 2, "n2"), 1) for i in range(2)]
    p2 = [_at(_rs_pod("T", "t2", "t2-abc-0", 8, None), 30)] if t2 else []
    targets = {("W", "w"): _target("W", "w", 2, 2, pool_gpus=16, nodes=NODES2, min_replicas=1),
               ("T", "t"): _target("T", "t", len(t), 2, pool_gpus=16, nodes=NODES2, min_replicas=len(t)),
               ("T", "t2"): _target("T", "t2", len(p2), 8, pool_gpus=16, nodes=NODES2, min_replicas=len(p2))}
    operator, out = _operator(), []
    for i in range(syncs):
        bare = _sized(_anti_bare(), sizes[(i // 2) % len(sizes)])
        bare["metadata"]["name"] = f"bare-{i // 2}"  # deleted and created anew
        # created just before the sync it is first seen at, and judged by the scheduler a second later (as it does:
        # the sync's clock and the pods' times on one base)
        created = 1000.0 + SYNC_S * 2 * (i // 2) - 1
        bare["metadata"]["creationTimestamp"] = _stamp(created)
        bare["status"]["conditions"] = [{**c, "lastTransitionTime": _stamp(created + 1)}
                                        for c in bare["status"]["conditions"]]
        decisions = _loop(monkeypatch, targets, {("W", "w"): w, ("T", "t"): t, ("T", "t2"): p2}, w + t + p2 + [bare],
                          {("W", "w"): 4, ("T", "t"): len(t), ("T", "t2"): len(p2)}, _nodes(), across=across,
                          now=1000.0 + SYNC_S * i, operator=operator)[0]
        out.append(decisions[("W", "w")])
    return out


# Fixed (was a strict xfail): pass 57 finding 1 (high by the rubric; a documented unmodelled filter): the settle memory is by pod size; T's anti-affinity bare pod re-created every 30 s alternating 2 and 1 GPUs is a new kind each time and lands on n2 in the ledger: w 3 for good (alone: w 4)
@MODES
def test_a_bare_pod_alternating_its_gpus_holds_no_growth_of_w_for_good(monkeypatch, across):
    assert _rotation(monkeypatch, across)[2:] == [4] * 6


@MODES
@pytest.mark.parametrize(("kw", "w"), [(dict(sizes=(2,)), [3, 3] + [4] * 6), (dict(sizes=(1,)), [3, 3] + [4] * 6),
                                       (dict(t2=False), [4] * 8)], ids=["kept-2", "kept-1", "alternating-no-t2"])
def test_control_one_kind_kept_is_refused_after_the_settle_time_and_without_t2_w_grows(monkeypatch, across, kw, w):
    assert _rotation(monkeypatch, across, **kw) == w


# --- (2) step 3's pass-over of a namespace whose cuttable GPUs are fewer than one replica of the taker ------------


def _shield(t_n: int = 2, h_gpus: int = 3):
    """Pool ``t_n`` + 4, full: T's t (class 0, 1-GPU, min 0) runs ``t_n``; W's w (class 5, 2-GPU, min 0) runs 2; X's h
    (class 10, ``h_gpus``-GPU) is new and wants 1."""
    pool = t_n + 4
    return [running_claim("T", "t", pool, t_n, 1, min_replicas=0),
            running_claim("W", "w", pool, 2, 2, min_replicas=0, class_priority=5),
            claim("X", "h", pool, class_priority=10, wanted=1, min_replicas=0, gpus_per_replica=h_gpus)]


@MODES
@pytest.mark.xfail(strict=True, reason="pass 57 finding 2 (medium, one sync): T's class-0 t holds 2 GPUs above its "
                   "floor, fewer than h's 3-GPU replica: step 3 passes T over (older_waiting 0 + 3 > 2) and cuts both "
                   "of W's class-5 replicas: (t, w) = (2, 0), then (1, 1) (alone: (1, 1) at once)")
def test_a_tenant_whose_cuttable_gpus_are_fewer_than_one_replica_is_cut_first_as_the_lowest(across):
    shares = [_shares(out) for _, out, _, _, _, _ in _runs(_shield(), across, 2)]
    assert all(s[("W", "w")] >= 1 and s[("T", "t")] <= 1 for s in shares), shares


@MODES
@pytest.mark.parametrize(("kw", "t", "w"), [(dict(t_n=3), 0, 2), (dict(h_gpus=2), 0, 2)],
                         ids=["t-holds-a-whole-replica", "smaller-taker"])
def test_control_two_class_0_replicas_or_a_smaller_taker_cut_the_lowest_first(across, kw, t, w):
    shares = [_shares(out) for _, out, _, _, _, _ in _runs(_shield(**kw), across, 1)]
    assert [(s[("T", "t")], s[("W", "w")], s[("X", "h")]) for s in shares] == [(t, w, 1)], shares


def test_the_shield_heals_the_next_sync_and_w_is_scaled_away_for_it():
    """Finding 2's cost: W's two running replicas are scaled away at the first sync (pods deleted) and one comes back
    the next (a new pod, a cold start); T keeps a GPU the scheduler would have preempted for that sync."""
    shares = [_shares(out) for _, out, _, _, _, _ in _runs(_shield(), False, 3)]
    assert [(s[("T", "t")], s[("W", "w")]) for s in shares] == [(2, 0), (1, 1), (1, 1)], shares


# --- HELD ------------------------------------------------------------------------------------------------------------


@MODES
def test_a_give_back_restores_no_cut_below_the_last_cuts_pod_priority(across):
    """h (class 10, 3-GPU) needs 3 of a full pool 6: T's t (class 0, 1-GPU) runs 3; W's w (class 5, 3-GPU) runs 1.
    Lowest first: t's three pods make h's room, w is not cut; a leftover never restores the tenant above w."""
    cs = [running_claim("T", "t", 6, 3, 1, min_replicas=0),
          running_claim("W", "w", 6, 1, 3, min_replicas=0, class_priority=5),
          claim("X", "h", 6, class_priority=10, wanted=1, min_replicas=0, gpus_per_replica=3)]
    for _, out, running, _, _, _ in _runs(cs, across, 2):
        assert (running[("T", "t")], running[("W", "w")], running[("X", "h")]) == (0, 1, 1), (_shares(out), running)


@MODES
def test_an_old_pod_standing_for_no_replica_dates_no_set_apart_replica(across):
    """Pass 56's pool 6 (h's growth leaves 2 GPUs; W's w4 3 Pending pods of 500): t's one set-apart replica is its
    pod of 900; its pod of 400 stands for no replica (pinned elsewhere) but is in ``waiting_since``: w4's first."""
    cs = _leftover(t_n=1)
    cs[-1] = dataclasses.replace(cs[-1], waiting_since=(400.0, 900.0))
    for _, out, running, _, _, _ in _runs(cs, across, 2, ages=False):
        assert (running[("T", "t")], running[("W", "w4")]) == (0, 2), (_shares(out), running)
