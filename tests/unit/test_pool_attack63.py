"""Sixty-third attacker pass on the GPU pool. Seat: an independent attacker who did not write the code, as a tenant
(namespace T) who may create LLMBackends and pods (any labels, ownerReferences, annotations, nodeSelectors,
affinities, host ports, volumes, scheduling gates, resource requests, the priorityClassName it may use) in its own
namespace, attacking W. A full-length pass on c737b82, aimed first at it: the verdict is read by node
(``holding.nodes_refused_beyond_model``: of "0/N nodes are available", those neither short of GPUs nor refused by a
modelled filter) and a claim's Pending pod is turned down only where every node with room refuses it (the clock, or
the 30 s settle memory) and the verdict names at least as many nodes refused beyond the model
(``holding.refused_beside_room``). Question: the verdict gives a COUNT of nodes, the loop compares it with the nodes
that have room NOW; nothing ties the nodes the verdict refused to the nodes that have room. Loop probes run the
production path (pass 48's ``_loop``) on three nodes, the pods' times on the syncs' clock (pass 57's ``_stamp``).
Time-boxed pass (2 cores, 35 minutes).

PROBES: 5 test functions, 12 cases (9 pass, 3 strict xfail; about 4 s on the loaded 2 cores).

FINDING 1 (medium - deterministic in both modes once the scheduler leaves W's pod Pending beside the freed GPUs for
``SCHEDULER_SETTLE_S``, the same slow-scheduler precondition as pass 62 finding 1 (CI's load, 7cf0ca5); no admin
precondition): the count is matched against nodes that are not the ones it counted. The verdict counted a node
refused beyond the model (T's CPU hog on n3, where W's pod had GPUs then); T then fills n3's GPUs with its own pods,
so n3 is no longer a node with room, and frees 2 GPUs on n2. Scene: pool n1 + n2 + n3 (8 each), every pod priority
0. T's t runs 4 (2-GPU) on n1 (full); W's w runs 3 on n2 beside T's x (1 pod: n2 full); T's CPU-only ``hog`` (60 cpu)
on n3, whose GPUs are free. W's fourth pod w-abc-3 (8 cpu) created 975, judged 976: "0/3 nodes are available: 1
Insufficient cpu, 2 Insufficient nvidia.com/gpu." (n3: cpu; n1, n2: GPUs) - true, and by pass 62's fix a count of
1 node refused beyond the model. At 985 T's z (4 x 2-GPU) fills n3; at 990 T scales x to 0 (n2: 2 free). The
scheduler is slow: W's pod still Pending with that verdict at the passes from 1000. ``refused_beside_room``: rooms
{n2} (n3 is full now), beyond 1 >= 1; the settle memory (W, n2) from 1000 and at 1030 W's pod is turned down:
``refused_replicas`` {w: 1} and T's y (wants 1) is granted n2's 2 GPUs. The scheduler alone: n3 now lacks GPUs for
W too, so W's verdict would read "3 Insufficient nvidia.com/gpu" (0 beyond) - and W's older pod binds on n2 when
retried; y's waits. Probe ``test_a_count_of_nodes_refused_elsewhere_turns_down_no_wait_beside_fresh_room`` (strict
xfail); control ``test_control_the_refused_node_still_has_room_so_two_rooms_outnumber_one`` (no z: n3 keeps its room,
rooms {n2, n3} outnumber the 1 counted: never turned down; y 1 from n3's idle GPUs, as the scheduler places it).
The finding's sequence (both modes): (4, 0, {}) at 1000 and 1015, then (4, 1, {w: 1}) at 1030 and 1045. The same at
the function: ``test_finding_1_at_the_function`` (strict xfail) and its control. Suspected fix: a node whose room
is younger than the pod's verdict was not judged by it: count toward ``len(rooms)`` only the nodes that had room
when the pod was judged (``free_since`` <= judged), and let a younger room be turned down only by the clock (judged
after it), never by the settle memory alone (time alone cannot tell a refused pod from a slow scheduler - 7cf0ca5's
own lesson); or keep the nodes with room at each pass (the settle memory's spots) and require the count to cover the
nodes that had room at the verdict AND have it now.

HELD: (1) Outside-the-pool nodes in N: W's pods carry the pool's nodeSelector, so other products' nodes and CPU nodes
read "didn't match Pod's node affinity/selector" (modelled) and count 0 beyond; a node short of GPUs and of CPU or
pods counts as short (``test_held_the_count_reads_nodes_not_words``: 6 verdicts). (2) Inflating W's count on a node
that still has room does not turn W down: rooms outnumber it (finding 1's control). (3) A co-listed modelled reason
cannot push the count below zero nor cancel an unmodelled node (the max(0, ...) and the per-node histogram; a node
stops at its first failing filter, and the modelled filters precede NodeResourcesFit). (4) T's own refused replica
cannot keep standing by deflating its count: podfit models cordons, taints, node affinity (Gt/Lt via parse_int64,
matchFields), so every node the operator counts a room for T's pod is one the scheduler did not refuse by a modelled
filter (read; pass 60/62 tests cover the host port). (5) PriorityClass, give-back, set_apart_first, quotas: no change
since pass 62; not re-probed.

SUSPECTED, NOT SHOWN: (a) A T pod stuck in PreBind (a WaitForFirstConsumer claim no provisioner serves: assumed on n2
for bindTimeoutSeconds, 600 s, again and again) holds n2's GPUs in the scheduler's cache while the bound list reads
n2 free; W's pod judged after that room by the clock reads n2 "Insufficient nvidia.com/gpu" (short, not beyond), so
with finding 1's lever elsewhere (a count of 1 from a node since filled) W's pod is turned down at once, without the
slow-scheduler precondition. T's y then races for n2 when T deletes the stuck pod; W's pod waits in the unschedulable
queue. Not probed (the assumed pod is invisible to a unit test's lists; the gain also depends on the queue). (b) The
settle memory is keyed by namespace: a spot fed by W's backend v's Pending pod (refused on n2 by T's anti-affinity on
v's labels only) reads as refused for W's backend w's pod there. Needs w's own verdict to count >= 1 node beyond, so
finding 1's precondition again. (c) The ledger of Pending pods no claim covers still turns a spot down by time
alone (``SchedulerMemory.settled``, no verdict read): a W pod of a higher pod priority nominated on n2 while T's
victims there take their own (long, T-chosen) terminationGracePeriodSeconds waits beside "GPUs free of pods it
could not preempt" past the settle time and stops landing there. Not probed: the scheduler alone gives W n2 only
after the victims end either way.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

OPEN (2026-12-07, reviewer), finding 1 stays a medium: its suggested fix (a node whose room is newer than the verdict
is turned down by the clock only, never by the settle memory) reopens pass 60 finding 1 as a high: T frees n2 in the
pass interval in which the scheduler rewrites its adopted pod's verdict ("1 ... free ports" for n2): the room and the
new words are first seen by one pass, the verdict keeps its first lastTransitionTime, and the clock never says
"judged after the room"; without the settle memory the pod stands for good. The residual needs a scheduler that
leaves W's pod beside the room for the settle time (30 s), as pass 62 finding 1's did; docs/security.md says so.
"""
from __future__ import annotations

import pytest
import test_pool_attack62 as pass62
from test_pool_attack48 import MODES, _loop, _operator, _rs_pod, _target
from test_pool_attack52 import SYNC_S
from test_pool_attack54 import _unschedulable
from test_pool_attack62 import NODES3, _nodes3

from llmbackend.autoscaling import holding

# W's verdict at 976: n3 (GPUs free then) lacked cpu (T's hog), n1 and n2 lacked GPUs
CPU_N3 = _unschedulable("0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient nvidia.com/gpu. preemption: "
                        "0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims "
                        "found for incoming pod.")


def _made(pod, created, judged=None, words=CPU_N3):
    return pass62._made(pod, created, judged, words)


def _hog(node="n3"):
    return pass62._hog(node)


# --- (F1) a count of nodes refused elsewhere, matched against a fresh room -------------------------------------------

def _elsewhere(monkeypatch, across, fill_n3=True, syncs=4):
    """Finding 1's passes from 1000 (x gone: n2 has 2 free; z on n3 where ``fill_n3``). W's pod judged at 976 with
    CPU_N3. Returns (w, y, turned down) per sync."""
    t = [_made(_rs_pod("T", "t", f"t-abc-{i}", 2, "n1"), 100.0) for i in range(4)]
    w = [_made(_rs_pod("W", "w", f"w-abc-{i}", 2, "n2"), 100.0) for i in range(3)]
    z = [_made(_rs_pod("T", "z", f"z-abc-{i}", 2, "n3"), 985.0) for i in range(4)] if fill_n3 else []
    w3 = _made(_rs_pod("W", "w", "w-abc-3", 2, None), 975.0, 976.0)
    w3["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = "8"
    targets = {("W", "w"): _target("W", "w", 4, 2, pool_gpus=24, nodes=NODES3, min_replicas=1),
               ("T", "t"): _target("T", "t", 4, 2, pool_gpus=24, nodes=NODES3, min_replicas=4),
               ("T", "z"): _target("T", "z", len(z), 2, pool_gpus=24, nodes=NODES3, min_replicas=len(z)),
               ("T", "y"): _target("T", "y", 0, 2, pool_gpus=24, nodes=NODES3)}
    wanted = {("W", "w"): 4, ("T", "t"): 4, ("T", "z"): len(z), ("T", "y"): 1}
    op, out = _operator(), []
    for i in range(syncs):
        d, _ = _loop(monkeypatch, targets, {("W", "w"): w + [w3], ("T", "t"): t, ("T", "z"): z, ("T", "y"): []},
                     w + [w3] + t + z + [_hog()], wanted, _nodes3(), across=across, now=1000.0 + SYNC_S * i,
                     operator=op)
        out.append((d[("W", "w")], d[("T", "y")], dict(op.refused_replicas)))
    return out


@MODES
@pytest.mark.xfail(strict=True, reason="pass 63 finding 1: the verdict's count of nodes refused beyond the model (T's "
                                       "cpu on n3, since filled with T's GPU pods) is matched against n2's fresh "
                                       "room; after the settle time W's pod is turned down and T's y granted n2")
def test_a_count_of_nodes_refused_elsewhere_turns_down_no_wait_beside_fresh_room(monkeypatch, across):
    """Safe: W's pod stands for its replica; y gets nothing (alone: W's older pod binds on n2 when retried)."""
    assert _elsewhere(monkeypatch, across) == [(4, 0, {})] * 4


@MODES
def test_control_the_refused_node_still_has_room_so_two_rooms_outnumber_one(monkeypatch, across):
    """No z: n3 keeps its 8 free GPUs, rooms {n2, n3} outnumber the 1 node counted: W's pod is never turned down
    (y 1 from n3's idle GPUs, where the scheduler places y's pod too: not W's)."""
    assert _elsewhere(monkeypatch, across, fill_n3=False) == [(4, 1, {})] * 4


def _w3():
    pod = _made(_rs_pod("W", "w", "w-abc-3", 2, None), 975.0, 976.0)
    pod["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = "8"
    return pod


FREE = {"n1": 0, "n2": 2, "n3": 0}
SINCE = {"n2": {1: 1000.0, 2: 1000.0}}


@pytest.mark.xfail(strict=True, reason="pass 63 finding 1: the settle memory alone speaks for n2 (room since 1000, "
                                       "the verdict 976); the count of 1 came from n3, now full")
def test_finding_1_at_the_function():
    """Safe: a room younger than the verdict is not judged by it: not turned down."""
    pod = _w3()
    assert holding.nodes_refused_beyond_model(pod) == 1
    assert holding.refused_beside_room(pod, _nodes3(), FREE, SINCE, {("W", "n2")}, {}) == (False, ["n2"])


def test_control_finding_1_at_the_function():
    """n3 still has its room (since 900, before the verdict): two rooms, one node counted: not turned down; and
    without the settle memory's (W, n2) the young room on n2 alone is not turned down either."""
    pod = _w3()
    n3 = {k: 900.0 for k in range(1, 9)}
    assert holding.refused_beside_room(pod, _nodes3(), {**FREE, "n3": 8}, {**SINCE, "n3": n3},
                                       {("W", "n2"), ("W", "n3")}, {}) == (False, ["n2", "n3"])
    assert holding.refused_beside_room(pod, _nodes3(), FREE, SINCE, set(), {}) == (False, ["n2"])


# --- HELD -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("message", "beyond"), [
    ("0/5 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 3 Insufficient nvidia.com/gpu.", 0),
    ("0/3 nodes are available: 1 Insufficient cpu, 3 Insufficient nvidia.com/gpu.", 0),
    ("0/3 nodes are available: 2 Too many pods, 3 Insufficient nvidia.com/gpu.", 0),
    ("0/3 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 2 Insufficient nvidia.com/gpu.", 1),
    ("0/3 nodes are available: 3 node(s) had untolerated taint {a: b}, 3 Insufficient nvidia.com/gpu.", 0),
    ("0/3 nodes are available: 1 node(s) were unschedulable, 1 Insufficient memory, 1 Insufficient nvidia.com/gpu.",
     1)], ids=["outside-pool", "cpu-on-short", "pods-on-short", "anti-affinity", "over-count", "cordon-memory"])
def test_held_the_count_reads_nodes_not_words(message, beyond):
    """HELD (1), (3): nodes outside the pool read as modelled; a node short of GPUs and more counts as short; counts
    that overlap never go below 0."""
    pod = _made(_rs_pod("W", "w", "w-abc-3", 2, None), 975.0)
    pod["status"]["conditions"] = _unschedulable(message)
    assert holding.nodes_refused_beyond_model(pod) == beyond
