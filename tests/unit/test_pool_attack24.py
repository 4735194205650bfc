"""Twenty-fourth attacker pass on the GPU pool (autoscaling/pool.py ``share``/``served_first``/``contested``/
``third_waits``/``older_waiting``, holding.py ``unclaimed_waiting``/``_volatile_met``/``_node_kinds``/``_unplaceable``/
``held_replicas``, controller/run.py ``_share_pools``/``_unclaimed_waiting``), as a tenant who may edit LLMBackends in
its own namespace and create, patch and delete pods there (labels, annotations, ownerReferences, nodeSelector,
affinity, tolerations, requests, schedulerName, schedulingGates, classes it may use). Aimed at 12c8ca0 (passes
21-23's fixes): the cluster-wide list of Pending pods no claim covers, step 2's ``served_first``, what a pod asks of
the dropped label ``nvidia.com/gfd.timestamp`` taken as met, a shape judged once a node kind, and a Pending pod of
another scheduler not judged yet holding nothing. Shares are fed back sync after sync through the kube-scheduler
model of tests/unit/pool_scheduler.py (the pool as one bin of GPUs; among pods of one priority the unseen bare pods
are the oldest; a pod that does not fit preempts lower pod priorities only when that makes it fit).

Summary: four findings.
High (theft, both modes, no forgery, one bare priority-0 pod): step 2 counts a higher class's waiting replicas in
GPUs, not whole replicas (``served_first``: ``waiting_gpus.pod_priority_from(top + 1) - freed_for_waiting``). Pool
5: c (class 5, 2-GPU replicas) runs 2 and waits 1, b (another namespace, no class) runs 1 GPU. Step 2 cuts b for c
although the GPU it frees can never complete c's 2-GPU replica (the kube-scheduler alone would not preempt b: it
frees too little); the tenant's older bare pod of a third namespace takes it, for good (b 1 -> 0, t's pod runs).
The fuzz of mixed replica sizes below finds the same shape on its own. Fix: in step 2, count a cut for the waiting
replicas of a higher pod priority only while the cuts still possible complete one of them (as step 3's "whole
replicas", giving back a cut that does not), else treat ``served_first`` as true.
Medium (theft, default mode, needs a PriorityClass the tenant may use a little of, e.g. a class-scoped quota of one
GPU): step 2's ``served_first`` leaves out the nominal taker's namespace (``unclaimed_top((cut.namespace,
taker.namespace))``), and the nominal taker is merely the highest holder that outranks the cut, whether or not it
waits. A tenant whose class-5 backend holds one GPU at its minReplicas (wanting nothing) is the nominal taker of
namespace a's own reshuffle (a0 3 -> 2 for a1): its own bare priority-0 pod is then no "third namespace" and is not
counted, the cut goes ahead and the tenant's older bare pod takes a0's GPU. Without the class backend the reshuffle
waits. Fix: exclude only the namespaces of the pods that actually wait for what the cut frees (the cut's own), or
exclude the taker's namespace only when the taker itself waits above the bare pods' priority.
Medium (denial, one Pending pod, no class): ``_volatile_met`` takes every condition on ``nvidia.com/gfd.timestamp``
as met, whatever its operator and values, and a node-selector term made only of such conditions makes the whole
required affinity met. A tenant's pod with terms ``[{gfd.timestamp In ["0"]}, {kubernetes.io/hostname In [q1]}]``
(q1: a full GPU node of another pool, e.g. filled by its own pods) can only ever run on q1, and the scheduler judges
it short of GPUs there; ``unclaimed_waiting`` counts it in every pool whose nodes carry GFD labels, and there it
freezes other namespaces' own reshuffles for good (also through ``Operator._share_pools``: ns/low stays 3, ns/high
waits). The same with ``DoesNotExist`` on the label. Fix: take as met only ``Exists`` (every GFD node has the label);
for values keep the label's value per node for this check (outside the node kind, read only when a pod names it).
Medium (cost, a regression of pass 22's fix): the node kinds are cached per (pool, label keys the pod reads), so a
tenant's pods that each name another made-up label key (a nodeSelector ``{k<i>: v}``, or ``DoesNotExist`` on it)
rebuild the kinds of every node of every pool, pod after pod: 400 such Pending pods cost ~10x more CPU with 32 pools
of 8 nodes than with one (~0.2 s a pass here, every second on the event loop), where 400 pods of distinct requests
cost ~1.6x. Fix: drop from the kind key the label keys no node of the pool carries (they read absent on every node),
or project the pool's few full kinds instead of its nodes.
Sound: a higher class's waiting replica that the cuts complete (1 or 2 GPUs) feeds no bare pod in step 2 (both
modes); namespace a's reshuffle waits for a third namespace's bare pod (control for the nominal taker); a pod whose
term names a non-volatile label no pool node has, or that asks ``Exists`` of the GFD label, is judged as the real
node would; a claimed backend's Pending replica of another scheduler counts once that scheduler finds it short of
GPUs, and a pod adopted with ``nodeName`` outside the pool holds and runs nothing of it; an unread claim in the
taker's own namespace does not stop the taker's namespace's reshuffle; a fuzz of 300 pools (both modes, classes 5
and 10, unread claims of any namespace, 1 to 2 bare pods of third namespaces) of 1-GPU replicas through the scheduler
model: floors hold, shares settle, the bare pods gain no GPU beyond those free, those the scheduler preempted, or a
leftover of a cut the scheduler itself would have made (a higher pod priority grew where a lower one fell).
Not covered: a pod of a secondary scheduler that exists but writes no ``PodScheduled`` condition (Volcano gangs not
ready) is counted by nobody until it does, as documented; a tenant's pod created with ``spec.nodeName`` bypasses the
scheduler and the list alike (a race with any freed GPU, with or without the operator).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random

import pytest
from cpu_probe import quiet_cpu_s
from pool_scheduler import claim
from pool_scheduler import scheduled as _scheduled
from pool_scheduler import unclaimed as _unclaimed
from test_autoscale_loop import _pool_target, _wanting
from test_pool_unclaimed import _node, _operator_with_pending, _pod

from llmbackend.autoscaling.holding import bound_replicas, held_replicas, unclaimed_waiting
from llmbackend.autoscaling.pool import Claim, share
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.podfit import failures, pod_requests

POOL = ("gpu",)
OTHER = ("other",)
STAMP = "nvidia.com/gfd.timestamp"


def _runs(claims: list[Claim], across: bool = False, syncs: int = 5, step: float = 30.0, unseen=(), seen=None):
    """Pass 23's driver: each sync the shares (``seen``: the claims as the pool reads them, e.g. unread), then what
    the scheduler model runs; the next sync's claims are the shares and what ran. Yields (claims, shares, running,
    running before the sync)."""
    state, now = None, 1000.0
    unseen = list(unseen)
    before = {c.key: c.bound or 0 for c in claims} | {("unseen", n): r for n, _, r, _ in unseen}
    for _ in range(syncs):
        out, state = share([seen(c) if seen else c for c in claims], now, state, across, _unclaimed(claims, unseen))
        running = _scheduled(claims, out, unseen)
        yield claims, out, running, before
        before = dict(running)
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas,
                                      bound=running[c.key]) for c in claims]
        unseen = [(n, g, running[("unseen", n)], r + w - running[("unseen", n)]) for n, g, r, w in unseen]
        now += step


def _last(claims, **kw):
    *_, (claims, out, running, _) = _runs(claims, **kw)
    return out, running


# --- (1) step 2: a higher class's multi-GPU waiting replica that the cut cannot complete ------------------------------


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_control_step_2_cuts_for_a_higher_class_replica_the_cuts_complete_and_the_bare_pod_gets_nothing(across):
    """Pool 6: c (class 5, 2-GPU replicas) runs 2 and waits 1, b runs 2 1-GPU replicas: both b's replicas complete
    c's, as the kube-scheduler's own preemption would; the bare 1-GPU pod of t gets nothing."""
    cs = [claim("c", "c", pool_gpus=6, class_priority=5, gpus_per_replica=2, current=3, held=3, bound=2, wanted=3),
          claim("b", "b", pool_gpus=6, current=2, held=2, bound=2, wanted=2)]
    for _, out, running, _ in _runs(cs, across=across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("unseen", "t")] == 0, (out, running)
    assert running[("c", "c")] == 3 and running[("b", "b")] == 0, (out, running)


def _multi_gpu_taker() -> list[Claim]:
    """Pool 5: c (class 5, 2-GPU replicas) runs 2 and waits 1 (the scheduler cannot preempt enough for it: b's one
    GPU is all there is of a lower pod priority); b (another namespace, no class) runs 1 GPU."""
    return [claim("c", "c", pool_gpus=5, class_priority=5, gpus_per_replica=2, current=3, held=3, bound=2, wanted=3),
            claim("b", "b", pool_gpus=5, current=1, held=1, bound=1, wanted=1)]


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_control_without_a_bare_pod_the_higher_class_still_cannot_run_its_replica(across):
    """The scheduler model agrees the freed GPU cannot complete c's replica: c runs 2 however b is cut."""
    out, running = _last(_multi_gpu_taker(), across=across, syncs=3)
    assert running[("c", "c")] == 2, (out, running)


# Fixed (was a strict xfail): FINDING (high) step 2 counted a higher class's waiting replicas in GPUs, not whole replicas, and cut for a 2-GPU replica the cuts could not complete; served_first now also asks that what the cuts can free completes the smallest such replica.
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_step_2_cuts_for_a_multi_gpu_replica_it_cannot_complete_and_a_bare_pod_takes_the_gpu(across):
    for _, out, running, before in _runs(_multi_gpu_taker(), across=across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("unseen", "t")] == 0, (out, running, before)
        assert running[("b", "b")] == 1, (out, running, before)


# --- (2) step 2's nominal taker: the tenant's class backend at its floor ------------------------------------------


def _a_reshuffle(pool_gpus: int) -> list[Claim]:
    """Namespace a's own reshuffle, the pool overcommitted: a0 runs 3, a1 (priority 5) holds 1 Pending replica."""
    return [claim("a", "a0", pool_gpus=pool_gpus, current=3, held=3, bound=3, wanted=3),
            claim("a", "a1", pool_gpus=pool_gpus, priority=5, current=1, held=1, bound=0, wanted=1)]


def test_control_a_reshuffle_waits_for_a_third_namespaces_older_bare_pod():
    out, running = _last(_a_reshuffle(3), syncs=3, unseen=[("t", 1, 0, 1)])
    assert running[("unseen", "t")] == 0 and running[("a", "a0")] == 3, (out, running)


# Fixed (was a strict xfail): FINDING (medium) served_first left out the nominal taker's namespace; only the cut's namespace is left out now (in step 3 too: third_waits counts the taker's namespace's pods, which are not the taker).
def test_a_tenants_class_backend_at_its_floor_makes_its_bare_pod_no_third_namespaces():
    tc = claim("t", "tc", pool_gpus=4, class_priority=5, current=1, held=1, bound=1, wanted=1, min_replicas=1)
    for _, out, running, before in _runs([tc, *_a_reshuffle(4)], syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("unseen", "t")] == 0, (out, running, before)
        assert running[("a", "a0")] == 3, (out, running, before)


# --- (3) what a pod asks of the dropped label, taken as met whatever it asks -----------------------------------------

GFD_NODE = {"metadata": {"name": "n1", "labels": {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "3", "kubernetes.io/hostname": "n1",
    STAMP: "1733900000"}},
    "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "3", "cpu": "64", "memory": "512Gi", "pods": "110"}}}
# a node of another pool, full (of the tenant's own pods, say)
Q_NODE = copy.deepcopy(GFD_NODE)
Q_NODE["metadata"]["name"] = "q1"
Q_NODE["metadata"]["labels"].update({"kubernetes.io/hostname": "q1", "nvidia.com/gpu.product": "NVIDIA-A100"})
# the kube-scheduler's word for a pod that only q1 may hold, q1 full
SHORT_ON_Q1 = ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node "
               "affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming "
               "pod, 1 Preemption is not helpful for scheduling.")


def _only_q1(first: dict) -> dict:
    """A Pending pod of t whose required node affinity is ``first`` OR hostname q1, judged short of GPUs on q1."""
    pod = _pod(namespace="t", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [first]},
                              {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                     "values": ["q1"]}]}]}}})
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": SHORT_ON_Q1}]
    return pod


def _real(node: dict):
    """The node as the kube-scheduler sees it: every label, the dropped one included."""
    return dataclasses.replace(parse_node(node), labels=tuple(sorted(node["metadata"]["labels"].items())))


def _reshuffle_of_a(pool_gpus: int = 3) -> list[Claim]:
    return [claim("a", "a0", pool_gpus=pool_gpus, current=3, held=3, bound=3, wanted=3),
            claim("a", "a1", pool_gpus=pool_gpus, priority=5, wanted=1)]


def _listed_and_reshuffle(pod: dict):
    listed = unclaimed_waiting([pod], {POOL: [parse_node(GFD_NODE)], OTHER: [parse_node(Q_NODE)]}, lambda p: None)
    out, _ = share(_reshuffle_of_a(), 1000.0, unclaimed=listed)
    return listed, out


@pytest.mark.parametrize("first", [
    {"key": "gpu-rack", "operator": "In", "values": ["r9"]},      # a label no node of the pool has
    {"key": STAMP, "operator": "Exists"},                         # every GFD node has it: it may run on n1
], ids=["other-label", "stamp-exists"])
def test_control_a_pod_is_counted_in_a_pool_as_the_real_node_would_place_it(first):
    pod = _only_q1(first)
    fits_n1 = not failures(pod["spec"], pod_requests(pod["spec"]), _real(GFD_NODE))
    assert not failures(pod["spec"], pod_requests(pod["spec"]), _real(Q_NODE))
    listed, out = _listed_and_reshuffle(pod)
    assert bool(listed[POOL]) == fits_n1 and listed[OTHER], listed
    assert (out[("a", "a1")].replicas == 0) == fits_n1, out


# Fixed (was a strict xfail): FINDING (medium) every condition on nvidia.com/gfd.timestamp was taken as met; the inventory now keeps the node's volatile labels aside (GPUNode.volatile_labels, not compared) and unclaimed_waiting reads them as the scheduler does.
@pytest.mark.parametrize("first", [
    {"key": STAMP, "operator": "In", "values": ["0"]},
    {"key": STAMP, "operator": "DoesNotExist"},
], ids=["stamp-in-0", "stamp-does-not-exist"])
def test_a_pod_that_can_never_run_in_the_pool_freezes_its_reshuffle_through_the_dropped_label(first):
    pod = _only_q1(first)
    assert failures(pod["spec"], pod_requests(pod["spec"]), _real(GFD_NODE))  # n1 never holds it
    listed, out = _listed_and_reshuffle(pod)
    assert listed[OTHER], listed  # where it may run it counts
    assert not listed[POOL], listed
    assert out[("a", "a1")].replicas == 1 and out[("a", "a0")].replicas == 2, out


def _controller_reshuffle(monkeypatch, pod: dict) -> tuple[int, int]:
    """Through Operator._share_pools: the pool is GFD_NODE (3 GPUs); ns/low runs 3, ns/high (priority 10) wants 1;
    ``pod`` is the one Pending pod the cluster-wide list answers."""
    operator = _operator_with_pending(monkeypatch, [pod])
    operator.state.inventory.upsert(GFD_NODE)
    targets = {("ns", "high"): _pool_target("ns", "high", 0, priority=10),
               ("ns", "low"): _pool_target("ns", "low", 3, priority=0)}
    targets = {k: dataclasses.replace(t, pool_nodes=frozenset({"n1"}), pool_gpus=3) for k, t in targets.items()}
    operator.uncapped = {("ns", "high"): _wanting(1), ("ns", "low"): _wanting(3)}
    asyncio.run(operator._share_pools(targets))
    return (operator.state.decisions[("ns", "high")].desired_replicas,
            operator.state.decisions[("ns", "low")].desired_replicas)


def test_control_the_loop_reshuffles_past_a_pod_only_another_pool_may_hold(monkeypatch):
    assert _controller_reshuffle(monkeypatch, _only_q1({"key": "gpu-rack", "operator": "In",
                                                        "values": ["r9"]})) == (1, 2)


# Fixed (was a strict xfail): FINDING (medium) the same through Operator._share_pools; fixed with it.
def test_the_loop_is_frozen_by_a_pod_only_another_pool_may_hold_through_the_dropped_label(monkeypatch):
    assert _controller_reshuffle(monkeypatch, _only_q1({"key": STAMP, "operator": "In", "values": ["0"]})) == (1, 2)


# --- (4) the schedulerName and nodeName rules on a claimed backend's pods -------------------------------------------

RS_T0 = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t0-5d8c7f", "uid": "uid-of-t0-rs", "controller": True}
T0_LABELS = {"llmbackend.dev/backend": "t0", "app.kubernetes.io/component": "server", "pod-template-hash": "5d8c7f"}


def _tenant_claim(second: dict) -> Claim:
    """t0: one replica runs on n1, ``second`` is its other pod, read as the controller reads them."""
    running = _pod(namespace="t", name="t0-5d8c7f-a", node="n1", phase="Running", labels=T0_LABELS, owner=RS_T0)
    pods, nodes = [running, second], frozenset({"n1", "n2"})
    held = held_replicas(2, pods, {"status": {"conditions": []}}, nodes, True, grouped=False, workload_made="t0")
    bound = bound_replicas(2, pods, nodes, True, False, "t0")
    return claim("t", "t0", current=2, held=held, bound=bound, wanted=2)


def _second(**spec) -> dict:
    return _pod(namespace="t", name="t0-5d8c7f-f", labels=T0_LABELS, owner=RS_T0, **spec)


def test_a_replica_of_another_scheduler_that_found_it_short_of_gpus_still_stops_a_reshuffle():
    """Pass 23's fix must not drop a real waiting replica: judged short of GPUs by its scheduler, it holds and waits
    (older than a1's new pod), so namespace a's reshuffle, whose GPU it would take, waits."""
    pod = _second(schedulerName="volcano")
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]
    t0 = _tenant_claim(pod)
    assert (t0.held, t0.bound) == (2, 1), t0
    out, _ = share([t0, *_reshuffle_of_a(4)], 1000.0, unclaimed={POOL: []})
    assert out[("a", "a1")].replicas == 0 and out[("a", "a0")].replicas == 3, out


def test_a_replica_pinned_by_node_name_outside_the_pool_holds_and_runs_nothing_of_it():
    """A pod the tenant makes its ReplicaSet adopt with ``nodeName`` a node outside the pool (the kubelet there runs it,
    no scheduler): it is neither a running replica of the pool nor one that waits, so it stops no reshuffle and frees
    no GPU claimed by another."""
    t0 = _tenant_claim(_second(nodeName="cpu-node-7"))
    assert (t0.held, t0.bound) == (1, 1), t0
    out, _ = share([t0, *_reshuffle_of_a(4)], 1000.0, unclaimed={POOL: []})
    assert out[("a", "a1")].replicas == 1 and out[("a", "a0")].replicas == 2, out
    assert out[t0.key].replicas == 2  # its ReplicaSet keeps the pod: the replica is not cut for a's


def test_an_unread_claim_in_the_takers_own_namespace_does_not_stop_its_reshuffle():
    """a2 of namespace a (pods not read) counts as waiting where that stops a cut, but a's own waiting pods never
    stop a's own reshuffle (its namespace's concern)."""
    cs = [*_reshuffle_of_a(4), claim("a", "a2", pool_gpus=4, current=1, held=1, bound=None, wanted=1, min_replicas=1)]
    out, _ = share(cs, 1000.0, unclaimed={POOL: []})
    assert out[("a", "a1")].replicas == 1 and out[("a", "a0")].replicas == 2, out


# --- (5) fuzz through the scheduler model --------------------------------------------------------------------------


def _fuzz_pool(rng: random.Random, sizes: list[int]) -> tuple[list[Claim], int]:
    pool = rng.choice([3, 4, 6, 8])
    cs, used = [], 0
    for i in range(rng.randint(2, 6)):
        g = min(pool, rng.choice(sizes))
        cur = rng.randint(0, 3)
        bound = min(cur, max(0, (pool - used) // g))
        used += bound * g
        minimum = rng.choice([0, 0, 1, cur])
        ns = rng.choice("tabc") if i else "t"
        cs.append(claim(ns, f"{ns}{i}", pool_gpus=pool, priority=rng.choice([0, 1, 5]), current=cur, held=cur,
                        bound=bound, wanted=max(cur, minimum) + rng.randint(0, 2), min_replicas=minimum,
                        gpus_per_replica=g, class_priority=rng.choice([None, None, 5, 10])))
    return cs, pool


def _fuzz(seed: int, sizes: list[int], trials: int = 300) -> None:
    """Pools of fuzzed claims (both modes; classes 5 and 10; ~30 % of the claims, of any namespace, unread every
    sync; 1-2 bare Pending pods of third namespaces). Over 5 syncs: no backend below min(current, minReplicas) unless
    preempted; the bare pods gain no GPUs beyond those free before the sync and those the scheduler model preempted,
    unless a backend that ran more outranks by pod priority one that ran less (the leftover of a cut the
    kube-scheduler would have made itself); the last two syncs' shares are equal."""
    rng = random.Random(seed)
    for trial in range(trials):
        across = trial % 2 == 0
        cs, pool = _fuzz_pool(rng, sizes)
        unread = {c.key for c in cs if rng.random() < 0.3}

        def seen(c: Claim, unread=unread) -> Claim:
            return dataclasses.replace(c, bound=None) if c.key in unread else c

        unseen = [(f"bare{j}", rng.choice([1, 2]), 0, rng.randint(1, 2)) for j in range(rng.randint(1, 2))]
        shares = []
        for claims, out, running, before in _runs(cs, across, syncs=5, unseen=unseen, seen=seen):
            free_before = pool - sum(before[c.key] * c.gpus_per_replica for c in claims) - sum(
                before[("unseen", n)] * g for n, g, _, _ in unseen)
            gained = sum((running[("unseen", n)] - before[("unseen", n)]) * g for n, g, _, _ in unseen)
            preempted = sum(max(0, min(before[c.key], out[c.key].replicas) - running[c.key]) * c.gpus_per_replica
                            for c in claims)
            grew = [c for c in claims if running[c.key] > before[c.key]]
            fell = [c for c in claims if running[c.key] < before[c.key]]
            scheduler_would = any(g.scheduling_priority > f.scheduling_priority for g in grew for f in fell)
            assert gained <= max(0, free_before) + preempted or scheduler_would, (
                trial, across, unread, claims, out, running, before)
            for v in claims:
                s = out[v.key]
                assert s.replicas >= min(v.current, v.min_replicas) or s.preempted_by, (trial, v, out)
            shares.append({k: s.replicas for k, s in out.items()})
        assert shares[-1] == shares[-2], (trial, across, shares)


def test_fuzz_one_gpu_replicas_unread_claims_classes_and_bare_pods_feed_no_bare_pod():
    _fuzz(2401, [1])


# Fixed (was a strict xfail): FINDING (high) the fuzz's find of the multi-GPU case above; fixed with it.
def test_fuzz_mixed_replica_sizes_feed_no_bare_pod():
    _fuzz(2402, [1, 1, 2, 4])


# --- (6) cost ------------------------------------------------------------------------------------------------------------


def _cpu(pods: list[dict], pools: dict) -> float:
    return quiet_cpu_s(lambda: unclaimed_waiting(pods, pools, lambda pod: None))


def _pools(n: int, per: int = 8) -> dict:
    return {(f"P{p}",): [_node(f"n{p}-{i}", labels={"gpu": f"h{p}", "kubernetes.io/hostname": f"n{p}-{i}"})
                         for i in range(per)] for p in range(n)}


def test_control_pods_of_distinct_requests_cost_little_more_with_many_pools():
    pods = []
    for i in range(400):
        pod = _pod(namespace="t", name=f"p{i}", nodeSelector={"gpu": "h0"})
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{i + 1}m"}
        pods.append(pod)
    one, many = _cpu(pods, _pools(1)), _cpu(pods, _pools(32))
    assert many <= 4 * one + 0.02, (one, many)


# Fixed (was a strict xfail): FINDING (medium, cost) node kinds were rebuilt for each made-up label key; a key no node of the pool has is not part of a kind (and a nodeSelector naming one fails the pool at once).
def test_pods_that_each_name_another_label_key_cost_as_many_times_the_nodes():
    pods = [_pod(namespace="t", name=f"p{i}", nodeSelector={f"k{i}": "v"}) for i in range(400)]
    one, many = _cpu(pods, _pools(1)), _cpu(pods, _pools(32))
    assert many <= 4 * one + 0.02, (one, many)
