"""Sixty-second attacker pass on the GPU pool. Seat: an independent attacker who did not write the code, as a tenant
(namespace T) who may create LLMBackends and pods (any labels, ownerReferences, annotations, nodeSelectors,
affinities, host ports, volumes, scheduling gates, resource requests, the priorityClassName it may use) in its own
namespace, attacking W. A full-length pass on bd62ca3, aimed first at 101ab97: a claim's own Pending replica pod is
turned down (stands for no replica) beside free GPUs only where the scheduler's verdict names a filter the pool does
not model (``holding.refused_beyond_model``, ``holding.refused_beside_room``). Question: T's pods shape which reasons
appear in W's verdict (NodeResourcesFit names EVERY resource a node lacks, so T's CPU on a node W's pod cannot use for
GPUs anyway adds "Insufficient cpu" to W's message); and the verdict names reasons per count, not per node. Loop
probes run the production path (pass 48's ``_loop``) on two nodes (pass 52's ``_nodes``) or three, the pods' times on
the syncs' clock (pass 57's ``_stamp``). Time-boxed pass (2 cores, 35 minutes).

PROBES: 6 test functions, 16 cases (10 pass, 6 strict xfail; about 15 s on the loaded 2 cores).

FINDING 1 (medium - deterministic in both modes once the scheduler leaves W's pod Pending beside the freed GPUs for
``SCHEDULER_SETTLE_S``, the precondition 7cf0ca5 met under CI's load; no admin precondition): ``refused_beyond_model``
reads the verdict as a whole, so an unmodelled reason the scheduler gave for ANOTHER node (where the pod lacks GPUs
too) makes W's GPU-only wait look refused beside the node with room. Scene: pool n1 (8) + n2 (8), every pod priority
0. T's t runs 4 (2-GPU) on n1 and its pods ask most of n1's cpu (or T fills n1 with tiny pods up to its pod limit);
W's w runs 3 on n2 beside T's x (1 pod, n2 full); W's fourth pod w-abc-3 (asks 8 cpu) created 975, judged 976: n1
"Insufficient cpu" AND "Insufficient nvidia.com/gpu" (fit.go lists every resource a node lacks), n2 short of GPUs:
"0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient nvidia.com/gpu". At 990 T scales x to 0 (n2: 2 free).
The scheduler is slow (CI's case): W's pod still Pending at the passes 1000..1045. ``refused_beside_room`` lands it on
n2 (settle memory (W, n2) from 1000) and, 30 s on (1030), turns it down: ``refused_replicas`` {w: 1}, w's ``held``
drops, ``_short`` is 0 and the share grants T's y (2-GPU, wants 1) n2's 2 GPUs (y 1) - the exact CI failure 101ab97
fixed, re-opened by T's lever; T's fresh y pod then races W's backed-off pod for n2 (CI: "batch took them back").
The scheduler alone: W's older pod binds on n2 when retried; y's waits. Control: the same scene with W's verdict
naming GPUs only (T's pods ask no cpu on n1): never turned down, y 0. Probe
``test_a_gpu_only_wait_is_not_turned_down_by_a_reason_given_for_another_node`` (strict xfail, "cpu" and "pods"
levers); control ``test_control_a_gpu_only_verdict_is_never_turned_down``. Suspected fix: read the counts, not the
words: a verdict tells for how many nodes the pod lacked GPUs; where that count is at least the pool's nodes that
could hold the pod and were short of GPUs for it when it was judged (here 2 of 2: n2 was full), the verdict said
nothing of n2 but GPUs and is stale; turn down only where fewer nodes are named short of GPUs than the nodes that
could hold it (pass 60's host port: "1 Insufficient nvidia.com/gpu, 1 ... free ports" on 2 nodes). Or drop the
settle-memory path for claims' pods (it is time alone, which 7cf0ca5 showed cannot tell a refused pod from a slow
scheduler) and keep only the judged-after-the-room clock.

FINDING 2 (low - one pass in practice: the scheduler binds W's pod on n3 within its backoff; deterministic in both
modes; no admin precondition; T's gain lasts only where its fresh pod wins n3 against W's pod in backoff):
``refused_beside_room`` turns a pod down as soon as ONE node with room refuses it (clock or settle memory), though
another node just got room it fits. Scene: pool n1 + n2 + n3 (8 each), every pod priority 0. T's t fills n1; T's
CPU-only ``hog`` (60 cpu) on n2 keeps W's pods (8 cpu) off n2's 8 free GPUs (rightly: the scheduler's word);
W's w runs 3 on n3 beside T's q (n3 full); W's fourth pod judged 951 (n2 free since the read at 900: refused there at
once, rightly). At 995 T deletes q: n3 has 2 GPUs free, W's pod fits there and the scheduler binds it there next.
The pass at 1000 still turns W's pod down (n2's old clock) and grants T's y (wants 5) n2's 8 AND n3's 2: y 5. The
scheduler alone: W's older pod takes n3, y's pods n2: y 4. Probe
``test_a_pod_refused_on_one_node_with_room_is_not_turned_down_beside_fresh_room_on_another`` (strict xfail); control
``test_control_refused_on_n2_with_no_room_elsewhere`` (n3 stays full: turned down, y 4 - right). Suspected fix: turn
a pod down only where EVERY node with room that could hold it refuses it (clock or settle memory); a node whose room is
younger than the verdict (plus the margin) may still take it.

HELD: (1) a gated pod (PodScheduled False, SchedulingGated) beside room is not "beyond the model" and names no spot
for the settle memory (pass 61 suspected (a), closed by 101ab97's verdict check:
``test_held_a_gated_pod_feeds_no_settle_memory``). (2) The preemption part of the message is not read as a filter's
reason ("Preemption is not helpful for scheduling" on a node T made so does not turn W's GPU-only wait down; a PreFilter
message with no counts does: conservative) (``test_held_the_preemption_part_is_not_a_filters_reason``). (3) T's pod
anti-affinity onto W's pods, from T pods on n1, cannot enter W's verdict for n1: the scheduler stops at a node's first
failing filter and NodeResourcesFit (GPUs) precedes InterPodAffinity; on the node with room it is the scheduler's true
word (read in code/scheduler order, not a probe). (4) The unjudged memory: a gated or not-yet-judged pod seen by a pass
after the room is judged no earlier than that pass; a pod re-created under the same name gets its own
lastTransitionTime (read; the pass-59 fix's tests cover it). A gate lifted right after a pass that started the room
clock leaves the pod judged before clock+margin (the clock starts at the pass's ``now``, the memory at ``listed_at``),
so T's own refused replica stands for the settle time, as one created before the room does: documented settle time,
one-shot (W's growth takes n2 once it is turned down). (5) A turned-down replica is kept (``idle``), not cut: W loses
growth for the pass, never a running replica (read in ``share``; the probes' w stays 4). (6) T's own replica turned
down gains T nothing (pass 61 HELD (1), unchanged).

SUSPECTED, NOT SHOWN: (a) a T pod of a higher pod priority nominated on n2 (its own lower pods preempted and gone, not
yet bound) makes the scheduler judge W's new pod short of GPUs on n2 while the bound list reads n2 free: with finding
1's lever in W's verdict, judged after the room, W's pod is turned down at once (the scheduler would not place it
either, until the nominated pod binds: probably right). (b) Finding 1 with "Too many pods" as the lever needs T to
fill n1 to its pod limit (110 by default): probe kept as a message case only.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): both findings, by their suggested fixes. The verdict is read by node, not by word
(``holding.nodes_refused_beyond_model``: of its N nodes, those neither short of GPUs nor refused by a modelled filter;
a node short of GPUs and of CPU is one "Insufficient nvidia.com/gpu"), and a pod is turned down only where every node
with room that could hold it refuses it by the clocks and the verdict names at least as many such nodes
(``holding.refused_beside_room``); a pod whose verdict names none feeds no settle memory either.
"""
from __future__ import annotations

import pytest
from test_pool_attack48 import MODES, _loop, _operator, _rs_pod, _target
from test_pool_attack52 import NODES2, SYNC_S, _nodes
from test_pool_attack54 import _unschedulable
from test_pool_attack57 import _stamp
from test_pool_unclaimed import _node

from llmbackend.autoscaling import holding

GPU_ONLY = _unschedulable("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are "
                          "available: 2 No preemption victims found for incoming pod.")
# T's lever: n1 lacks GPUs AND cpu (T's pods there ask it), or is at its pod limit (T's tiny pods)
CPU_ON_N1 = _unschedulable("0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient nvidia.com/gpu. preemption: "
                           "0/2 nodes are available: 2 No preemption victims found for incoming pod.")
PODS_ON_N1 = _unschedulable("0/2 nodes are available: 1 Too many pods, 2 Insufficient nvidia.com/gpu. preemption: "
                            "0/2 nodes are available: 2 No preemption victims found for incoming pod.")
CPU_N2 = _unschedulable("0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient nvidia.com/gpu. preemption: "
                        "0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims "
                        "found for incoming pod.")
NODES3 = frozenset({"n1", "n2", "n3"})


def _made(pod, created, judged=None, words=GPU_ONLY):
    """``pod`` created at ``created``; Pending ones judged unschedulable at ``judged`` (``words``: the message)."""
    pod["metadata"]["creationTimestamp"] = _stamp(created)
    if judged is not None:
        pod["status"]["conditions"] = [{**c, "lastTransitionTime": _stamp(judged)} for c in words]
    return pod


def _nodes3():
    return [_node(n, 8, labels={"gpu": "h100", "kubernetes.io/hostname": n}) for n in ("n1", "n2", "n3")]


def _hog(node="n2"):
    """T's CPU-only bare pod bound to ``node`` (60 cpu)."""
    return {"metadata": {"name": f"hog-{node}", "namespace": "T", "labels": {}, "creationTimestamp": _stamp(500.0)},
            "spec": {"nodeName": node, "containers": [{"name": "h", "resources": {"requests": {"cpu": "60"}}}]},
            "status": {"phase": "Running"}}


# --- (F1) a reason the scheduler gave for another node turns W's GPU-only wait down --------------------------------

def _slow(monkeypatch, across, words, syncs=4):
    """Finding 1's passes: 980 (x's pod fills n2), then 1000.. (x gone, n2 has 2 free; W's pod still Pending, judged
    at 976 with ``words``). Returns (w, y, turned down) per sync from 1000."""
    t = [_made(_rs_pod("T", "t", f"t-abc-{i}", 2, "n1"), 100.0) for i in range(4)]
    w = [_made(_rs_pod("W", "w", f"w-abc-{i}", 2, "n2"), 100.0) for i in range(3)]
    x_run = _made(_rs_pod("T", "x", "x-abc-0", 2, "n2"), 100.0)
    w3 = _made(_rs_pod("W", "w", "w-abc-3", 2, None), 975.0, 976.0, words)
    w3["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = "8"

    def targets(xc):
        return {("W", "w"): _target("W", "w", 4, 2, pool_gpus=16, nodes=NODES2, min_replicas=1),
                ("T", "t"): _target("T", "t", 4, 2, pool_gpus=16, nodes=NODES2, min_replicas=4),
                ("T", "x"): _target("T", "x", xc, 2, pool_gpus=16, nodes=NODES2),
                ("T", "y"): _target("T", "y", 0, 2, pool_gpus=16, nodes=NODES2)}
    wanted = {("W", "w"): 4, ("T", "t"): 4, ("T", "x"): 0, ("T", "y"): 1}
    op, out = _operator(), []
    _loop(monkeypatch, targets(1), {("W", "w"): w + [w3], ("T", "t"): t, ("T", "x"): [x_run], ("T", "y"): []},
          w + [w3] + t + [x_run], {**wanted, ("T", "x"): 1}, _nodes(), across=across, now=980.0, operator=op)
    for i in range(syncs):
        d, _ = _loop(monkeypatch, targets(0), {("W", "w"): w + [w3], ("T", "t"): t, ("T", "x"): [], ("T", "y"): []},
                     w + [w3] + t, wanted, _nodes(), across=across, now=1000.0 + SYNC_S * i, operator=op)
        out.append((d[("W", "w")], d[("T", "y")], dict(op.refused_replicas)))
    return out


# Fixed (was a strict xfail): pass 62 finding 1: an unmodelled reason the scheduler gave for n1 (T's cpu, T's pod count) makes W's GPU-only wait beside n2's freed GPUs turned down after the settle time, and T's y is granted n2 (alone: W's older pod binds there)
@MODES
@pytest.mark.parametrize("words", [CPU_ON_N1, PODS_ON_N1], ids=["cpu", "pods"])
def test_a_gpu_only_wait_is_not_turned_down_by_a_reason_given_for_another_node(monkeypatch, across, words):
    """Fixed: "1 Insufficient cpu, 2 Insufficient nvidia.com/gpu" on 2 nodes names no node refused beyond the model."""
    assert _slow(monkeypatch, across, words) == [(4, 0, {})] * 4


@MODES
def test_control_a_gpu_only_verdict_is_never_turned_down(monkeypatch, across):
    """T's pods on n1 ask no cpu: W's verdict names GPUs only and W's pod stands for its replica however long the
    scheduler leaves it beside n2's freed GPUs (101ab97): y 0."""
    assert _slow(monkeypatch, across, GPU_ONLY) == [(4, 0, {})] * 4


# --- (F2) refused on one node with room, turned down beside fresh room on another ----------------------------------

def _two_rooms(monkeypatch, across, free_n3=True, y_want=5):
    """Finding 2's passes: 900 and 960 read n2 free (T's hog keeps W's pods off it), n3 full (T's q); from 1000 q is
    gone where ``free_n3``. Returns (w, y, turned down) at 1000 and 1015."""
    t = [_made(_rs_pod("T", "t", f"t-abc-{i}", 2, "n1"), 100.0) for i in range(4)]
    w = [_made(_rs_pod("W", "w", f"w-abc-{i}", 2, "n3"), 100.0) for i in range(3)]
    q = [_made(_rs_pod("T", "q", "q-abc-0", 2, "n3"), 100.0)]
    w3 = _made(_rs_pod("W", "w", "w-abc-3", 2, None), 950.0, 951.0, CPU_N2)
    w3["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = "8"

    def targets(qc):
        return {("W", "w"): _target("W", "w", 4, 2, pool_gpus=24, nodes=NODES3, min_replicas=1),
                ("T", "t"): _target("T", "t", 4, 2, pool_gpus=24, nodes=NODES3, min_replicas=4),
                ("T", "q"): _target("T", "q", qc, 2, pool_gpus=24, nodes=NODES3),
                ("T", "y"): _target("T", "y", 0, 2, pool_gpus=24, nodes=NODES3)}
    wanted = {("W", "w"): 4, ("T", "t"): 4, ("T", "q"): 1, ("T", "y"): y_want}
    op, out = _operator(), []
    for now in (900.0, 960.0):
        _loop(monkeypatch, targets(1), {("W", "w"): w + [w3], ("T", "t"): t, ("T", "q"): q, ("T", "y"): []},
              w + [w3] + t + q + [_hog()], wanted, _nodes3(), across=across, now=now, operator=op)
    q_now = [] if free_n3 else q
    for now in (1000.0, 1015.0):
        d, _ = _loop(monkeypatch, targets(len(q_now)), {("W", "w"): w + [w3], ("T", "t"): t, ("T", "q"): q_now,
                     ("T", "y"): []}, w + [w3] + t + q_now + [_hog()], {**wanted, ("T", "q"): len(q_now)},
                     _nodes3(), across=across, now=now, operator=op)
        out.append((d[("W", "w")], d[("T", "y")], dict(op.refused_replicas)))
    return out


# Fixed (was a strict xfail): pass 62 finding 2: W's pod refused on n2 (T's hog, rightly) is turned down beside n3's fresh room, where the scheduler binds it next; T's y is granted n2's and n3's GPUs
@MODES
def test_a_pod_refused_on_one_node_with_room_is_not_turned_down_beside_fresh_room_on_another(monkeypatch, across):
    """Fixed: n3's room is younger than the verdict; and the verdict names one node refused beyond the model (n2) for
    two with room."""
    assert _two_rooms(monkeypatch, across) == [(4, 4, {})] * 2


@MODES
def test_control_refused_on_n2_with_no_room_elsewhere(monkeypatch, across):
    """n3 stays full: W's pod can land nowhere (n2: T's cpu, n1 and n3: GPUs); turned down, and y gets n2's 8 GPUs,
    as T's CPU-light pods would land there with the scheduler alone."""
    assert _two_rooms(monkeypatch, across, free_n3=False) == [(4, 4, {("W", "w"): 1})] * 2


# --- HELD ------------------------------------------------------------------------------------------------------------

def _w_pending(conditions):
    pod = _made(_rs_pod("W", "w", "w-abc-3", 2, None), 975.0)
    pod["status"]["conditions"] = conditions
    return pod


def test_held_a_gated_pod_feeds_no_settle_memory():
    """HELD (1): a gated pod beside room: not beyond the model, no spot for the settle memory (pass 61 suspected (a))."""
    gated = _w_pending([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                         "lastTransitionTime": _stamp(975.0)}])
    gated["spec"]["schedulingGates"] = [{"name": "kueue"}]
    assert holding.nodes_refused_beyond_model(gated) == 0
    assert holding.refused_beside_room(gated, _nodes(), {"n1": 0, "n2": 2}, {"n2": {1: 900.0, 2: 900.0}},
                                       {("W", "n2")}, {}) == (False, [])


@pytest.mark.parametrize(("message", "beyond"), [
    ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 1 Preemption is "
     "not helpful for scheduling, 1 No preemption victims found for incoming pod.", False),
    ("0/2 nodes are available: 1 node(s) had untolerated taint {gpu: reserved}, 1 Insufficient nvidia.com/gpu.",
     False),
    ("0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 Insufficient nvidia.com/gpu.",
     False),
    ("0/2 nodes are available: persistentvolumeclaim \"d\" not found. preemption: 0/2 nodes are available: 2 "
     "Preemption is not helpful for scheduling.", True),
    ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't have free ports for the requested pod "
     "ports.", True)], ids=["preemption-part", "taint", "selector", "prefilter", "ports"])
def test_held_the_preemption_part_is_not_a_filters_reason(message, beyond):
    """HELD (2): only the filters' part is read; a PreFilter's message (no counts) reads beyond the model."""
    assert bool(holding.nodes_refused_beyond_model(_w_pending(_unschedulable(message)))) is beyond
