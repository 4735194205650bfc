"""Fiftieth attacker pass on the GPU pool. Seat: an independent attacker who did not write the code, as a tenant
(namespace T) who may create LLMBackends and pods (any labels, ownerReferences, annotations, nodeSelectors, the
priorityClassName it may use) in its own namespace. Aimed at the newest fixes: dcd2589 (``holding.thin_waiting`` and
the loop's reduction of ``held`` to the replicas that wait whole or are not created yet; ``run._coverable``: only a
whole replica's pod, any member of a multi-node group not set loose; ``holding.could_run_on`` in ``held_replicas``
and ``_coverable``), and 5fd29a8 / ad873e2 before it; then the feed of step 1 around them. All probes of the pool run
one or more syncs through the production path (``Operator._share_pools`` over live pod lists: pass 48's ``_loop``),
with the kube-scheduler between syncs modelled as passes 48 and 49 do (pods beyond a decision go; free GPUs go to the
Pending pods that fit, the higher pod priority and then the older first). Time-boxed pass (2 cores, 45 minutes).

PROBES: 12 test functions, 23 cases (16 pass, 7 strict xfail; about 4 s).

FINDING 1 (high: deterministic, both modes, lasting; no pod of the tenant's making, no forgery, no admin-made
precondition beyond a cluster without a gang scheduler - the operator renders no gang scheduling where neither
Volcano nor Kueue is installed, and its LeaderWorkerSets use ``startupPolicy: LeaderCreated``, so a group's workers
exist, Pending, beside its Pending leader): a multi-node replica whose pods all wait (a "whole" group:
``thin_waiting``) is counted as ONE waiting replica of ``gpus_per_replica`` GPUs - the claim covers its members
(``_coverable``: ``multi_node`` covers any member not loose) and step 1 finds it never placed in a full pool and
counts it among the Pending pods no claim covers at the group's GPUs (``_share_pool``'s ``others``) - while the
kube-scheduler places its pods one by one: each member asks a part. So the GPUs W's own reshuffle frees (one 2-GPU
replica of v) are too few for the 4-GPU "replica" and ``third_waits`` lets the cut go, yet the tenant's leader (2
GPUs, Pending since before W's new pod, the same pod priority) takes them. It is pass 49 finding 1 (c)'s root - a
waiting replica counted at its whole size where what waits asks less - in the one multi-node shape its fix left
whole: a group none of whose pods is bound. Once the leader runs the group is part bound: its worker is loose, counts
as a pod no claim covers, and stops every later reshuffle of W (it would take what a cut frees), so W stays down.
Reduced (probes ``test_a_pending_groups_members_stop_ws_reshuffle_as_bare_pods_do`` (both modes),
``test_the_tenant_gains_no_gpus_of_w_from_a_pending_group`` (both modes, two syncs); controls
``test_control_a_single_node_replica_of_the_groups_gpus_lets_ws_reshuffle_go_to_x`` (the same 4 GPUs in one pod: the
cut goes to x, W keeps 8), ``test_control_a_tenants_bare_two_gpu_pending_pod_stops_ws_reshuffle`` (a bare pod of a
member's size: no cut); uneven members
``test_a_pending_group_of_uneven_members_stops_ws_reshuffle_as_a_bare_pod_does``, control
``test_control_a_tenants_bare_one_gpu_pending_pod_stops_ws_one_gpu_reshuffle``; mechanism
``test_mechanism_the_whole_group_is_one_waiting_replica_whose_members_the_claim_covers``): pool 8 (one node), every
pod priority 0; W's x (spec priority 10, 2-GPU) runs 1 and wants 2; W's v (2-GPU, min 0) runs 3; T's t is multi-node
(groups of a 2-GPU leader and a 2-GPU worker, 4 GPUs a replica; min 1, current 1), its one group Pending. The pool
cuts v 3 -> 2 for x; t's leader takes the 2 GPUs, x's new pod waits, and the next sync cuts nothing (t's worker,
loose, stops it): W 8 -> 6 GPUs, T 0 -> 2 (a leader that serves nothing without its worker, but holds W's GPUs; the
next GPUs anything frees go to its worker, older than x's pod). The kube-scheduler alone places nothing (equal pod
priorities, no free GPU). Uneven members (a 1-GPU leader and a 3-GPU worker; W's replicas of 1 GPU, v runs 7): the
pool cuts v 7 -> 6 for x and the leader takes the GPU. Suspected fix: count a multi-node claim's waiting group at its
members' sizes, as pods no claim covers are counted - in step 1's ``others`` (and wherever the never-placed replica
stands for its pods) the group's Pending members each at its own GPUs, not one ``gpus_per_replica`` pod; or, simpler,
set every Pending member of a multi-node group loose in ``thin_waiting`` (the group then waits as its pods, each its
own size, and the claim counts it as not waiting), as the fix did for a group part bound. A gang-scheduled group
(Volcano/Kueue) is placed whole and is not this shape.

FINDING 2 (medium: cost on the event loop, lasting while the pods wait; needs a large node inventory and a backend of
many Pending replicas - ``minReplicas`` up to 1,000 - or adopted replica pods; no quota on GPUs in T's namespace): a
regression of pass 22/24's cost fix. ``holding.could_run_on`` (dcd2589) builds the node kinds of the whole pool for
every pod it judges, uncached (``{_node_kind(node, ...): node for node in nodes}``: O(nodes) even for a pod that fits
the first node), and the loop calls it about three times for each Pending replica pod of every claimed backend each
pass (``held_replicas``'s ``not_here``, ``thin_waiting``'s ``ok``, ``_coverable`` in ``counted_waiting``), on the
event loop (``_share_pools`` runs them inline). ``unclaimed_waiting`` judges the same pods with its cache of node
kinds per (pool, label keys) and shape. Reduced (probe
``test_a_tenants_pending_replicas_cost_the_pass_no_more_than_bare_pods_of_the_same_shape``; control: the same pods
bare; mechanism ``test_production_feed_could_run_on_walks_every_node_for_every_pending_replica_pod``): pool of 1,000
8-GPU nodes full of W's v; T's t with 150 Pending 1-GPU replicas costs one pass ~0.4 s of CPU here against ~0.05 s
(~8x) for 150 bare pods of the same shape (2,000 nodes and 400 pods: 2.9 s against 0.14 s, linear in pods x nodes; a pod
whose required affinity reads ``kubernetes.io/hostname`` makes every node its own kind: 40 ms a call at 5,000 nodes),
and every namespace's reconciles and pool passes wait behind it. Suspected fix: judge a pod's fit once a pass per
(pool, shape) - ``unclaimed_waiting``'s cache of kinds and fits, shared with a ``fits`` the loop builds once per pool -
and hand ``held_replicas``, ``thin_waiting`` and ``_coverable`` the one answer.

HELD: (1) The tenant's thin adopted pod swapped in after its evaluation read the backend's own whole Pending pod (the
ReplicaSet deleted its own for the pod-deletion-cost): the loop counts the whole replica the evaluation saw as
waiting (not created yet for the live list) and the thin pod as a pod no claim covers at its own 2 GPUs; W's
reshuffle is stopped, as by a bare pod (probe, both modes; control: the swapped-in pod whole, the cut goes to x). (2)
A part-bound group whose size annotation the tenant patches up (the group then reads as not whole: ``_groups`` drops
it): held, bound and ``thin_waiting`` leave it out, its Pending worker is covered by no waiting GPUs of the claim and
counts as a pod no claim covers; the share is the one with the true size (probe, sizes 3 and 999999, both modes). (3)
A rollout to fewer GPUs per replica (t 4 -> 2 GPUs; its new pod runs, the old template's 4-GPU pod waits): the claim
counts a waiting 2-GPU replica the old pod cannot stand for (``counted_waiting``: 4 > 2), the old pod counts as a pod
no claim covers at 4; W's own reshuffle is stopped by the 2-GPU replica step 1 reads as waiting (the new template's
pod the Deployment makes next would take what the cut frees): the tenant gains nothing, and the scheduler alone would
not place x's pod either (probe, both modes; control: t without the old pod, the cut goes to x). The same 4-GPU pod
adopted for good under 2-GPU replicas (no rollout to follow) stalls W's own reshuffle for as long - a phantom 2-GPU
replica no pod stands for; the tenant gains nothing and x's pod would wait under the scheduler alone too, so not
filed (a bare 4-GPU pod of T's stops nothing there). (4) The reduction of
``held`` with more Pending pods than waiting replicas (a surge beside a thin pod, two thin pods for one replica): not
kept as a test, checked by reading: ``min(waiting, whole + max(0, waiting - whole - thinner))`` never counts more
waiting replicas than ``held - bound`` and never fewer than the whole ones up to it; the excess pods count as no
claim's at their own GPUs.

SUSPECTED, NOT SHOWN: (a) A group one of whose members no node of the pool could hold (the tenant adopts a worker
with another pool's nodeSelector): ``thin_waiting`` sets only that member loose, so the group's other Pending members
stay coverable and eat the claim's waiting GPUs of another of its groups, whose members then count as no claim's -
the sum stays, the split moves; not built beyond reading. (b) ``could_run_on`` for
a pool whose node list is not known (``pool_nodes`` None: every pod fits) - the reconciler sets ``pool_nodes``
whenever it sets ``pool`` (both need the deployed plan), so no shape was found where one backend of a shared pool
reads None. (c) Not re-reported: a class with ``preemptionPolicy: Never`` counted at its value (docs/security.md,
"Not covered").

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): finding 1: ``thin_waiting`` reads a multi-node group with a Pending pod as no whole
waiting replica and sets its Pending members loose, and ``run._coverable`` lets no member of a multi-node group stand
for its group: they wait as pods no claim covers, each at its own GPUs, and stop W's reshuffle as bare pods do (the
loop lowers ``held`` by such groups: the backend claims no more while one waits). Finding 2: ``could_run_on(nodes)``
is built once a pool a pass and judges a pod shape once against the pool's node kinds (as ``unclaimed_waiting``);
the cost probe passes."""

from __future__ import annotations

import pytest
from cpu_probe import quiet_cpu_s
from test_pool_attack48 import MODES, SHORT, _loop, _member, _rs_pod, _target
from test_pool_attack49 import _at, _w_after
from test_pool_unclaimed import _node, _pod

from llmbackend.autoscaling import holding
from llmbackend.controller import run

# --- (F1) a multi-node replica whose pods all wait is counted as one piece of its GPUs ------------------------------


def _group_scene(monkeypatch, tenant, across, now=1000.0, after=None):
    """Pool 8 (node n1), every pod priority 0. W's x (spec priority 10, 2-GPU) runs 1 and wants 2; W's v (2-GPU, min
    0) runs 3: W's own reshuffle cuts v for x. T's t (4 GPUs a replica, min 1, current 1): "group" (multi-node:
    a 2-GPU leader and a 2-GPU worker, both Pending - LeaderCreated makes the worker beside the Pending leader),
    "single" (one 4-GPU Pending pod), "bare" (no replica; a bare 2-GPU Pending pod of T's). ``after``: the second
    sync (``_group_after``)."""
    x = [_at(_rs_pod("W", "x", "x-abc-0", 2, "n1"), 1)]
    v = [_at(_rs_pod("W", "v", f"v-abc-{i}", 2, "n1"), 1) for i in range(3)]
    tp, extra, multi, current = [], [], tenant != "single", 1
    if tenant == "group":
        tp = [_at(_member("t-0", 0, 2, None, 0, True), 2), _at(_member("t-0-1", 0, 2, None, 0, False), 2)]
    elif tenant == "single":
        tp = [_at(_rs_pod("T", "t", "t-abc-0", 4, None), 2)]
    elif tenant == "bare":
        bare = _at(_pod(namespace="T", name="bare-0", gpus=2, priority=0), 2)
        bare["status"]["conditions"] = SHORT
        extra, current = [bare], 0
    state = {"x": 1, "v": 3}
    if after is not None:
        x, v, tp, state = after
    targets = {("W", "x"): _target("W", "x", state["x"], 2, priority=10),
               ("W", "v"): _target("W", "v", state["v"], 2, priority=0),
               ("T", "t"): _target("T", "t", current, 4, multi_node=multi, min_replicas=current)}
    evaluated = [p for p in tp if not multi or "t-0-1" != p["metadata"]["name"]]  # (a multi-node one: its leaders)
    return _loop(monkeypatch, targets, {("W", "x"): x, ("W", "v"): v, ("T", "t"): evaluated}, x + v + tp + extra,
                 {("W", "x"): 2, ("W", "v"): 3, ("T", "t"): current}, [_node("n1", 8)], across=across, now=now)[0]


def _group_after(first, tenant):
    """The kube-scheduler after sync 1: v's pods beyond its share go; the GPUs no pod holds go to the Pending pods of
    pod priority 0 that fit, the older first: t's members one by one (each asks 2; Pending since before the share),
    then x's new one."""
    free = 8 - 2 - 2 * first[("W", "v")]
    tp = []
    if tenant == "group":
        for name, leader in (("t-0", True), ("t-0-1", False)):
            tp.append(_at(_member(name, 0, 2, "n1" if free >= 2 else None, 0, leader), 2))
            free -= 2 if free >= 2 else 0
    elif tenant == "single":
        tp.append(_at(_rs_pod("T", "t", "t-abc-0", 4, "n1" if free >= 4 else None), 2))
        free -= 4 if free >= 4 else 0
    return _w_after(first, free, tp)


@MODES
def test_control_a_single_node_replica_of_the_groups_gpus_lets_ws_reshuffle_go_to_x(monkeypatch, across):
    """t's Pending replica is one 4-GPU pod: the 2 GPUs the cut of v frees do not hold it, and x's new pod takes them
    (W keeps its 8 GPUs, T 0), as the kube-scheduler places them."""
    first = _group_scene(monkeypatch, "single", across)
    after, running = _group_after(first, "single")
    second = _group_scene(monkeypatch, "single", across, now=1030.0, after=after)
    assert (first[("W", "x")], first[("W", "v")]) == (2, 2) and running == {"W": 8, "T": 0}, (first, running, second)


@MODES
def test_control_a_tenants_bare_two_gpu_pending_pod_stops_ws_reshuffle(monkeypatch, across):
    """T's bare 2-GPU Pending pod (older than x's new pod) would take what the cut of v frees: no cut."""
    out = _group_scene(monkeypatch, "bare", across)
    assert (out[("W", "x")], out[("W", "v")]) == (1, 3), out


# FINDING 1 (high): a multi-node replica none of whose pods is bound counts as one never-placed piece of the group's GPUs; its members, each asking a part, take what W's own reshuffle frees
# Fixed (was a strict xfail): pass 50 finding 1: t's whole Pending group (2-GPU leader + 2-GPU worker) reads as one 4-GPU never-placed replica, too large for the 2 GPUs W's reshuffle frees: the pool cuts v for x, where a bare pod of a member's size stops it
@MODES
def test_a_pending_groups_members_stop_ws_reshuffle_as_bare_pods_do(monkeypatch, across):
    out = _group_scene(monkeypatch, "group", across)
    assert out[("W", "v")] == 3, out


# Fixed (was a strict xfail): pass 50 finding 1 (gain): the cut of v goes to t's older leader, x's new pod waits, and t's now loose worker stops every later reshuffle: W 8 -> 6 GPUs, T 0 -> 2, where the kube-scheduler alone places nothing
@MODES
def test_the_tenant_gains_no_gpus_of_w_from_a_pending_group(monkeypatch, across):
    first = _group_scene(monkeypatch, "group", across)
    after, running = _group_after(first, "group")
    second = _group_scene(monkeypatch, "group", across, now=1030.0, after=after)
    assert running == {"W": 8, "T": 0}, (first, running, second)


def _uneven_scene(monkeypatch, tenant, across):
    """Pool 8, pod priority 0, 1-GPU replicas for W: x (spec priority 10) runs 1 and wants 2, v (min 0) runs 7. T's t
    multi-node (4 GPUs a replica: a 1-GPU leader and a 3-GPU worker, both Pending; min 1), or "bare" (no replica; a
    bare 1-GPU Pending pod of T's)."""
    x = [_at(_rs_pod("W", "x", "x-abc-0", 1, "n1"), 1)]
    v = [_at(_rs_pod("W", "v", f"v-abc-{i}", 1, "n1"), 1) for i in range(7)]
    tp, extra, current = [], [], 1
    if tenant == "group":
        tp = [_at(_member("t-0", 0, 1, None, 0, True), 2), _at(_member("t-0-1", 0, 3, None, 0, False), 2)]
    else:
        bare = _at(_pod(namespace="T", name="bare-0", gpus=1, priority=0), 2)
        bare["status"]["conditions"] = SHORT
        extra, current = [bare], 0
    targets = {("W", "x"): _target("W", "x", 1, 1, priority=10), ("W", "v"): _target("W", "v", 7, 1, priority=0),
               ("T", "t"): _target("T", "t", current, 4, multi_node=True, min_replicas=current)}
    return _loop(monkeypatch, targets, {("W", "x"): x, ("W", "v"): v, ("T", "t"): tp[:1]}, x + v + tp + extra,
                 {("W", "x"): 2, ("W", "v"): 7, ("T", "t"): current}, [_node("n1", 8)], across=across)[0]


@MODES
def test_control_a_tenants_bare_one_gpu_pending_pod_stops_ws_one_gpu_reshuffle(monkeypatch, across):
    out = _uneven_scene(monkeypatch, "bare", across)
    assert (out[("W", "x")], out[("W", "v")]) == (1, 7), out


# FINDING 1, uneven members: a 1-GPU leader beside a 3-GPU worker takes the 1 GPU W's reshuffle frees
# Fixed (was a strict xfail): pass 50 finding 1 (uneven members): t's whole Pending group (1-GPU leader + 3-GPU worker) reads as one 4-GPU replica; the pool cuts v 7 -> 6 for x and the older 1-GPU leader takes the GPU
@MODES
def test_a_pending_group_of_uneven_members_stops_ws_reshuffle_as_a_bare_pod_does(monkeypatch, across):
    out = _uneven_scene(monkeypatch, "group", across)
    assert out[("W", "v")] == 7, out


def test_mechanism_the_whole_group_is_one_waiting_replica_whose_members_the_claim_covers():
    """The feed before the fix: ``thin_waiting`` read the group as one whole waiting replica, and ``_coverable``
    covered both its members (``multi_node``), so neither counted as a pod no claim covers at its own 2 GPUs. Fixed: a
    group with a Pending pod is no whole waiting replica, its Pending members are loose, and no member of a multi-node
    group stands for its group."""
    tp = [_at(_member("t-0", 0, 2, None, 0, True), 2), _at(_member("t-0-1", 0, 2, None, 0, False), 2)]
    whole, thinner, loose = holding.thin_waiting(tp, 4, True, "t")
    assert (whole, thinner, loose) == (0, 1, frozenset({("T", "t-0"), ("T", "t-0-1")}))
    assert not any(run._coverable(p, frozenset(), lambda pod: True, True, 4) for p in tp)


# --- (F2) could_run_on walks the pool's nodes for every Pending replica pod, three times a pass -------------------


def _cost_scene(monkeypatch, nodes_n, pods_n, claimed):
    """A pool of ``nodes_n`` 8-GPU nodes, each full with one of W's v pods. T: ``pods_n`` Pending 1-GPU pods, of its
    backend t (``claimed``: replicas of t, min ``pods_n``) or bare (t has none). One pass of the loop."""
    names = [f"n{i}" for i in range(nodes_n)]
    nodes = [_node(n, 8, labels={"gpu": "h100", "kubernetes.io/hostname": n}) for n in names]
    pool = frozenset(names)
    v = [_rs_pod("W", "v", f"v-abc-{i}", 8, names[i]) for i in range(nodes_n)]
    t, extra = [], []
    for i in range(pods_n):
        if claimed:
            t.append(_rs_pod("T", "t", f"t-abc-{i}", 1, None))
        else:
            bare = _pod(namespace="T", name=f"bare-{i}", gpus=1, priority=0)
            bare["status"]["conditions"] = SHORT
            extra.append(bare)
    current = pods_n if claimed else 0
    targets = {("W", "v"): _target("W", "v", nodes_n, 8, pool_gpus=8 * nodes_n, nodes=pool),
               ("T", "t"): _target("T", "t", current, 1, pool_gpus=8 * nodes_n, nodes=pool, min_replicas=current)}
    return lambda: _loop(monkeypatch, targets, {("W", "v"): v, ("T", "t"): t}, v + t + extra,
                         {("W", "v"): nodes_n, ("T", "t"): current}, nodes)


def test_production_feed_could_run_on_walks_every_node_for_every_pending_replica_pod(monkeypatch):
    """The mechanism, fixed: one pass judged each of t's Pending replica pods with ``could_run_on`` about three
    times, each call reading every node of the pool (``_node_kind``), where ``unclaimed_waiting`` judges a shape once
    a node kind. Now ``could_run_on(nodes)`` is built once a pool a pass and judges a pod shape once: the node kinds
    are read once (50 nodes), not once a pod and a call (3 x 20 x 50)."""
    kinds = [0]
    real_kind = holding._node_kind

    def counting_kind(*args):
        kinds[0] += 1
        return real_kind(*args)
    monkeypatch.setattr(holding, "_node_kind", counting_kind)
    _cost_scene(monkeypatch, 50, 20, True)()
    assert kinds[0] <= 2 * 50, kinds


# FINDING 2 (medium, cost): could_run_on builds the node kinds of the whole pool for each pod it judges, uncached, about three times a pass for every Pending replica pod of every claimed backend, on the event loop
# Fixed (was a strict xfail): pass 50 finding 2: 150 Pending replica pods of t in a pool of 1,000 nodes cost a pass ~8x the CPU of 150 bare pods of the same shape (could_run_on walks every node for every pod, ~3 times a pass, uncached)
def test_a_tenants_pending_replicas_cost_the_pass_no_more_than_bare_pods_of_the_same_shape(monkeypatch):
    bare = quiet_cpu_s(_cost_scene(monkeypatch, 1000, 150, False), runs=2)
    claimed = quiet_cpu_s(_cost_scene(monkeypatch, 1000, 150, True), runs=2)
    assert claimed <= 2.5 * bare + 0.02, (claimed, bare)


# --- held ------------------------------------------------------------------------------------------------------------


def _stale_scene(monkeypatch, swapped, across):
    """Pool 8, pod priority 0. W's x (spec priority 10, 2-GPU) runs 1 and wants 2; W's v (2-GPU, min 0) runs 3. T's t
    (4-GPU replicas, min 1, current 1): its evaluation read its ReplicaSet's own 4-GPU Pending pod; since then the
    tenant's adopted pod replaced it (the ReplicaSet deleted its own for the pod-deletion-cost): ``swapped`` "thin"
    (2 GPUs) or "whole" (4 GPUs)."""
    x = [_at(_rs_pod("W", "x", "x-abc-0", 2, "n1"), 1)]
    v = [_at(_rs_pod("W", "v", f"v-abc-{i}", 2, "n1"), 1) for i in range(3)]
    seen = [_at(_rs_pod("T", "t", "t-abc-0", 4, None), 2)]
    live = [_at(_rs_pod("T", "t", "t-abc-9", 2 if swapped == "thin" else 4, None), 2)]
    targets = {("W", "x"): _target("W", "x", 1, 2, priority=10), ("W", "v"): _target("W", "v", 3, 2, priority=0),
               ("T", "t"): _target("T", "t", 1, 4, min_replicas=1)}
    return _loop(monkeypatch, targets, {("W", "x"): x, ("W", "v"): v, ("T", "t"): seen}, x + v + live,
                 {("W", "x"): 2, ("W", "v"): 3, ("T", "t"): 1}, [_node("n1", 8)], across=across)[0]


@MODES
def test_held_a_thin_pod_swapped_in_after_the_evaluation_stops_ws_reshuffle(monkeypatch, across):
    """The claim counts the whole replica its evaluation saw as waiting; the live thin pod is no whole replica's pod
    (``_coverable``) and counts as a pod no claim covers at its 2 GPUs: W's reshuffle is stopped as by a bare pod.
    Control: the swapped-in pod whole (4 GPUs) does not fit the 2 GPUs, and the cut goes to x."""
    assert _stale_scene(monkeypatch, "thin", across)[("W", "v")] == 3
    assert _stale_scene(monkeypatch, "whole", across)[("W", "v")] == 2


def _sized_scene(monkeypatch, size, across):
    """Pool 8, pod priority 0. W's x (spec priority 10, 2-GPU) runs 1 and wants 3; W's v (2-GPU, min 0) runs 2. T's
    t multi-node (2-GPU leader bound, 2-GPU worker Pending), the size annotation on both pods patched to ``size``."""
    x = [_at(_rs_pod("W", "x", "x-abc-0", 2, "n1"), 1)]
    v = [_at(_rs_pod("W", "v", f"v-abc-{i}", 2, "n1"), 1) for i in range(2)]
    tp = [_at(_member("t-0", 0, 2, "n1", 0, True), 2), _at(_member("t-0-1", 0, 2, None, 0, False), 2)]
    for pod in tp:
        pod["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] = size
    targets = {("W", "x"): _target("W", "x", 1, 2, priority=10), ("W", "v"): _target("W", "v", 2, 2, priority=0),
               ("T", "t"): _target("T", "t", 1, 4, multi_node=True, min_replicas=1)}
    return _loop(monkeypatch, targets, {("W", "x"): x, ("W", "v"): v, ("T", "t"): tp[:1]}, x + v + tp,
                 {("W", "x"): 3, ("W", "v"): 2, ("T", "t"): 1}, [_node("n1", 8)], across=across)[0]


@MODES
@pytest.mark.parametrize("size", ["3", "999999"])
def test_held_a_patched_group_size_changes_no_share(monkeypatch, across, size):
    """The group read as not whole drops out of held, bound and ``thin_waiting``; its Pending worker is covered by
    none of the claim's waiting GPUs and counts as a pod no claim covers: the share is the true size's."""
    assert _sized_scene(monkeypatch, size, across) == _sized_scene(monkeypatch, "2", across)


def _thick_scene(monkeypatch, old, across):
    """Pool 8, pod priority 0. W's x (spec priority 10, 2-GPU) runs 1 and wants 2; W's v (2-GPU, min 0) runs 2. T's
    t rolled out from 4-GPU to 2-GPU replicas: its new template's pod runs; ``old``: the old template's 4-GPU pod
    waits (t current 2), else t runs its one replica."""
    x = [_at(_rs_pod("W", "x", "x-abc-0", 2, "n1"), 1)]
    v = [_at(_rs_pod("W", "v", f"v-abc-{i}", 2, "n1"), 1) for i in range(2)]
    t = [_at(_rs_pod("T", "t", "t-new-0", 2, "n1", template="new"), 1)]
    if old:
        t.append(_at(_rs_pod("T", "t", "t-old-0", 4, None, template="old"), 2))
    current = 2 if old else 1
    targets = {("W", "x"): _target("W", "x", 1, 2, priority=10), ("W", "v"): _target("W", "v", 2, 2, priority=0),
               ("T", "t"): _target("T", "t", current, 2, min_replicas=current)}
    return _loop(monkeypatch, targets, {("W", "x"): x, ("W", "v"): v, ("T", "t"): t}, x + v + t,
                 {("W", "x"): 2, ("W", "v"): 2, ("T", "t"): current}, [_node("n1", 8)], across=across)[0]


@MODES
def test_held_an_old_thick_pending_pod_of_a_rollout_to_fewer_gpus_gains_the_tenant_nothing(monkeypatch, across):
    """The old 4-GPU pod asks more GPUs than t's rendered pod (2): since attack pass 56 finding 2 it stands for no
    replica of t (a pod adopted into the current ReplicaSet asking more held GPUs it could never use, for good) and t
    claims nothing for it: W's reshuffle goes ahead (v 1), and the 2 GPUs it frees fit x's pod, not the old one (it
    asks 4). (Before, t's waiting replica - the new template's pod the Deployment makes next - was read as taking
    them and the reshuffle waited; the Deployment controller replaces an old Pending pod with a new-template one
    itself, which then counts as t's waiting replica.) Control: without the old pod the cut goes to x as well."""
    assert _thick_scene(monkeypatch, True, across)[("W", "v")] == 1
    assert _thick_scene(monkeypatch, False, across)[("W", "v")] == 1
