"""Fifty-third attacker pass on the GPU pool. Seat: an independent attacker who did not write the code, as a tenant
(namespace T) who may create LLMBackends and pods (any labels, ownerReferences, annotations, nodeSelectors, the
priorityClassName it may use) in its own namespace. Aimed at the newest fix, 17a2702 + 0fb93c9:
``Unclaimed.fits_free`` (``holding.unclaimed_waiting`` with ``held_by_node = gpus_held_by_node_priority(bound)``: a
Pending pod no claim covers says whether a node it could run on has its GPUs free of pods of its pod priority and
above) and its use in step 1's ``placed_first`` (``pool._never_placed``: an older pod of another namespace takes a
Pending replica's room only in the free GPUs and only if ``fits_free is not False``), on pools of TWO nodes. All pool
probes run two syncs through the production path (``Operator._share_pools`` over live pod lists: pass 48's
``_loop``; pass 52's two-node ``_nodes`` and ``_bare``). The kube-scheduler alone is argued in each docstring (pods of
one pod priority placed oldest first, a pod that fits no single node's free GPUs skipped; a higher pod priority
preempts lower pods). Time-boxed pass (2 cores, 20 minutes).

PROBES: 7 test functions, 26 cases (21 pass, 5 strict xfail; about 4 s).

FINDING 1 (high: deterministic, both modes, lasting while the tenant keeps its pods; all pods the tenant's own, in its
own namespace; no admin-made precondition; what 17a2702 left open of pass 52 finding 1): ``fits_free`` is judged for
each Pending pod ALONE against the nodes as the bound pods leave them, never against the older Pending pods that
land before it. ``placed_first`` then sums the GPUs of every older pod that "fits free" against the pool's free GPUs
summed over its nodes. So N pods that each fit a node's free GPUs alone, but not together, all count as taking free
GPUs (``first``), and step 3's room of every taker of that pod priority loses them. Two shapes, both with T's t2
(8-GPU, one Pending replica created 10:30 that no node can hold: "never placed", holds nothing) so that
``placed_first`` runs, every pod priority 0, pool n1 (8) + n2 (8):
(pinned) T's t (2-GPU, min 3) runs 3 on n1, W's w (2-GPU, min 1) runs 3 on n2 and wants 5; T's two bare 2-GPU pods
pinned (nodeSelector ``kubernetes.io/hostname: n1``) created 10:10 and 10:11. 2 GPUs free on each node. Each bare pod
fits n1's 2 free GPUs alone: both count, ``first`` = 4, w's room 0: the pool grants w 3, sync after sync. The
kube-scheduler alone: bare-0 lands on n1, bare-1 fits nowhere (n1 full), w's new pods: one lands on n2: w 4.
(fragmented, NO nodeSelector at all) t runs 5 1-GPU pods on n1, w 5 1-GPU pods on n2 and wants 7; T's three bare
2-GPU pods created 10:10-10:12. 3 GPUs free on each node: each bare pod fits alone, the three count 6 = all free:
the pool grants w 5. The scheduler alone: bare-0 and bare-1 take 2 on each node, bare-2 fits nowhere (1 + 1 free),
and w's two new 1-GPU pods take the last GPU of each node: w 7.
W's growth waits for good on GPUs the tenant's pods could never take. Probe
``test_older_pods_that_fit_a_node_only_one_at_a_time_take_no_growth_of_w`` (both shapes, both modes); controls
``test_control_without_ts_pending_replica_w_grows_as_the_scheduler_places`` (no t2: w 5 / 7),
``test_control_pods_that_fit_together_take_what_the_scheduler_gives_them`` (one pinned pod: w 4; one or two
fragmented pods: w 7); held ``test_held_older_pods_that_fit_together_take_the_free_gpus_first`` (two unpinned pods,
or one pinned to each node: w 3, as the scheduler places them first). Suspected fix: judge ``fits_free`` with a
ledger, not per pod: in ``unclaimed_waiting`` (or in ``placed_first``, which has the order) place the older Pending
pods of each pod priority oldest first on a node they could run on, each taking its GPUs from that node's free
GPUs at its level (``held_by_node`` plus the older pods placed so far), and count as taking free GPUs only the pods so
placed (first fit is enough to be safe for the others if it never counts more than a real placement could; at least
cap ``took_free`` by the per-node sum of ``free // size`` over the pods' sizes).

FINDING 2 (medium: deterministic, needs ``--priority-across-namespaces`` (admin-made); lasting; the tenant GAINS GPUs
from W): the same miscount makes the pool cut W's Pending replica that the scheduler would place now, and hand its
GPUs to the tenant. Across mode, pool n1 (8) + n2 (8), every pod priority 0: T's t (2-GPU, min 3) runs 3 on n1; W's
w (2-GPU, min 1) runs 3 on n2 and has one Pending replica created 10:30 (wants 4); T's x (spec priority 10, 2-GPU,
min 1) one Pending replica created 10:40; T's two bare 2-GPU pods pinned to n1 (10:10, 10:11). Step 1 counts both
bare pods as taking the 4 free GPUs: w's Pending replica is "never placed", and, x short and outranking it, it goes:
the pool scales w 4 -> 3 sync after sync, and x's pod (the only one left that fits n2) takes n2's 2 GPUs. The
scheduler alone: bare-0 lands on n1, w's older Pending pod on n2 (w 4), x waits; the pool's own rule with ONE pinned
bare pod agrees (w 4: it does not cut w's replica for x). Probe
``test_pinned_older_pods_cut_no_pending_replica_the_scheduler_would_place`` (across); controls
``test_control_one_pinned_pod_or_default_mode_keeps_ws_pending_replica`` (one bare pod, across: 4; two, default mode:
4); held: with two unpinned bare pods the pool cuts w's Pending replica too (3), and there the scheduler would never
place it before the older pods either (held in the same test, ``unpinned-across``). Suspected fix: finding 1's.

HELD: (1) an older unpinned pod, or pods that fit the nodes together (one pinned to each node), take the free GPUs
first, as the scheduler places them (probe). (2) One pinned pod in a node's free GPUs takes just those: W gets the
other node's (control). (3) ``fits_free`` counts a node's GPUs held by pods of a LOWER pod priority as free to the
pod: the scheduler would preempt them for it, and step 1's ``free`` at that level counts them free too, so the two
agree: class-5 bare pods pinned to a node full of the tenant's class-0 pods at their floors take none of W's class-5
growth on the other node, one pod or five (probe
``test_held_higher_pods_pinned_to_a_node_of_lower_pods_take_no_growth_of_w``). (4) A pod whose bound list read fails
gets ``fits_free`` None and counts as before (pass 52 finding 1's shape) - only on an API failure, which the tenant
does not control.

SUSPECTED, NOT SHOWN: (a) finding 1's ``fits_free`` is also blind to the scheduler's scoring: with free GPUs 2 on n1
and 4 on n2, an older 2-GPU bare pod may land on n2 (LeastAllocated) and leave W's 4-GPU replica no node; the pool
counts it taking 2 of 6 and grants W the replica - W waits, but the scheduler alone does the same (not a tenant
lever; not built). (b) ``fits_free`` flips between syncs as the tenant's own bound pods come and go on the pinned
node (delete and recreate a pod there): each flip moves ``first`` and ``behind_older`` by that pod's GPUs for a sync -
churn of W's growth decisions (low; not built). (c) a node in two pools (overlapping node selectors): the same
Pending pod is counted in both pools' ``waiting_others`` with a ``fits_free`` judged on the shared node in each; with
finding 1's ledger this needs one ledger across pools (not built).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): findings 1 and 2: ``unclaimed_waiting`` judges ``fits_free`` with a ledger, the
scheduler's queue order (the higher pod priority, then the older first): each pod lands on the first node it could
run on whose GPUs are free of pods of its pod priority and above and of the Pending pods placed before it; one that
lands nowhere does not fit free. The probes pass."""

from __future__ import annotations

import pytest
from test_pool_attack48 import MODES, _loop, _operator, _rs_pod, _target
from test_pool_attack49 import _at
from test_pool_attack52 import NODES2, SYNC_S, _bare, _nodes

# --- (F1) older pods that fit a node one at a time all count as taking its free GPUs ---------------------------------


def _growth_scene(monkeypatch, across, shape="pinned", pins=("n1", "n1"), nbare=3, t2=True, syncs=2):
    """Pool n1 (8) + n2 (8), every pod priority 0, T's t2 (8-GPU) one Pending replica created 10:30 (``t2``).
    ``pinned``: T's t (2-GPU, min 3) runs 3 on n1, W's w (2-GPU, min 1) runs 3 on n2 and wants 5, T's bare 2-GPU
    pods created 10:10, 10:11, ... pinned to ``pins`` (``None``: not pinned). ``fragmented``: t and w run 5 1-GPU pods
    each (t on n1, w on n2; w wants 7), T's ``nbare`` bare 2-GPU pods, no selector. Returns w's decisions."""
    frag = shape == "fragmented"
    g, n = (1, 5) if frag else (2, 3)
    t = [_at(_rs_pod("T", "t", f"t-abc-{i}", g, "n1"), 1) for i in range(n)]
    w = [_at(_rs_pod("W", "w", f"w-abc-{i}", g, "n2"), 1) for i in range(n)]
    p2 = [_at(_rs_pod("T", "t2", "t2-abc-0", 8, None), 30)] if t2 else []
    b = [_bare("T", f"bare-{i}", 2, 10 + i, pin=pin) for i, pin in enumerate((None,) * nbare if frag else pins)]
    targets = {("W", "w"): _target("W", "w", n, g, pool_gpus=16, nodes=NODES2, min_replicas=1),
               ("T", "t"): _target("T", "t", n, g, pool_gpus=16, nodes=NODES2, min_replicas=n),
               ("T", "t2"): _target("T", "t2", len(p2), 8, pool_gpus=16, nodes=NODES2, min_replicas=len(p2))}
    operator, out = _operator(), []
    for i in range(syncs):
        decisions = _loop(monkeypatch, targets, {("W", "w"): w, ("T", "t"): t, ("T", "t2"): p2}, w + t + p2 + b,
                          {("W", "w"): n + 2, ("T", "t"): n, ("T", "t2"): len(p2)}, _nodes(), across=across,
                          now=1000.0 + SYNC_S * i, operator=operator)[0]
        out.append(decisions[("W", "w")])
    return out


@MODES
@pytest.mark.parametrize("shape, expected", [("pinned", 5), ("fragmented", 7)])
def test_control_without_ts_pending_replica_w_grows_as_the_scheduler_places(monkeypatch, across, shape, expected):
    """No t2: no claim of pod priority 0 waits, ``placed_first`` does not run, w is granted all it wants (the
    scheduler then places the older bare pods first; the pool's grant is not a stall)."""
    assert _growth_scene(monkeypatch, across, shape, t2=False) == [expected, expected]


@MODES
@pytest.mark.parametrize("shape, kw, expected", [
    ("pinned", {"pins": ("n1",)}, 4), ("fragmented", {"nbare": 1}, 7), ("fragmented", {"nbare": 2}, 7)],
    ids=["one-pinned", "one-fragmented", "two-fragmented"])
def test_control_pods_that_fit_together_take_what_the_scheduler_gives_them(monkeypatch, across, shape, kw, expected):
    """One bare pod pinned to n1 takes n1's 2 free GPUs, w gets n2's: 4. One or two 2-GPU bare pods in the
    fragmented pool land one a node (3 free each), w's two 1-GPU pods take what is left: 7."""
    assert _growth_scene(monkeypatch, across, shape, **kw) == [expected, expected]


@MODES
@pytest.mark.parametrize("pins", [(None, None), ("n1", "n2")], ids=["unpinned", "one-pinned-to-each-node"])
def test_held_older_pods_that_fit_together_take_the_free_gpus_first(monkeypatch, across, pins):
    """Two older bare pods that the two nodes hold together: the scheduler places them before w's new pods, w stays
    at 3, as the pool grants."""
    assert _growth_scene(monkeypatch, across, "pinned", pins=pins) == [3, 3]


# FINDING 1 (high): fits_free is judged per pod alone: older Pending pods that each fit a node's free GPUs but not together (two pinned to one node; three 2-GPU pods on 3 + 3 free GPUs) all count as taking the free GPUs, W's growth waits for good
# Fixed (was a strict xfail): pass 53 finding 1: older Pending pods that each fit a node's free GPUs alone (fits_free per pod) but not together all count in placed_first: W's growth waits for good (pinned: 3 of 4; fragmented: 5 of 7)
@MODES
@pytest.mark.parametrize("shape, expected", [("pinned", 4), ("fragmented", 7)])
def test_older_pods_that_fit_a_node_only_one_at_a_time_take_no_growth_of_w(monkeypatch, across, shape, expected):
    assert _growth_scene(monkeypatch, across, shape) == [expected, expected]


# --- (F2) the same miscount cuts W's Pending replica for the tenant's higher-priority backend (across) --------------


def _cut_scene(monkeypatch, across, pins=("n1", "n1"), syncs=2):
    """Pool n1 (8) + n2 (8), every pod priority 0. T's t (2-GPU, min 3) runs 3 on n1; W's w (2-GPU, min 1) runs 3 on
    n2 and one Pending replica created 10:30; T's x (spec priority 10, 2-GPU, min 1) one Pending replica created
    10:40; T's bare 2-GPU pods created 10:10, 10:11, ... pinned to ``pins``. Returns w's decisions."""
    t = [_at(_rs_pod("T", "t", f"t-abc-{i}", 2, "n1"), 1) for i in range(3)]
    w = [_at(_rs_pod("W", "w", f"w-abc-{i}", 2, "n2"), 1) for i in range(3)] + [
        _at(_rs_pod("W", "w", "w-abc-p", 2, None), 30)]
    x = [_at(_rs_pod("T", "x", "x-abc-0", 2, None), 40)]
    b = [_bare("T", f"bare-{i}", 2, 10 + i, pin=pin) for i, pin in enumerate(pins)]
    targets = {("W", "w"): _target("W", "w", 4, 2, pool_gpus=16, nodes=NODES2, min_replicas=1),
               ("T", "t"): _target("T", "t", 3, 2, pool_gpus=16, nodes=NODES2, min_replicas=3),
               ("T", "x"): _target("T", "x", 1, 2, pool_gpus=16, nodes=NODES2, priority=10, min_replicas=1)}
    operator, out = _operator(), []
    for i in range(syncs):
        out.append(_loop(monkeypatch, targets, {("W", "w"): w, ("T", "t"): t, ("T", "x"): x}, w + t + x + b,
                         {("W", "w"): 4, ("T", "t"): 3, ("T", "x"): 1}, _nodes(), across=across,
                         now=1000.0 + SYNC_S * i, operator=operator)[0][("W", "w")])
    return out


@pytest.mark.parametrize("across, pins, expected", [
    (True, ("n1",), 4), (False, ("n1", "n1"), 4), (True, (None, None), 3)],
    ids=["one-pinned-across", "two-pinned-default", "unpinned-across"])
def test_control_one_pinned_pod_or_default_mode_keeps_ws_pending_replica(monkeypatch, across, pins, expected):
    """One pinned bare pod (across): w's older Pending replica lands on n2 under the scheduler, and the pool keeps
    it (4). Default mode: x does not outrank w, nothing is cut (4). Held, across: two unpinned bare pods take both
    nodes' free GPUs before w's Pending pod under the scheduler too; the pool cuts that replica for x (3), one that
    would not run before them anyway."""
    assert _cut_scene(monkeypatch, across, pins) == [expected, expected]


# FINDING 2 (medium, across mode): two bare pods pinned to n1 both count as taking free GPUs: W's Pending replica, which the scheduler would place on n2 now, is "never placed" and cut for T's x (spec priority 10), whose pod then takes n2's GPUs
# Fixed (was a strict xfail): pass 53 finding 2: with --priority-across-namespaces, two older bare pods pinned to a node with room for one make W's placeable Pending replica 'never placed'; the pool cuts it (w 4 -> 3) for the tenant's x
def test_pinned_older_pods_cut_no_pending_replica_the_scheduler_would_place(monkeypatch):
    assert _cut_scene(monkeypatch, True) == [4, 4]


# --- held: a higher pod pinned to a node full of lower pods at their floors -------------------------------------------


def _preempt_scene(monkeypatch, across, nbare, syncs=2):
    """Pool n1 (8) + n2 (8), class five = 5. T's t (class 0, 2-GPU, min 4) runs 4 on n1 (full, at its floor); W's w
    (class 5, 2-GPU, min 1) runs 2 on n2 and wants 4; T's t2 (class 5, 8-GPU) one Pending replica created 10:30;
    ``nbare`` T bare class-5 2-GPU pods pinned to n1, created 10:10, 10:11, ... Returns w's decisions."""
    t = [_at(_rs_pod("T", "t", f"t-abc-{i}", 2, "n1"), 1) for i in range(4)]
    w = [_at(_rs_pod("W", "w", f"w-abc-{i}", 2, "n2", priority=5), 1) for i in range(2)]
    p2 = [_at(_rs_pod("T", "t2", "t2-abc-0", 8, None, priority=5), 30)]
    b = [_bare("T", f"bare-{i}", 2, 10 + i, pin="n1") for i in range(nbare)]
    for pod in b:
        pod["spec"]["priority"] = 5
    targets = {("W", "w"): _target("W", "w", 2, 2, pool_gpus=16, nodes=NODES2, min_replicas=1,
                                   priority_class="five"),
               ("T", "t"): _target("T", "t", 4, 2, pool_gpus=16, nodes=NODES2, min_replicas=4),
               ("T", "t2"): _target("T", "t2", 1, 8, pool_gpus=16, nodes=NODES2, min_replicas=1,
                                    priority_class="five")}
    operator, out = _operator(), []
    for i in range(syncs):
        out.append(_loop(monkeypatch, targets, {("W", "w"): w, ("T", "t"): t, ("T", "t2"): p2}, w + t + p2 + b,
                         {("W", "w"): 4, ("T", "t"): 4, ("T", "t2"): 1}, _nodes(), classes={"five": 5},
                         across=across, now=1000.0 + SYNC_S * i, operator=operator)[0][("W", "w")])
    return out


@MODES
@pytest.mark.parametrize("nbare", [1, 5])
def test_held_higher_pods_pinned_to_a_node_of_lower_pods_take_no_growth_of_w(monkeypatch, across, nbare):
    """``fits_free`` counts n1's class-0 GPUs free to a class-5 bare pod (the scheduler preempts t's pods for it, at
    their floors or not). The scheduler alone: the bare pods (up to 4) land on n1, a fifth fits nowhere, w's two new
    pods land on n2: w 4. The pool grants 4 with one bare pod and with five."""
    assert _preempt_scene(monkeypatch, across, nbare) == [4, 4]
