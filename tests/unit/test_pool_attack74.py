"""Seventy-fourth attacker pass on the GPU pool: the pool cut's room-first marks as a5ffac2 left them.
Seat: an independent attacker who did not write the code, as a tenant (namespace T) who may create LLMBackends (any
CRD field, its nodeSelector and tolerations included) and pods in its own namespace, attacking W. Time-boxed pass
(about 35 minutes, 2 cores): probes of ``drain.room_first``, ``drain.deletion_costs``, ``Operator._room_first``,
``Operator._set_deletion_costs`` and the scale-down path of ``Operator._evaluate``; each finding's test removes the
cut's cheapest pods (the ReplicaSet's order: lowest pod-deletion-cost first) and counts the taker's replicas that then
fit a node (``_fits``); no multi-sync ``_World`` run.

TRIED: (1) several takers: one of this sync and one of an earlier sync (``PoolState.preempted`` keeps earlier
preemptors while the victim is short), takers of different sizes, pinned by nodeSelector to one node. (2) one
taker's replica with rooms on several nodes. (3) several victims cut in one pass against one free-by-node list
(free GPUs counted once per victim). (4) pods of the victim that hold no GPUs any more (Failed, evicted) but keep
their ``nodeName``. (5) the victim's own evaluation between the cut pass and the reconciler's replicas write.
(6) writes outside the cut backend, int32 range, odd pods, nodes outside the pool, 0-GPU takers, unknown nodes,
the cost in pods and nodes.

FINDING 1 (medium; fixed after the pass: a room per replica owed, the fewest pods then the least busy in all, each
room its own rank, no more pods than the cut): one taker's replica, rooms on two nodes: every pod of both rooms gets the same rank and the least
busy order then splits the cut across the nodes. ``room_first`` marks a room on EVERY node where one can be made
(the pods "the room needs" per node), all at the rank "pods the node needs removed"; ``deletion_costs`` orders
pods of equal rank by requests in flight only, so the pods of one room are not kept together. Reduced scene: n2
and n3 (4 GPUs each, full), W's 2-GPU pods a (5 in flight), b (0) on n2 and c (1), d (7) on n3; T's 4-GPU replica
may use both; the pool cuts W by 2. All four get rank 2; b and c are the cheapest: the ReplicaSet removes them, 2
GPUs free on each node, T's replica fits neither: the kube-scheduler preempts a or d for it (W loses 3 pods for a
cut of 2, one of them by preemption) and 2 GPUs lie stranded for any older Pending pod (pass 72 finding 2's
shape). Fix: mark rooms for as many of the taker's replicas as the cut is for (one node per replica: the fewest
pods, then the least busy in all), or give each chosen node its own rank step so a node's pods go together.

FINDING 2 (medium; fixed after the pass: rooms only for the replicas a taker does not run yet, as the pass's claims
read them): a taker of an EARLIER sync still steers every later cut. ``_room_first`` computes a room for
every backend in ``pool_state.preempted[W]``, which keeps earlier preemptors while W is short
(pool.py: ``state.preempted`` merged into ``by``), whether or not that taker still has a replica waiting. T runs
T2, 1-GPU replicas, nodeSelector n3, that once took a replica of W; on every full node of T2's nodes one of W's pods
makes "room" for a 1-GPU replica at rank 1, the lowest rank there is. Reduced scene: n2 full with W's a, b (2 GPUs
each), n3 full with W's c and others; T1 (4 GPUs, n2 only, this sync's taker) cut W by 2; T2's replica already
runs. c gets rank 1, a and b rank 2: the cut removes c and one of a/b; T1 fits nowhere, the scheduler preempts the
other n2 pod (W loses 3 for 2) and c's GPUs on n3 lie free for T2 to grow into. T picks which of W's pods go first (the
one on the node it names) for as long as W stays short. Fix: rooms only for takers of this sync's cut with
replicas not placed (the share's grant above the pods the taker runs), for as many replicas as each is owed.

FINDING 3 (medium; fixed after the pass: Succeeded, Failed and deleting pods make no room): a Failed pod of W (evicted, OutOf nvidia.com/gpu; it keeps ``spec.nodeName`` until the pod GC)
is counted twice: its GPUs are free already (``gpus_held_by_node`` skips Failed pods) and ``room_first`` counts
them again as what its removal frees. With no in-flight reading it sorts "least busy" and alone "makes the room".
Reduced scene: n2 (4 GPUs): W's running a (3 in flight) and Failed f (2 GPUs each), 2 free; n3 full with W's b,
c; T's 4-GPU replica may use both; the pool cuts W by 1. ``room_first`` takes f on n2 (2 free + f's 2 = 4) and
marks b, c on n3 at rank 2; the ReplicaSet ignores the Failed pod and removes b or c: 2 GPUs on each node, T's
replica fits neither, the scheduler preempts a pod of W for it (W loses 2 for 1). Fix: skip pods in phase
Succeeded/Failed in ``room_first`` (their GPUs are in ``free`` already); a pod being deleted (``deletionTimestamp``)
frees its GPUs anyway and should count as free there, never as a pod to mark.

FINDING 4 (low; OPEN: the free GPUs and the replicas a taker lacks are now one ledger the pass's cuts spend, so no
node's free GPUs count twice, but victims are planned one at a time: V, planned first, takes n3's room through x,
which W's y would have made; rooms over all the pass's victims together would place both): victims cut in one pass each count the same free GPUs. ``free_by_node`` is read once a pass,
before the cuts, and every victim's ``_room_first`` counts a node's free GPUs as its own. Reduced scene: n2 (4 GPUs)
full with V's a, b; n3 (8 GPUs): V's x, W's y (2 GPUs each), a third namespace's 2, 2 free; T's 4-GPU replicas
(2 wanted, n2 and n3) cut V by 2 and W by 1. V's x and W's y both get rank 1 on n3 (each with n3's 2 free): V's cut
removes x and a, W's removes y; n3 holds one of T's replicas with 2 GPUs over, n2 has 2: the second waits and the
scheduler preempts b (V loses 3 for 2). V removing a and b (n2) and W y (n3) places both. Fix: a room's free GPUs
are spent once a pass: a ledger of the rooms marked so far (node -> GPUs promised), or the rooms counted over all
the victims of the pass together.

FINDING 5 (low; fixed after the pass: an evaluation whose pool share is below what it decided and the current
replicas leaves the costs to the pool pass): the victim's own evaluation wipes the room marks while the cut waits for the reconciler. After
a cut pass marked W's pods, W's next ``_evaluate`` (desired = its share, below ``current_replicas`` until the
reconciler writes the replicas) rewrites every cost with ``first`` empty: a negative mark with no reading goes to
0 (a Triton reading replaces it with the in-flight count). The next pool pass (the same second, or after the pool's
lists) marks them again; a replicas write landing in between removes pods in the busy order. T widens the window by
delaying W's reconcile (backends of its own filling the shared work queue). Reduced scene: W at 3 replicas, its
share 1 (the pool cut it by 2 for T), pod p0 marked room-first, Prometheus source: ``_evaluate`` writes p0 "0". Fix:
while the share is a cut (``pool_state.preempted`` names W and the share is below the current replicas), the
scale-down path keeps negative marks (or recomputes ``_room_first`` with the pass's targets).

HELD: annotations go only to the cut backend's namespace and its listed pods' names; a taker with unknown nodes,
0-GPU replicas or no target is skipped; a victim pod on a node outside the taker's or its own pool nodes, unbound,
of 0 GPUs or without a spec puts nothing first and raises nothing; room marks stay within int32 and below every
ordinary cost for any taker size (the rank is bounded by the pods taken, each of one GPU or more, until ``needed``);
several takers merge to the lowest rank per pod without raising; the cost is linear in pods and nodes per taker
(takers are bounded by the replicas the victim is short); a NaN, infinite or negative reading keeps the order.

NOT COVERED: a ``_World`` multi-sync run of findings 1-4 with the kube-scheduler's own preemption; a pod being
deleted (``deletionTimestamp``) as a room pod (finding 3's fix names it); LeaderWorkerSets (no cost is read).
"""

from __future__ import annotations

import asyncio
import time
import types

import pytest
from test_autoscale_loop import evaluate_once, prometheus_evaluation
from test_backoff import _operator

from llmbackend.autoscaling.drain import (
    DELETION_COST_ANNOTATION,
    ROOM_FIRST_COST,
    deletion_costs,
    removable,
    room_first,
)
from llmbackend.autoscaling.pool import PoolState, Share
from llmbackend.controller import run

W, V, T1, T2 = ("W", "w1"), ("V", "v1"), ("T", "t1"), ("T", "t2")


def _bound(name, node, gpus, namespace="W", phase="Running", ready=True):
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _target(gpr, nodes, namespace="W", current=3):
    return types.SimpleNamespace(
        gpus_per_replica=gpr,
        pool_nodes=None if nodes is None else frozenset(nodes),
        multi_node=False,
        namespace=namespace,
        current_replicas=current,
    )


def _room(op, key, targets, pods, busy=None):
    return asyncio.run(op._room_first(key, targets[key], targets, pods, busy))


def _removed(pods, busy, first, cut):
    """The ``cut`` active pods the ReplicaSet removes: the lowest pod-deletion-cost first (no reading: 0)."""
    costs = deletion_costs(busy, {}, first)
    active = [p for p in pods if p["status"]["phase"] not in ("Succeeded", "Failed")]
    ranked = sorted(active, key=lambda p: (int(costs.get(p["metadata"]["name"], "0")), p["metadata"]["name"]))
    return ranked[:cut]


def _fits(free, removed, needed, nodes):
    """How many of the taker's replicas of ``needed`` GPUs fit on ``nodes`` once ``removed`` are gone."""
    after = dict(free)
    for pod in removed:
        node = pod["spec"]["nodeName"]
        after[node] = after.get(node, 0) + int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    return sum(after.get(n, 0) // needed for n in nodes)


# Fixed (was a strict xfail): FINDING 1 (medium): one replica's room split over two nodes by the busy order
def test_one_replicas_room_is_not_split_across_two_nodes():
    """n2: a (5 in flight), b (0); n3: c (1), d (7); 2 GPUs each, both full; T1's 4-GPU replica, the cut is 2."""
    op = _operator()
    op.pool_state = PoolState(preempted={W: {T1: 2}})
    op.free_by_node = {"n2": 0, "n3": 0}
    pods = [_bound("a", "n2", 2), _bound("b", "n2", 2), _bound("c", "n3", 2), _bound("d", "n3", 2)]
    busy = {"a": 5.0, "b": 0.0, "c": 1.0, "d": 7.0}
    targets = {W: _target(2, ("n2", "n3")), T1: _target(4, ("n2", "n3"), namespace="T", current=0)}
    first = _room(op, W, targets, pods, busy)
    assert _fits(op.free_by_node, _removed(pods, busy, first, 2), 4, ("n2", "n3")) == 1


def test_control_one_room_alone_is_kept_together():
    """The same with n3 holding one pod of W and 2 free: n3's room (rank 1) goes first, T1's replica fits."""
    op = _operator()
    op.pool_state = PoolState(preempted={W: {T1: 1}})
    op.free_by_node = {"n2": 0, "n3": 2}
    pods = [_bound("a", "n2", 2), _bound("b", "n2", 2), _bound("c", "n3", 2)]
    busy = {"a": 5.0, "b": 0.0, "c": 9.0}
    targets = {W: _target(2, ("n2", "n3")), T1: _target(4, ("n2", "n3"), namespace="T", current=0)}
    first = _room(op, W, targets, pods, busy)
    assert _fits(op.free_by_node, _removed(pods, busy, first, 1), 4, ("n2", "n3")) == 1


# Fixed (was a strict xfail): FINDING 2 (medium): an earlier sync's 1-GPU taker pinned the cut to its node
def test_an_earlier_takers_room_does_not_steer_this_cut():
    """T2 (1 GPU, nodeSelector n3) took a replica of W earlier and runs it (its share met); T1 (4 GPUs, n2 only)
    cuts W by 2 now. W's pod on n3 gets rank 1 and goes first; T1's replica fits nowhere."""
    op = _operator()
    op.pool_state = PoolState(preempted={W: {T2: 1, T1: 2}})
    op.shares = {T2: Share(1), T1: Share(1)}
    op.pool_running = {T2: 1, T1: 0}  # (the pass's claims: T2's replica runs, T1's waits)
    op.free_by_node = {"n2": 0, "n3": 0}
    pods = [_bound("a", "n2", 2), _bound("b", "n2", 2), _bound("c", "n3", 2)]
    targets = {
        W: _target(2, ("n2", "n3")),
        T1: _target(4, ("n2",), namespace="T", current=0),
        T2: _target(1, ("n3",), namespace="T", current=1),
    }
    first = _room(op, W, targets, pods)
    assert _fits(op.free_by_node, _removed(pods, {}, first, 2), 4, ("n2",)) == 1


def test_control_without_the_earlier_taker_the_cut_makes_t1s_room():
    op = _operator()
    op.pool_state = PoolState(preempted={W: {T1: 2}})
    op.free_by_node = {"n2": 0, "n3": 0}
    pods = [_bound("a", "n2", 2), _bound("b", "n2", 2), _bound("c", "n3", 2)]
    targets = {W: _target(2, ("n2", "n3")), T1: _target(4, ("n2",), namespace="T", current=0)}
    first = _room(op, W, targets, pods)
    assert first == {"a": 1, "b": 1}  # (one room, rank 1)
    assert _fits(op.free_by_node, _removed(pods, {}, first, 2), 4, ("n2",)) == 1


# Fixed (was a strict xfail): FINDING 3 (medium): a Failed pod's GPUs counted free and again as freed
def test_a_failed_pod_makes_no_room():
    """n2: W's running a (3 in flight), W's Failed f (evicted, still bound), 2 free; n3 full with b, c; cut 1."""
    op = _operator()
    op.pool_state = PoolState(preempted={W: {T1: 1}})
    op.free_by_node = {"n2": 2, "n3": 0}  # (gpus_held_by_node skips the Failed pod: its GPUs are free)
    pods = [_bound("a", "n2", 2), _bound("f", "n2", 2, phase="Failed"), _bound("b", "n3", 2), _bound("c", "n3", 2)]
    busy = {"a": 3.0, "b": 4.0, "c": 6.0}
    targets = {W: _target(2, ("n2", "n3")), T1: _target(4, ("n2", "n3"), namespace="T", current=0)}
    first = _room(op, W, targets, pods, busy)
    assert _fits(op.free_by_node, _removed(pods, busy, first, 1), 4, ("n2", "n3")) == 1


def test_control_the_failed_pods_gpus_are_free_already():
    held = run.gpus_held_by_node([_bound("a", "n2", 2), _bound("f", "n2", 2, phase="Failed")])
    assert run._free_gpus([types.SimpleNamespace(name="n2", gpu_count=4)], held) == {"n2": 2}


@pytest.mark.xfail(strict=True, reason="pass 74 finding 4 (low, open): one victim at a time, V takes the room W made")
def test_two_victims_in_one_pass_do_not_share_one_rooms_free_gpus():
    """n2 (4) full with V's a, b; n3 (8): V's x, W's y, a third's 2, 2 free; T1 wants 2 4-GPU replicas: V cut 2, W 1."""
    op = _operator()
    op.pool_state = PoolState(preempted={V: {T1: 2}, W: {T1: 1}})
    op.free_by_node = {"n2": 0, "n3": 2}
    v_pods = [_bound("a", "n2", 2, "V"), _bound("b", "n2", 2, "V"), _bound("x", "n3", 2, "V")]
    w_pods = [_bound("y", "n3", 2)]
    targets = {
        V: _target(2, ("n2", "n3"), namespace="V"),
        W: _target(2, ("n2", "n3")),
        T1: _target(4, ("n2", "n3"), namespace="T", current=0),
    }
    v_first, w_first = _room(op, V, targets, v_pods), _room(op, W, targets, w_pods)
    removed = _removed(v_pods, {}, v_first, 2) + _removed(w_pods, {}, w_first, 1)
    assert _fits(op.free_by_node, removed, 4, ("n2", "n3")) == 2


# Fixed (was a strict xfail): FINDING 5 (low): the victim's evaluation reset the room marks before the replicas write
def test_the_victims_evaluation_keeps_the_cuts_room_marks(monkeypatch):
    """W at 3 replicas wants 3; its share is 1 (cut by 2 for T1), p0 marked room-first; the reconciler has not
    written the replicas yet when W's next evaluation (Prometheus source) runs."""
    op, written, key = _operator(), [], ("ns", "b")
    marked = {DELETION_COST_ANNOTATION: str(ROOM_FIRST_COST + 2**16)}
    pods = [
        {"metadata": {"name": "p0", "annotations": marked}, "status": {}},
        {"metadata": {"name": "p1"}, "status": {}},
        {"metadata": {"name": "p2"}, "status": {}},
    ]
    target = prometheus_evaluation(monkeypatch, op, key, 3, pods, written)
    op.shares[key] = Share(1)
    op.pool_state = PoolState(preempted={key: {T1: 2}})
    evaluate_once(op, key, target)
    assert op.state.decisions[key].desired_replicas == 1  # (the share's cut, not the backend's own scale-down)
    assert ("ns", "p0", {DELETION_COST_ANNOTATION: "0"}) not in written


def test_held_marks_go_only_to_the_cut_backends_listed_pods(monkeypatch):
    op, calls = _operator(), []
    monkeypatch.setattr(op.kube, "annotate", lambda kind, ns, name, ann: calls.append((kind, ns, name)))
    op._set_deletion_costs("W", [_bound("w-a", "n2", 2)], {"t-x": 0.0}, {"w-a": 1, "t-x": 1, "other": 1})
    assert calls == [("Pod", "W", "w-a")]


def test_held_odd_takers_and_pods_put_nothing_first_and_raise_nothing():
    op = _operator()
    op.pool_state = PoolState(preempted={W: {T1: 1, T2: 1, ("X", "gone"): 1}})
    op.free_by_node = {"n2": 0, "n9": 0}  # (n9: outside W's pool nodes)
    pods = [
        _bound("a", "n9", 2),  # outside W's nodes
        _bound("b", None, 2),  # unbound
        _bound("c", "n2", 0),  # 0 GPUs
        {"metadata": {"name": "d"}, "spec": None},
        {"metadata": {"name": "e"}},
        _bound("f", "n4", 2),  # a node missing from free
    ]
    targets = {
        W: _target(2, ("n2", "n4")),
        T1: _target(0, ("n2",), namespace="T"),  # 0-GPU taker
        T2: _target(4, None, namespace="T"),  # nodes not known
    }
    assert _room(op, W, targets, pods) == {}
    targets[T1] = _target(4, ("n2", "n9"), namespace="T")
    assert _room(op, W, targets, pods) == {}


def test_held_room_marks_stay_in_int32_below_ordinary_costs_for_any_taker_size():
    pods = [_bound(f"p{i}", "n2", 1) for i in range(200)]
    for needed in (1, 7, 200, 10**9):
        first = room_first(
            removable(pods)[1], {"n2": 0}, needed, {"p0": float("nan"), "p1": -5.0, "p2": float("inf")}
        ).first
        assert all(rank <= min(needed, 200) for rank in first.values())
        costs = deletion_costs({"p1": 1e40, "idle": 0.0}, {}, first)
        assert all(-(2**31) <= int(c) < 0 for pod, c in costs.items() if pod in first)


def test_held_several_takers_merge_to_the_lowest_rank():
    op = _operator()
    op.pool_state = PoolState(preempted={W: {T1: 1, T2: 1}})
    op.free_by_node = {"n2": 0, "n3": 2}
    pods = [_bound("a", "n2", 2), _bound("b", "n2", 2), _bound("c", "n3", 2)]
    targets = {W: _target(2, ("n2", "n3")), T1: _target(4, ("n2", "n3"), "T"), T2: _target(2, ("n2",), "T")}
    # (T1's 4-GPU room on n3, its pod alone with 2 free; then T2's 2-GPU room on n2: one pod, the next rank)
    assert _room(op, W, targets, pods) == {"c": 1, "a": 2}


def test_held_the_cost_is_linear_in_pods_and_nodes():
    """2000 nodes, 8000 pods, 20 takers: well under a second on a shared 2-core machine."""
    op = _operator()
    takers = {("T", f"t{i}"): _target(1 + i % 8, [f"n{j}" for j in range(2000)], "T") for i in range(20)}
    op.pool_state = PoolState(preempted={W: dict.fromkeys(takers, 1)})
    op.free_by_node = {f"n{j}": j % 3 for j in range(2000)}
    pods = [_bound(f"p{i}", f"n{i % 2000}", 2) for i in range(8000)]
    targets = {W: _target(2, [f"n{j}" for j in range(2000)]), **takers}
    start = time.perf_counter()
    first = _room(op, W, targets, pods)
    assert first and time.perf_counter() - start < 5.0
