"""Pending GPU pods no claim covers (a bare pod, a backend the operator does not autoscale): which pods count for a
pool (holding.unclaimed_waiting), what the pool does with them (pool.share: a cut whose GPUs they would take is not
made), and the controller's one cluster-wide read a pass (run.Operator._share_pools). Attack pass 21's high finding."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime

import pytest
from test_autoscale_loop import _pool_target, _wanting
from test_backoff import _operator

from llmbackend.autoscaling.holding import (
    beyond_count,
    could_run_on,
    counted_waiting,
    held_replicas,
    thin_waiting,
    unclaimed_waiting,
)
from llmbackend.autoscaling.pool import Claim, Unclaimed, share
from llmbackend.planning.inventory import GPUNode

POOL = ("gpu",)


def _node(name: str, gpus: int = 4, labels: dict | None = None, taints=()) -> GPUNode:
    return GPUNode(name=name, gpu_count=gpus, product="NVIDIA-H100-80GB-HBM3", memory_bytes=80 << 30, family="hopper",
                   compute_capability=(9, 0), clique=None, nvlink_domains=(tuple(range(gpus)),),
                   topology_source="inferred", schedulable=not taints, taints=tuple(taints),
                   labels=tuple(sorted((labels or {"gpu": "h100"}).items())),
                   allocatable=(("nvidia.com/gpu", gpus), ("pods", 110)))


def _pod(namespace: str = "t", name: str = "p", gpus: int = 1, node: str | None = None, phase: str = "Pending",
         priority=None, labels: dict | None = None, owner: dict | None = None, **spec) -> dict:
    pod_spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}], **spec}
    if node:
        pod_spec["nodeName"] = node
    if priority is not None:
        pod_spec["priority"] = priority
    meta = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": pod_spec, "status": {"phase": phase}}


NODES = {POOL: [_node("n1"), _node("n2")]}


def _waiting(pods, pools=None, claimed=lambda pod: None):
    return unclaimed_waiting(pods, NODES if pools is None else pools, claimed)[POOL]


def test_a_bare_pending_gpu_pod_counts_with_its_namespace_priority_and_gpus():
    assert _waiting([_pod(priority=100, gpus=2)]) == [Unclaimed("t", 100, 2)]
    assert _waiting([_pod(priority=True)]) == [Unclaimed("t", 0, 1)]  # not an integer: no PriorityClass value
    assert _waiting([_pod()], pools={POOL: None}) == [Unclaimed("t", 0, 1)]  # nodes not known: every pod counts


@pytest.mark.parametrize("pod", [
    _pod(node="n1", phase="Running"),                 # runs
    _pod(node="n1"),                                  # bound, not started yet: it holds its GPU already
    _pod(phase="Failed"),                             # ended
    _pod(gpus=0),                                     # asks for no GPU
    _pod(schedulingGates=[{"name": "queue"}]),        # nothing places it until its gate is lifted
    _pod(gpus=8),                                     # no node of the pool has 8 GPUs
    _pod(nodeSelector={"gpu": "a100"}),               # another pool's nodes
    _pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["b200"]}]}]}}}),
], ids=["running", "bound", "ended", "no-gpu", "gated", "too-large", "selector", "affinity"])
def test_pods_that_take_no_freed_gpu_of_the_pool_do_not_count(pod):
    assert _waiting([pod]) == []


def _judged(message: str) -> dict:
    pod = _pod()
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": message}]
    return pod


def test_a_pod_the_scheduler_finds_short_of_something_else_than_gpus_does_not_count():
    short = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No " \
            "preemption victims found for incoming pod."
    assert _waiting([_judged(short)]) == [Unclaimed("t", 0, 1)]
    volume = "0/2 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/2 nodes are " \
             "available: 2 Preemption is not helpful for scheduling."
    assert _waiting([_judged(volume)]) == []  # a cut would free a GPU it still could not run on


def test_a_deleted_pod_and_a_claimed_replica_do_not_count_and_a_forged_one_does():
    leaving = _pod()
    leaving["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    assert _waiting([leaving]) == []
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-abc", "controller": True, "uid": "u"}
    replica = _pod(labels={"pod-template-hash": "abc"}, owner=rs)
    forged = _pod(name="forged", labels={"pod-template-hash": "abc"})
    from llmbackend.autoscaling.holding import made_by
    assert _waiting([replica, forged], claimed=lambda pod: POOL if made_by(pod, "llm") else None) == [Unclaimed("t", 0, 1)]


def test_a_pod_counts_only_where_it_tolerates_the_taints_of_some_node():
    tainted = {POOL: [_node("n1", taints=[("dedicated", "llm", "NoSchedule")])]}
    assert _waiting([_pod()], pools=tainted) == []
    tolerant = _pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}])
    assert _waiting([tolerant], pools=tainted) == [Unclaimed("t", 0, 1)]


def test_pods_of_one_shape_are_judged_once_a_pool():
    calls = []

    class Counting(list):
        def __iter__(self):
            calls.append(1)
            return super().__iter__()

    pods = [_pod(name=f"p{i}") for i in range(500)]
    assert len(unclaimed_waiting(pods, {POOL: Counting(NODES[POOL])}, lambda pod: None)[POOL]) == 500
    assert len(calls) == 2  # the pool's label keys, then its node kinds: once each, not once a pod


# --- the pool ------------------------------------------------------------------------------------------------------


def _claim(namespace: str, name: str, **kw) -> Claim:
    fields = dict(namespace=namespace, name=name, pool=POOL, pool_gpus=3, priority=0, current=0, wanted=0,
                  min_replicas=0, gpus_per_replica=1)
    fields.update(kw)
    return Claim(**fields)


def _reshuffle(bound: bool) -> list[Claim]:
    """Namespace a: a0 runs 3 GPUs of 3, a1 (priority 5) wants 1: a's own reshuffle."""
    known = {"bound": 3} if bound else {}
    return [_claim("a", "a0", current=3, held=3, wanted=3, **known),
            _claim("a", "a1", priority=5, wanted=1, **({"bound": 0} if bound else {}))]


@pytest.mark.parametrize("bound", [True, False], ids=["pods-read", "judged"])
def test_a_reshuffle_waits_while_another_namespaces_pod_would_take_what_it_frees(bound):
    out, _ = share(_reshuffle(bound), 1000.0)
    assert out[("a", "a1")].replicas == 1 and out[("a", "a0")].replicas == 2  # control: nothing else waits
    out, _ = share(_reshuffle(bound), 1000.0, unclaimed={POOL: [Unclaimed("t", 0, 1)]})
    assert out[("a", "a1")].replicas == 0 and out[("a", "a0")].replicas == 3


@pytest.mark.parametrize("waiting", [Unclaimed("a", 0, 1), Unclaimed("t", -10, 1)], ids=["own-namespace", "lower"])
def test_a_pod_of_the_namespace_itself_or_of_a_lower_pod_priority_does_not_stop_it(waiting):
    out, _ = share(_reshuffle(True), 1000.0, unclaimed={POOL: [waiting]})
    assert out[("a", "a1")].replicas == 1 and out[("a", "a0")].replicas == 2


def test_a_pod_of_a_higher_pod_priority_stops_it_too():
    out, _ = share(_reshuffle(True), 1000.0, unclaimed={POOL: [Unclaimed("t", 1000, 1)]})
    assert out[("a", "a1")].replicas == 0


def test_across_step_2_does_not_cut_a_third_namespace_for_a_pod_another_takes():
    """Across namespaces, pool 4: a runs 2, b (priority 5) runs 2 of 3; a bare pod of t waits."""
    a = _claim("a", "a", pool_gpus=4, current=2, held=2, bound=2, wanted=2)
    b = _claim("b", "b", pool_gpus=4, priority=5, current=3, held=3, bound=2, wanted=3)
    out, _ = share([a, b], 1000.0, across_namespaces=True)
    assert out[a.key].replicas == 1  # control: the cut serves b
    out, _ = share([a, b], 1000.0, across_namespaces=True, unclaimed={POOL: [Unclaimed("t", 0, 1)]})
    assert out[a.key].replicas == 2


def test_another_pools_pods_do_not_count():
    out, _ = share(_reshuffle(True), 1000.0, unclaimed={("other",): [Unclaimed("t", 0, 1)]})
    assert out[("a", "a1")].replicas == 1


# --- the controller --------------------------------------------------------------------------------------------------


def _operator_with_pending(monkeypatch, pending: list[dict], listed: list | None = None):
    operator = _operator()
    other = operator.kube.list

    def kube_list(kind, namespace=None, label_selector=None, field_selector=None):
        if kind == "Pod" and namespace is None:
            if listed is not None:
                listed.append(field_selector)
            return pending
        return other(kind, namespace, label_selector=label_selector, field_selector=field_selector)

    monkeypatch.setattr(operator.kube, "list", kube_list)
    return operator


def _same_namespace_reshuffle(operator):
    targets = {("ns", "high"): _pool_target("ns", "high", 2, priority=10),
               ("ns", "low"): _pool_target("ns", "low", 6, priority=0)}
    operator.uncapped = {("ns", "high"): _wanting(8), ("ns", "low"): _wanting(6)}
    asyncio.run(operator._share_pools(targets))
    return operator.state.decisions[("ns", "high")].desired_replicas, operator.state.decisions[("ns", "low")].desired_replicas


def test_the_loop_reads_pending_pods_once_and_a_third_namespaces_bare_pod_stops_the_reshuffle(monkeypatch):
    listed: list = []
    operator = _operator_with_pending(monkeypatch, [_pod(namespace="t")], listed)
    assert _same_namespace_reshuffle(operator) == (2, 6)
    assert listed == ["spec.nodeName=,status.phase=Pending"]


def test_the_loop_reshuffles_when_the_pending_pod_is_gated_or_the_list_fails(monkeypatch, caplog):
    operator = _operator_with_pending(monkeypatch, [_pod(namespace="t", schedulingGates=[{"name": "q"}])])
    assert _same_namespace_reshuffle(operator) == (7, 1)
    operator = _operator()  # its API server is never reached: the list fails
    assert _same_namespace_reshuffle(operator) == (7, 1)
    assert "Pending pods not listed across namespaces" in caplog.text


def test_the_loop_lists_nothing_for_a_pool_of_one_backend(monkeypatch):
    listed: list = []
    operator = _operator_with_pending(monkeypatch, [], listed)
    targets = {("ns", "only"): _pool_target("ns", "only", 2)}
    operator.uncapped = {("ns", "only"): _wanting(4)}
    asyncio.run(operator._share_pools(targets))
    assert listed == [] and operator.state.decisions[("ns", "only")].desired_replicas == 4


def test_a_pod_of_another_scheduler_counts_once_that_scheduler_finds_it_short_of_gpus():
    assert _waiting([_pod(schedulerName="volcano")]) == []  # not judged: a scheduler that may not exist
    judged = _judged("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    judged["spec"]["schedulerName"] = "volcano"
    assert _waiting([judged]) == [Unclaimed("t", 0, 1)]


def test_a_claimed_backends_pod_counts_in_every_pool_but_its_own():
    other = ("other",)
    pools = {POOL: NODES[POOL], other: NODES[POOL]}
    listed = unclaimed_waiting([_pod()], pools, lambda pod: other)
    assert listed == {POOL: [Unclaimed("t", 0, 1)], other: []}


def _aged(pod: dict, created: str) -> dict:
    pod["metadata"]["creationTimestamp"] = created
    return pod


def test_a_claims_pending_pods_count_as_its_waiting_replicas_the_oldest_first_and_the_rest_as_no_claims():
    """A claim covers as many of its Pending pods as the GPUs of its waiting replicas, the oldest first; the rest (a
    rollout's surge pod beside the old pod its Deployment counts, an adopted one) count as pods no claim covers, in
    its own pool too (attack pass 48 finding 1). A claim not read covers all its pods (nothing known beyond)."""
    old = _aged(_pod(name="old", gpus=2), "2026-12-07T10:00:00Z")
    surge = _aged(_pod(name="surge", gpus=2), "2026-12-07T11:00:00Z")
    other = _aged(_pod(namespace="w", name="w-0", gpus=2), "2026-12-07T09:00:00Z")
    mine = {("t", "old"): ("t", "b"), ("t", "surge"): ("t", "b"), ("w", "w-0"): ("w", "c")}

    def claim_of(pod):
        return mine.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))

    pods = [surge, old, other]
    assert counted_waiting(pods, claim_of, {("t", "b"): 0, ("w", "c"): 2}) == {("w", "w-0")}
    assert counted_waiting(pods, claim_of, {("t", "b"): 2, ("w", "c"): 2}) == {("t", "old"), ("w", "w-0")}
    assert counted_waiting(pods, claim_of, {("t", "b"): 4}) == {("t", "old"), ("t", "surge"), ("w", "w-0")}
    assert counted_waiting(pods, lambda pod: None, {("t", "b"): 4}) == set()  # bare pods: no claim's
    # a pod more GPUs would not place is no waiting replica (``held`` leaves it out): it covers none of the GPUs
    gated = _aged(_pod(name="gated", gpus=2, schedulingGates=[{"name": "q"}]), "2026-12-07T08:00:00Z")
    mine[("t", "gated")] = ("t", "b")
    assert counted_waiting([gated, *pods], claim_of, {("t", "b"): 2}) == {("t", "old"), ("w", "w-0")}


def test_a_pod_pinned_to_a_node_counts_only_for_the_pool_of_that_node():
    pools = {POOL: NODES[POOL], ("other",): [_node("m1")]}
    pinned = _pod(nodeSelector={"kubernetes.io/hostname": "m1"})
    by_name = _pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}})
    nodes = {pool: [dataclasses.replace(n, labels=(*n.labels, ("kubernetes.io/hostname", n.name))) for n in ns]
             for pool, ns in pools.items()}
    listed = unclaimed_waiting([pinned, by_name], nodes, lambda pod: None)
    assert listed == {POOL: [Unclaimed("t", 0, 1)], ("other",): [Unclaimed("t", 0, 1)]}


def test_a_label_the_inventory_drops_is_read_on_the_node_as_the_scheduler_reads_it():
    """nvidia.com/gfd.timestamp is not part of a GPUNode's labels (it changes each time GFD labels the node) but of
    its volatile_labels: a pod that asks for it is judged against the node's value."""
    stamp = "nvidia.com/gfd.timestamp"
    pools = {POOL: [dataclasses.replace(n, volatile_labels=((stamp, "1700000000"),)) for n in NODES[POOL]]}

    def term(*expressions):
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}

    runs_there = [_pod(name="sel", nodeSelector={stamp: "1700000000"}),
                  _pod(name="gt", affinity=term({"key": stamp, "operator": "Gt", "values": ["5"]})),
                  _pod(name="exists", affinity=term({"key": stamp, "operator": "Exists"}))]
    never = [_pod(name="other-value", nodeSelector={stamp: "0"}),
             _pod(name="absent", affinity=term({"key": stamp, "operator": "DoesNotExist"})),
             _pod(name="and-b200", affinity=term({"key": stamp, "operator": "Exists"},
                                                 {"key": "gpu", "operator": "In", "values": ["b200"]}))]
    assert unclaimed_waiting(runs_there + never, pools, lambda pod: None)[POOL] == [Unclaimed("t", 0, 1)] * 3


def test_a_replica_of_another_scheduler_not_judged_yet_holds_nothing():
    from llmbackend.autoscaling.holding import held_replicas
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-abc", "controller": True, "uid": "u"}
    pods = [_pod(name=f"p{i}", labels={"pod-template-hash": "abc"}, owner=rs, **extra)
            for i, extra in enumerate([{}, {"schedulerName": "no-such-scheduler"}])]
    assert held_replicas(2, pods, {"status": {}}, needs_gpus=True, grouped=False, workload_made="llm") == 1


# --- the GPUs pods bound to a pool's nodes hold (step 2 hands waiting replicas the rest: pass 29's finding 3) ----------


def test_gpus_in_use_counts_every_pod_bound_to_the_pools_nodes_and_nothing_else():
    from llmbackend.autoscaling.holding import gpus_in_use
    leaving = _pod(name="leaving", node="n1", phase="Running")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"  # its containers still hold the GPU
    pods = [_pod(name="runs", node="n1", phase="Running"), _pod(name="starts", gpus=2, node="n2"), leaving,
            _pod(name="elsewhere", gpus=4, node="m1", phase="Running"), _pod(name="ended", gpus=8, node="n1",
                                                                              phase="Succeeded"),
            _pod(name="failed", gpus=8, node="n2", phase="Failed"), _pod(name="waits", gpus=8),
            _pod(name="cpu", gpus=0, node="n1", phase="Running")]
    assert gpus_in_use(pods, ["n1", "n2"]) == 4
    assert gpus_in_use(pods, []) == 0


def test_unclaimed_bound_counts_the_pods_no_claim_of_the_pool_counts_by_pod_priority():
    """Step 1 places a Pending replica beside the pods no claim counts that run at its pod priority and above
    (attack pass 44 finding 1: the tenant's running bare pods were not seen; pass 45 finding 1: a claim's pods beyond
    what it counts, a fat adopted one or one leaving, were not either)."""
    from llmbackend.autoscaling.holding import unclaimed_bound
    leaving = _pod(name="leaving", gpus=2, node="n2", phase="Running", priority=5)
    leaving["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    pods = [_pod(name="replica", gpus=2, node="n1", phase="Running", priority=5), leaving,
            _pod(name="fat", gpus=5, node="n1", phase="Running", priority=5),
            _pod(name="theirs", gpus=4, node="n2", phase="Running", priority=5),
            _pod(name="bare", gpus=1, node="n1", phase="Running", priority=10),
            _pod(name="bare0", gpus=3, node="n2"), _pod(name="elsewhere", gpus=8, node="m1", phase="Running"),
            _pod(name="ended", gpus=8, node="n1", phase="Failed"), _pod(name="waits", gpus=8),
            _pod(name="cpu", gpus=0, node="n1", phase="Running", priority=7),
            _pod(namespace="u", name="unread", gpus=6, node="n2", phase="Running", priority=5)]

    def claim_of(pod):  # t/model's replicas (2 GPUs each, 2 running counted: 4 GPUs) and u/unread's (not read)
        name = pod["metadata"]["name"]
        return ("t", "model") if name in ("replica", "leaving", "fat") else ("u", "x") if name == "unread" else None
    # t/model's pods hold 2 + 2 + 5 = 9 GPUs, it counts 4: 5 more at priority 5, beside "theirs" (another pool's)
    assert unclaimed_bound(pods, ["n1", "n2"], claim_of, {("t", "model"): 4}) == {5: 9, 10: 1, 0: 3}
    # counting all its pods, only the pods no claim covers
    assert unclaimed_bound(pods, ["n1", "n2"], claim_of, {("t", "model"): 9}) == {5: 4, 10: 1, 0: 3}
    assert unclaimed_bound(pods, [], claim_of, {}) == {}


def _claims_of(targets, waiting: bool) -> list[Claim]:
    return [Claim(namespace=ns, name=name, pool=(t.pool,), pool_gpus=8, priority=0, current=2, wanted=2,
                  min_replicas=0, gpus_per_replica=1, held=2, bound=1 if waiting and name == "a" else 2)
            for (ns, name), t in targets.items()]


@pytest.mark.parametrize("nodes_known", [True, False])
@pytest.mark.parametrize("waiting", [True, False])
def test_the_loop_lists_bound_pods_only_while_a_claim_of_a_pool_of_known_nodes_has_replicas_that_wait(
        monkeypatch, nodes_known, waiting):
    listed: list = []
    bound = [_pod(name="bare", gpus=3, node="n1", phase="Running"), _pod(name="off", gpus=5, node="m1")]
    operator = _operator_with_pending(monkeypatch, bound, listed)
    operator.state.inventory = type("Nodes", (), {"nodes": staticmethod(lambda: [_node("n1"), _node("m1")])})()
    targets = {(ns, name): dataclasses.replace(_pool_target(ns, name, 2),
                                               pool_nodes=frozenset({"n1"}) if nodes_known else None)
               for ns, name in [("ns", "a"), ("other", "b")]}
    pending, in_use, others = asyncio.run(operator._unclaimed(targets, _claims_of(targets, waiting)))
    if waiting and nodes_known:
        # the list answers every field selector with the same pods here: those on n1 count, and only bound ones
        assert listed == ["spec.nodeName=,status.phase=Pending",
                          "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"]
        assert in_use == {("H100/abc",): 3}
        assert others == {("H100/abc",): {0: 3}}  # the bare pod: no claim covers it
    else:
        assert listed == ["spec.nodeName=,status.phase=Pending"] and in_use is None and others is None


def test_a_failed_list_of_bound_pods_leaves_what_they_hold_not_known_and_says_so(monkeypatch, caplog):
    operator = _operator()
    other = operator.kube.list

    def kube_list(kind, namespace=None, label_selector=None, field_selector=None):
        if kind == "Pod" and namespace is None:
            if field_selector.startswith("spec.nodeName!="):
                raise RuntimeError("forbidden")
            return []
        return other(kind, namespace, label_selector=label_selector, field_selector=field_selector)

    monkeypatch.setattr(operator.kube, "list", kube_list)
    operator.state.inventory = type("Nodes", (), {"nodes": staticmethod(lambda: [_node("n1")])})()
    targets = {(ns, name): dataclasses.replace(_pool_target(ns, name, 2), pool_nodes=frozenset({"n1"}))
               for ns, name in [("ns", "a"), ("other", "b")]}
    pending, in_use, others = asyncio.run(operator._unclaimed(targets, _claims_of(targets, True)))
    assert pending == {("H100/abc",): []} and in_use is None and others is None
    assert "pods bound to the GPU pools' nodes not listed" in caplog.text


def test_could_run_on_reads_the_pods_node_selector_against_the_pools_nodes():
    nodes = [_node("n1", labels={"gpu": "a"}), _node("n2", labels={"gpu": "a"})]
    fits = could_run_on(nodes)
    assert fits(_pod()) and could_run_on(None)(_pod())
    assert fits(_pod(nodeSelector={"gpu": "a"}))
    assert not fits(_pod(nodeSelector={"gpu": "b"}))  # another pool's
    assert not fits(_pod(gpus=8))  # no node of the pool has 8 GPUs
    assert fits(_pod(name="other")) and not fits(_pod(name="x", nodeSelector={"gpu": "b"}))  # (judged once a shape)


def test_like_the_backends_rendered_pod_a_pod_must_reach_every_node_that_one_reaches():
    """Attack pass 54 finding 1: an adopted pod pinned to one node of the pool (full of its own backend's pods) held
    GPUs free on another node it may not use."""
    nodes = [_node(n, labels={"gpu": gpu, "kubernetes.io/hostname": n}) for n, gpu in (("n1", "a"), ("n2", "a"), ("n3", "b"))]
    assert could_run_on(nodes)(_pod(name="pinned", nodeSelector={"kubernetes.io/hostname": "n1"}))  # (n1 alone could)
    rendered = _pod(nodeSelector={"gpu": "a"})["spec"]  # reaches n1 and n2
    fits = could_run_on(nodes, like=rendered)
    assert fits(_pod(nodeSelector={"gpu": "a"})) and fits(_pod())  # as wide, or wider
    assert not fits(_pod(name="pinned", nodeSelector={"kubernetes.io/hostname": "n1"}))
    assert not fits(_pod(nodeSelector={"gpu": "b"}))  # another node altogether
    assert not fits(_pod(name="fat", gpus=2))  # more GPUs than the rendered pod asks (attack pass 56 finding 2)
    # placed among other pods otherwise than the rendered pod (attack pass 59 finding 1): not one of its replicas
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    assert not fits(_pod(name="anti", affinity=anti))
    assert not fits(_pod(name="spread", topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone",
                                                                    "whenUnsatisfiable": "DoNotSchedule"}]))
    assert not fits(_pod(name="other-scheduler", schedulerName="gang"))
    assert fits(_pod(name="defaulted", schedulerName="default-scheduler"))  # (the API server fills the name in)
    assert not could_run_on(nodes)(_pod(nodeSelector={"gpu": "c"}))
    # a rendered pod no node could hold (an unplaceable backend): judged as without it, on any node
    nowhere = could_run_on(nodes, like=_pod(gpus=9)["spec"])
    assert nowhere(_pod(nodeSelector={"gpu": "b"})) and not nowhere(_pod(gpus=9))


def test_a_pod_the_scheduler_left_pending_beside_free_gpus_lands_there_no_more():
    """Attack pass 54 finding 2: a filter the pool does not model (a pod anti-affinity) kept a bare pod off the node
    whose free GPUs the ledger gave it; ``refused`` (the loop's memory, after ``SCHEDULER_SETTLE_S``) names that
    node, and the ledger lands the pod elsewhere or nowhere."""
    pools = {POOL: [_node("n1"), _node("n2"), _node("n3")]}
    held = {"n1": {0: 4}, "n3": {0: 2}}  # n1 full, 4 free on n2, 2 on n3
    pod = _pod(namespace="t", name="p", gpus=2)
    (u,) = unclaimed_waiting([pod], pools, lambda pod: None, held)[POOL]
    assert (u.fits_free, u.lands_on) == (True, "n2")
    (u,) = unclaimed_waiting([pod], pools, lambda pod: None, held, refused={("t", "n2")})[POOL]
    assert (u.fits_free, u.lands_on) == (True, "n3")
    (u,) = unclaimed_waiting([pod], pools, lambda pod: None, held,
                             refused={("t", "n2"), ("t", "n3")})[POOL]
    assert (u.fits_free, u.lands_on) == (False, None)
    # refused by namespace, not by name, size or pod priority (a pod created again so is refused too: attack passes
    # 56 and 57); another namespace's pod is not refused where these are
    others = [_pod(namespace="t", name="q", gpus=2), _pod(namespace="u", name="p", gpus=2), _pod(namespace="t", gpus=1)]
    assert [w.lands_on for w in unclaimed_waiting(others, pools, lambda pod: None, held,
                                                  refused={("t", "n2")})[POOL]] == ["n3", "n2", None]


def test_a_pod_first_judged_after_the_node_had_its_gpus_free_is_refused_there_at_once():
    """Attack pass 57 finding 1: a pod created again every settle time (another size each time) never sat out the
    settle memory's clock. The scheduler's first verdict (PodScheduled's lastTransitionTime) after the node had the
    GPUs free for the pod says at once that it will not place it there."""
    from llmbackend.autoscaling.holding import JUDGED_MARGIN_S, gpus_free_since

    room = gpus_free_since({}, {("n1", "t"): 0, ("n2", "t"): 4}, 1000.0)
    assert room == {("n1", "t"): {}, ("n2", "t"): {1: 1000.0, 2: 1000.0, 3: 1000.0, 4: 1000.0}}
    later = gpus_free_since(room, {("n1", "t"): 1, ("n2", "t"): 2}, 1015.0)  # n2 keeps 2 of its 4 free, n1 frees one
    assert later == {("n1", "t"): {1: 1015.0}, ("n2", "t"): {1: 1000.0, 2: 1000.0}}
    pools = {POOL: [_node("n1"), _node("n2")]}
    held = {"n1": {0: 3}, "n2": {0: 2}}

    def judged(at):
        pod = _pod(namespace="t", name="p", gpus=2)
        stamp = datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                                        "lastTransitionTime": stamp}]
        (u,) = unclaimed_waiting([pod], pools, lambda pod: None, held, room_since=later)[POOL]
        return u.lands_on
    assert judged(1000.0 + JUDGED_MARGIN_S) is None  # judged with n2's 2 GPUs free: refused there, n1 has 1
    assert judged(1000.0 + JUDGED_MARGIN_S - 1) == "n2"  # (within the clocks' margin: not known)
    assert judged(990.0) == "n2"  # judged before they were free: the settle memory decides


def test_a_claims_pending_pod_the_scheduler_leaves_beside_free_gpus_is_turned_down():
    """Attack pass 60: a claim's adopted Pending pod kept off the free GPUs by a filter the pool does not model (a
    host port, another pod's CPU, a volume's zone) stood for a waiting replica. The scheduler's word decides: judged
    after a node that could hold it had the GPUs free (of every pod), or the settle memory names its namespace there,
    and only where its verdict names a filter the pool does not model: one short of GPUs alone may wait on a slow
    scheduler (CI under load: the first form of the fix turned such pods down and the pool gave the GPUs back)."""
    from llmbackend.autoscaling.holding import JUDGED_MARGIN_S, refused_beside_room

    nodes = [_node("n1"), _node("n2"), _node("n3", labels={"gpu": "other"})]
    free = {"n1": 0, "n2": 2, "n3": 4}
    since = {"n2": {1: 1000.0, 2: 1000.0}, "n3": {k: 1000.0 for k in range(1, 5)}}

    ports = ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't have free ports for the "
             "requested pod ports, 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
             "available: 2 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.")
    short = ("0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node "
             "affinity/selector. preemption: 0/3 nodes are available: 2 No preemption victims found for incoming pod, "
             "1 Preemption is not helpful for scheduling.")

    def pod(at=None, message=ports, **spec):
        p = _pod(namespace="t", name="x", gpus=2, nodeSelector={"gpu": "h100"}, **spec)
        if at is not None:
            stamp = datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                          "message": message, "lastTransitionTime": stamp}]
        return p
    assert refused_beside_room(pod(1000.0 + JUDGED_MARGIN_S), nodes, free, since, ()) == (True, ["n2"])
    assert refused_beside_room(pod(999.0), nodes, free, since, ()) == (False, ["n2"])  # judged before: not known
    assert refused_beside_room(pod(999.0), nodes, free, since, {("t", "n2")}) == (True, ["n2"])  # the settle memory
    assert refused_beside_room(pod(999.0), nodes, free, since, {("u", "n2")}) == (False, ["n2"])  # (another namespace's)
    # no node it could run on has the GPUs free (n3 is not its kind): a plain wait for GPUs, it stands for its replica
    assert refused_beside_room(pod(2000.0), nodes, {"n1": 0, "n2": 1, "n3": 4}, since, ()) == (False, [])
    # short of GPUs alone (a slow scheduler, a stopping pod's GPUs), or not judged yet: whatever the clocks say
    for waiting in (pod(2000.0, short), pod()):
        assert refused_beside_room(waiting, nodes, free, since, {("t", "n2")}) == (False, [])
    # every node with room must refuse it (pass 62 finding 2: n1 got its room after the verdict and may take it), and
    # the verdict name as many nodes refused beyond the model (one host port here, for two nodes with room)
    two = {"n1": 2, "n2": 2, "n3": 4}
    younger = {**since, "n1": {1: 1010.0, 2: 1010.0}}
    assert refused_beside_room(pod(1006.0), nodes, two, younger, ()) == (False, ["n1", "n2"])
    assert refused_beside_room(pod(1020.0), nodes, two, younger, ()) == (False, ["n1", "n2"])  # one node named
    both = ports.replace("1 Insufficient nvidia.com/gpu, 1 node(s) didn't have free ports", "2 node(s) didn't have "
                         "free ports").replace("0/3", "0/3", 1)
    assert refused_beside_room(pod(1020.0, both), nodes, two, younger, ()) == (True, ["n1", "n2"])


def test_a_replica_pod_no_node_of_the_pool_could_hold_is_not_held_there():
    """Attack pass 49 finding 2: a Pending pod (adopted with another pool's nodeSelector) counted as a waiting
    replica of this pool, and step 1 cut another backend for it."""
    nodes = [_node("n1", labels={"gpu": "a"})]
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t-abc", "controller": True}
    labels = {"pod-template-hash": "abc"}
    here = _pod(name="here", labels=labels, owner=owner)
    there = _pod(name="there", labels=labels, owner=owner, nodeSelector={"gpu": "b"})
    fits = could_run_on(nodes)
    assert held_replicas(1, [here], {}, None, True, grouped=False, workload_made="t", fits=fits) == 1
    assert held_replicas(1, [there], {}, None, True, grouped=False, workload_made="t", fits=fits) == 0
    assert held_replicas(1, [there], {}, None, True, grouped=False, workload_made="t") == 1  # (not judged)
    assert thin_waiting([there], 1, False, "t", fits) == (0, 0, frozenset({("t", "there")}))


def test_thin_waiting_tells_whole_waiting_replicas_from_thinner_pods_and_groups():
    """Attack pass 49 finding 1: a Pending pod asking fewer GPUs than a replica, or a group part bound, stood for a
    whole waiting replica; pass 50 finding 1: so did a group none of whose pods is bound, whose pods the
    kube-scheduler places one by one."""
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t-abc", "controller": True}
    labels = {"pod-template-hash": "abc"}
    whole, thin = _pod(name="w", gpus=4, labels=labels, owner=owner), _pod(name="thin", gpus=2, labels=labels, owner=owner)
    running = _pod(name="r", gpus=4, node="n1", phase="Running", labels=labels, owner=owner)
    assert thin_waiting([whole, thin, running], 4, False, "t") == (1, 1, frozenset({("t", "thin")}))

    def member(name, group, node):
        pod = _pod(name=name, gpus=2, node=node, phase="Running" if node else "Pending",
                   labels={"leaderworkerset.sigs.k8s.io/name": "t", "leaderworkerset.sigs.k8s.io/group-index": group},
                   owner={"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "t" if name.endswith("l") else
                          f"t-{group}", "controller": True})
        pod["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": "2"}
        return pod
    groups = [member("g0l", "0", None), member("g0w", "0", None), member("g1l", "1", "n1"), member("g1w", "1", None)]
    assert thin_waiting(groups, 4, True, "t") == (0, 2, frozenset({("t", "g0l"), ("t", "g0w"), ("t", "g1w")}))


def test_beyond_count_books_a_claims_extra_gpus_at_the_pod_priorities_of_the_pods_that_hold_them():
    """Attack pass 51 finding 1: the replicas a claim counts are its pods of the highest pod priority; the rest, split
    at a pod's GPUs, at their own pod priority (not the last listed pod's)."""
    assert beyond_count([(6, 0), (2, 5)], 4) == {0: 4}
    assert beyond_count([(2, 5), (6, 0)], 4) == {0: 4}  # (list order does not matter)
    assert beyond_count([(2, 5), (2, 5)], 4) == {}
    assert beyond_count([(2, 5), (2, 0), (2, 5)], 2) == {5: 2, 0: 2}


def test_a_pending_pod_says_whether_a_node_it_could_run_on_has_its_gpus_free():
    """Attack pass 52 finding 1: an older pod pinned to a full node, or asking more GPUs than any one node has free,
    counted as taking the pool's free GPUs. Free of pods it could not preempt: those of its pod priority and above."""
    pools = {POOL: [_node("n1", labels={"gpu": "h100", "host": "n1"}), _node("n2", labels={"gpu": "h100", "host": "n2"})]}
    held = {"n1": {0: 4}}  # (n2 empty)
    pinned, loose, large = (_pod(name="a", gpus=2, nodeSelector={"host": "n1"}), _pod(name="b", gpus=2),
                            _pod(name="c", gpus=4))
    assert [w.fits_free for w in unclaimed_waiting([pinned, loose, large], pools, lambda pod: None, held)[POOL]] == [
        False, True, False]  # (the 4-GPU pod lands after the 2-GPU one: n2 has 2 left; pass 53 finding 1)
    assert [w.fits_free for w in unclaimed_waiting([large, loose], pools, lambda pod: None, held)[POOL]] == [
        True, False]
    halves = {"n1": {0: 2}, "n2": {0: 2}}
    assert [w.fits_free for w in unclaimed_waiting([large], pools, lambda pod: None, halves)[POOL]] == [False]
    # a pod of a higher pod priority preempts the pods of priority 0 there: the node is free to it
    higher = _pod(name="d", gpus=2, priority=5, nodeSelector={"host": "n1"})
    assert [w.fits_free for w in unclaimed_waiting([higher], pools, lambda pod: None, held)[POOL]] == [True]
    assert [w.fits_free for w in unclaimed_waiting([loose], pools, lambda pod: None)[POOL]] == [None]  # not read


@pytest.mark.parametrize(("message", "beyond"), [
    ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.", 0),
    ("0/4 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, 2 Insufficient "
     "nvidia.com/gpu. preemption: 0/4 nodes are available: 2 Preemption is not helpful for scheduling, 2 No "
     "preemption victims found for incoming pod.", 0),
    ("0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) had taints "
     "that the pod didn't tolerate.", 0),
    ("0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu.", 1),
    # one node short of both (T's cpu there), the other of GPUs: nothing said of a node with room (pass 62 finding 1)
    ("0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient nvidia.com/gpu.", 0),
    ("0/3 nodes are available: 1 Insufficient memory, 1 Too many pods, 2 Insufficient nvidia.com/gpu.", 1),
    ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 Insufficient nvidia.com/gpu-shared.", 1),
    ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had volume node affinity conflict.", 1),
    ("0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints.", 2),
    ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: "
     "3 Preemption is not helpful for scheduling.", 3),
    ("", 0),
    ("no nodes available to schedule pods", 0),
])
def test_a_verdict_names_the_nodes_refused_beyond_the_model(message, beyond):
    """The scheduler's words for the nodes (k8s.io/kubernetes v1.36 FitError.Error): GPUs, node affinity, taints and a
    cordon are the pool's model (planning/podfit.py); the nodes neither short of GPUs nor refused by those were refused
    for something else (another resource, a volume, spread, a PreFilter's refusal: all of them): more GPUs would not
    place the pod there. The preemption part is not read."""
    from llmbackend.autoscaling.holding import nodes_refused_beyond_model

    pod = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": message}]}}
    assert nodes_refused_beyond_model(pod) == beyond
    assert nodes_refused_beyond_model({"status": {}}) == 0


def test_a_verdict_is_no_older_than_the_last_pass_that_saw_the_pod_without_one():
    """Attack pass 59 finding 2: a pod created with a scheduling gate has PodScheduled False (SchedulingGated) from its
    creation, and the scheduler's Unschedulable verdict after the gate goes keeps that lastTransitionTime: a pod made
    gated before a node had room and ungated later looked judged before the room. The loop's memory of the last pass
    that saw the pod with no verdict bounds the verdict's time from below."""
    from llmbackend.autoscaling.holding import _judged_at, seen_unjudged

    def pod(name, reason=None, at=900.0, gpus=2):
        p = _pod(namespace="t", name=name, gpus=gpus)
        if reason is not None:
            stamp = datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason,
                                          "message": "", "lastTransitionTime": stamp}]
        return p
    memory = seen_unjudged({}, [pod("gated", "SchedulingGated"), pod("new"), pod("judged", "Unschedulable"),
                                pod("cpu", gpus=0)], 1000.0)
    assert memory == {("t", "gated"): 1000.0, ("t", "new"): 1000.0}  # the judged one was never seen without
    later = [pod("gated", "Unschedulable"), pod("new", "Unschedulable", at=1010.0), pod("judged", "Unschedulable")]
    memory = seen_unjudged(memory, later, 1015.0)
    assert memory == {("t", "gated"): 1000.0, ("t", "new"): 1000.0}  # kept while they wait; gone once they do not
    assert [_judged_at(p, memory) for p in later] == [1000.0, 1010.0, 900.0]
    assert _judged_at(later[0]) == 900.0 and _judged_at(pod("gated", "SchedulingGated"), memory) is None
    assert seen_unjudged(memory, [], 1030.0) == {}


def test_the_scheduler_memory_across_passes():
    """``holding.SchedulerMemory``: the settle memory keeps a spot's clock while the ledger lands pods there and a
    settle time after; the room clocks keep a count's time from one read of the bound pods to the next only."""
    from llmbackend.autoscaling.holding import SCHEDULER_SETTLE_S, SchedulerMemory
    from llmbackend.autoscaling.pool import Unclaimed

    memory = SchedulerMemory()
    lands = {("p",): [Unclaimed("t", 0, 2, 900.0, lands_on="n2")]}
    for now in (1000.0, 1015.0):
        memory.begin()
        memory.note_free({"n2": 2}, now)
        memory.note_landed(memory.settled(now), lands, now)
    assert memory.landed_since == {("t", "n2"): (1000.0, 1015.0)} and memory.free_since == {"n2": {1: 1000.0, 2: 1000.0}}
    assert memory.settled(1000.0 + SCHEDULER_SETTLE_S) == {("t", "n2")}
    # refused, it stays while the namespace has pods waiting, whatever their name, size or pod priority
    memory.note_landed({("t", "n2")}, {("p",): [Unclaimed("t", 5, 1, 1040.0)]}, 1100.0)
    assert memory.landed_since == {("t", "n2"): (1000.0, 1100.0)}
    memory.note_landed(set(), {}, 1100.0 + SCHEDULER_SETTLE_S)  # gone a settle time after it was last seen
    assert memory.landed_since == {}
    memory.begin()  # a pass that reads no bound pods: the next read starts the clocks anew
    memory.begin()
    memory.note_free({"n2": 2}, 1200.0)
    memory.note_room({("n2", "t"): 1}, 1200.0)
    assert memory.free_since == {"n2": {1: 1200.0, 2: 1200.0}} and memory.room_since == {("n2", "t"): {1: 1200.0}}
