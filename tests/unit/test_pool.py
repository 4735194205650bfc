"""One GPU pool shared by priority (autoscaling/pool.py): who gets GPUs, who gives them up, and no trading."""

from __future__ import annotations

import pytest

from llmbackend.autoscaling.pool import HOLD_S, Claim, PoolState, outranks, share

POOL = ("H100", "node-a")


def claim(name, priority=0, current=1, wanted=1, min_replicas=1, gpus=1, namespace="team", pool_gpus=8, **kw):
    return Claim(namespace=namespace, name=name, pool=kw.pop("pool", POOL), pool_gpus=pool_gpus, priority=priority,
                 current=current, wanted=wanted, min_replicas=min_replicas, gpus_per_replica=gpus, **kw)


def test_free_gpus_go_to_whoever_wants_them_and_nobody_is_preempted():
    out, _ = share([claim("high", 10, current=2, wanted=4), claim("low", 0, current=2, wanted=3)], 0.0)
    assert out[("team", "high")].replicas == 4 and out[("team", "low")].replicas == 3
    assert all(s.preempted_by is None and s.waiting_for_capacity is None for s in out.values())


def test_a_higher_priority_takes_replicas_above_min_from_a_lower_one_and_both_say_so():
    out, _ = share([claim("high", 10, current=2, wanted=6), claim("low", 0, current=6, wanted=6, min_replicas=1)], 0.0)
    high, low = out[("team", "high")], out[("team", "low")]
    assert (high.replicas, low.replicas) == (6, 2)
    assert low.preempted_by == "team/high (priority 10): 4 replica(s)"
    assert "held by team/high (priority 10): 6 GPU(s)" in low.waiting_for_capacity
    assert high.took == "took replica(s) from team/low (priority 0): 4, drained first"
    assert high.waiting_for_capacity is None


def test_never_below_min_replicas_and_the_rest_waits_naming_the_holder():
    out, _ = share([claim("high", 10, current=1, wanted=8), claim("low", 0, current=7, wanted=7, min_replicas=3)], 0.0)
    high, low = out[("team", "high")], out[("team", "low")]
    assert (high.replicas, low.replicas) == (5, 3)
    assert high.waiting_for_capacity.startswith("3 replica(s), 3 GPU(s), of a pool of 8; held by team/low (priority 0)")


def test_equal_priorities_never_preempt_each_other():
    out, _ = share([claim("a", 5, current=1, wanted=6), claim("b", 5, current=7, wanted=7)], 0.0)
    assert (out[("team", "a")].replicas, out[("team", "b")].replicas) == (1, 7)
    assert out[("team", "b")].preempted_by is None
    assert "held by team/b (priority 5): 7 GPU(s)" in out[("team", "a")].waiting_for_capacity


def test_a_lower_priority_never_takes_from_a_higher_one():
    out, _ = share([claim("high", 10, current=7, wanted=7), claim("low", 0, current=1, wanted=5)], 0.0)
    assert (out[("team", "high")].replicas, out[("team", "low")].replicas) == (7, 1)
    assert out[("team", "high")].preempted_by is None


def test_the_namespace_bounds_a_tenant_set_priority_unless_the_admin_opts_in():
    other = claim("low", 0, current=7, wanted=7, namespace="other")
    high = claim("high", 1_000_000, current=1, wanted=8)
    out, _ = share([high, other], 0.0)
    assert out[("other", "low")].replicas == 7 and out[("other", "low")].preempted_by is None
    out, _ = share([high, other], 0.0, across_namespaces=True)
    assert out[("other", "low")].replicas == 1
    # status names only backends of the reader's own namespace: the others are counted
    assert out[("other", "low")].preempted_by == "1 backend(s) of other namespaces: 6 replica(s)"
    assert out[("team", "high")].took == "took replica(s) from 1 backend(s) of other namespaces: 6, drained first"


def test_across_namespaces_the_pod_priority_counts_never_the_tenant_set_number():
    gold = claim("a", 100, cluster_wide=True)                  # its pods run with a PriorityClass of value 100
    bronze = claim("b", 0, cluster_wide=True, namespace="other")
    classless = claim("c", 1_000_000, namespace="other")       # a tenant's number, pods without a class: 0
    spec_and_class = claim("d", 5, class_priority=200, namespace="other")
    assert outranks(gold, bronze, False) and outranks(gold, classless, False)
    assert not outranks(bronze, gold, False) and not outranks(classless, gold, False)
    assert outranks(spec_and_class, gold, False), "across namespaces its pods' class (200) counts, not its 5"
    assert outranks(classless, claim("e", 0, namespace="other"), False), "inside its namespace its number counts"


def test_overcommitted_pool_the_lower_one_gives_up_for_a_pending_higher_one():
    # the high backend's one replica is Pending: the low one holds all 8 GPUs
    out, _ = share([claim("high", 10, current=1, wanted=1), claim("low", 0, current=8, wanted=8)], 0.0)
    assert (out[("team", "high")].replicas, out[("team", "low")].replicas) == (1, 7)
    assert out[("team", "low")].preempted_by == "team/high (priority 10): 1 replica(s)"


def test_only_whole_replicas_of_the_preemptor_are_taken():
    # high needs 4 GPUs per replica; low can give 2 (1 GPU each, above min 6): not enough for one, nothing taken
    out, _ = share([claim("high", 10, current=0, wanted=1, min_replicas=0, gpus=4),
                    claim("low", 0, current=8, wanted=8, min_replicas=6)], 0.0)
    assert (out[("team", "high")].replicas, out[("team", "low")].replicas) == (0, 8)
    assert out[("team", "low")].preempted_by is None
    out, _ = share([claim("high", 10, current=0, wanted=1, min_replicas=0, gpus=4),
                    claim("low", 0, current=8, wanted=8, min_replicas=2)], 0.0)
    assert (out[("team", "high")].replicas, out[("team", "low")].replicas) == (1, 4)


def test_separate_pools_do_not_interact():
    out, _ = share([claim("high", 10, current=1, wanted=8, pool=("H100", "node-b")),
                    claim("low", 0, current=8, wanted=8)], 0.0)
    assert out[("team", "low")].replicas == 8 and out[("team", "high")].replicas == 8


def test_no_thrash_gpus_a_higher_backend_let_go_stay_reserved_for_the_hold():
    state = PoolState()
    wants = [6, 4, 6, 4, 6]  # the high backend's load dips and comes back every sync
    high_cur, low_cur = 2, 6
    history = []
    for i, want in enumerate(wants):
        out, state = share([claim("high", 10, current=high_cur, wanted=want),
                            claim("low", 0, current=low_cur, wanted=8)], i * 15.0, state)
        high_cur, low_cur = out[("team", "high")].replicas, out[("team", "low")].replicas
        history.append(low_cur)
    assert history == [2, 2, 2, 2, 2]  # the low one gave up 4 once and did not take 2 back (to lose them again)
    # the last sync: the high backend wants 6 again, holds them; at the dips before, the 2 it let go were kept for it
    assert out[("team", "low")].waiting_for_capacity.startswith("6 replica(s), 6 GPU(s), of a pool of 8; held by team/high")
    out_dip, _ = share([claim("high", 10, current=6, wanted=4), claim("low", 0, current=2, wanted=8)], 75.0, state)
    assert out_dip[("team", "low")].replicas == 2
    assert out_dip[("team", "low")].waiting_for_capacity.endswith(
        f"kept for team/high (priority 10): 2 GPU(s) it held within the last {HOLD_S:.0f}s")
    # once the high backend stays low for the hold, the low one grows into what it let go
    t = len(wants) * 15.0
    for k in range(int(HOLD_S // 15) + 1):
        out, state = share([claim("high", 10, current=high_cur, wanted=4),
                            claim("low", 0, current=low_cur, wanted=8)], t + k * 15.0, state)
        high_cur, low_cur = out[("team", "high")].replicas, out[("team", "low")].replicas
        if k * 15.0 < HOLD_S - 15.0:
            assert low_cur == 2, k
    assert low_cur == 4


def test_preempted_by_stays_while_the_victim_is_short_and_clears_when_it_is_not():
    state = PoolState()
    out, state = share([claim("high", 10, current=2, wanted=6), claim("low", 0, current=6, wanted=6)], 0.0, state)
    out, state = share([claim("high", 10, current=6, wanted=6), claim("low", 0, current=2, wanted=6)], 15.0, state)
    assert out[("team", "low")].preempted_by == "team/high (priority 10): 4 replica(s)"
    out, state = share([claim("high", 10, current=6, wanted=6), claim("low", 0, current=2, wanted=2)], 30.0, state)
    assert out[("team", "low")].preempted_by is None and out[("team", "low")].waiting_for_capacity is None


def test_the_memory_stays_small_a_run_of_syncs_at_one_count_is_one_entry():
    state = PoolState()
    for i in range(100):
        _, state = share([claim("high", 10, current=2, wanted=2), claim("low", 0, current=6, wanted=6)], i * 1.0, state)
    assert state.granted[(POOL, ("team", "high"))] == [(99.0, 2)]


def _pod(name, node=None, unschedulable=None):
    """A serving pod of a 1-GPU backend: made by its ReplicaSet, requesting its GPU."""
    gpu = [{"name": "server", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name.split('-')[0]}-h", "uid": "rs",
              "controller": True}]  # its backend's Deployment is named as the pod's name begins
    pod = {"metadata": {"name": name, "labels": {"pod-template-hash": "h"}, "ownerReferences": owner},
           "spec": {**({"nodeName": node} if node else {}), "containers": gpu}, "status": {}}
    if unschedulable is not None:
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": unschedulable}]
    return pod


def test_held_replicas_leaves_out_pods_a_quota_refused_and_pods_only_more_than_gpus_would_not_place():
    from llmbackend.autoscaling.holding import held_replicas

    deployment = {"status": {"conditions": [{"type": "Available", "status": "True"}]}}
    refused = {"status": {"conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}]}}
    waiting_for_gpus = _pod("a", unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    never = _pod("b", unschedulable="0/4 nodes are available: 4 Insufficient memory.")
    assert held_replicas(3, [_pod("x", node="n1"), waiting_for_gpus, _pod("new")], deployment) == 3
    assert held_replicas(3, [_pod("x", node="n1"), never, _pod("new")], deployment) == 2
    assert held_replicas(8, [], refused) == 0, "a quota let the ReplicaSet create none"
    assert held_replicas(8, [], deployment) == 8, "pods not created yet (no failure said) are on their way"
    assert held_replicas(2, None, deployment) is None, "no pods listed yet: not known"
    # no Deployment (the API server refused it, or a multi-node backend's groups): only what its pods hold
    assert held_replicas(2, [], None) == 0
    assert held_replicas(2, [_pod("x", node="n1"), waiting_for_gpus, _pod("new")], None) == 2, "not judged yet: not held"


def test_replicas_whose_pods_never_run_hold_nothing_and_the_backend_keeps_them():
    # the attacker pass: a tenant's 8 replicas refused by a GPU quota of 0 kept another namespace's backend waiting
    hog = claim("hog", 0, current=8, wanted=8, min_replicas=8, namespace="tenant", held=0)
    model = claim("model", 0, current=1, wanted=8, namespace="prod")
    out, state = share([hog, model], 0.0)
    assert out[("prod", "model")].replicas == 8 and out[("prod", "model")].waiting_for_capacity is None
    assert out[("tenant", "hog")].replicas == 8, "its own replicas stay: their pods' problem is its conditions'"
    assert out[("tenant", "hog")].waiting_for_capacity is None
    assert state.granted[(POOL, ("tenant", "hog"))] == [(0.0, 0)], "what it never held reserves nothing"
    assert out[("prod", "model")].replicas == 8


def test_a_higher_class_whose_pods_never_run_takes_nothing_more_and_reserves_nothing():
    victim = claim("model", 0, current=1, wanted=8, cluster_wide=True, namespace="prod")
    # its 7 replicas granted a sync ago cannot be placed (memory no node has): the victim grows back at once
    hog = claim("hog", 1000, current=7, wanted=8, min_replicas=0, cluster_wide=True, namespace="tenant", held=0)
    state = PoolState(granted={(POOL, ("tenant", "hog")): [(0.0, 0)]})
    out, _ = share([hog, victim], 10.0, state)
    assert out[("prod", "model")].replicas == 8 and out[("prod", "model")].preempted_by is None
    assert out[("tenant", "hog")].replicas == 7


def test_replicas_given_back_as_part_of_a_replica_are_not_counted_as_taken():
    # high needs 4 GPUs a replica; low's 2 above minReplicas make no whole replica and are given back, then the
    # scheduler's preemption of low's pods (a higher class) gives high its replica: 4 of low's replicas, not 6
    high = claim("high", 1000, current=0, wanted=1, min_replicas=0, gpus=4, cluster_wide=True, pool_gpus=6)
    low = claim("low", 0, current=6, wanted=6, min_replicas=4, cluster_wide=True, pool_gpus=6)
    out, _ = share([high, low], 0.0)
    assert out[("team", "high")].replicas == 1
    assert out[("team", "low")].preempted_by == "team/high (priority 1000): 4 replica(s)"


def test_a_backend_whose_pods_no_node_of_the_pool_can_hold_claims_nothing_and_says_why():
    why = "no node of the pool can hold a serving pod: 0/1 nodes are available: 1 Insufficient memory"
    # before any pod of it exists (held not known): it takes neither free GPUs nor others' replicas
    hog = claim("hog", 1000, current=1, wanted=8, cluster_wide=True, namespace="tenant", unplaceable=why)
    victim = claim("model", 0, current=6, wanted=8, cluster_wide=True, namespace="prod")
    out, state = share([hog, victim], 0.0)
    assert out[("prod", "model")].replicas == 8 and out[("prod", "model")].preempted_by is None
    assert out[("prod", "model")].waiting_for_capacity is None
    assert out[("tenant", "hog")].replicas == 1, "keeps its replicas, grows no further"
    assert out[("tenant", "hog")].waiting_for_capacity == f"8 replica(s) not claimed from the GPU pool: {why}"
    assert out[("tenant", "hog")].unplaceable and out[("tenant", "hog")].took is None
    assert state.granted[(POOL, ("tenant", "hog"))] == [(0.0, 0)] and not state.waiting_since


def test_an_unplaceable_backends_bound_pods_still_hold_their_gpus():
    # the model said no node fits, yet 2 of its pods run (a node changed since): those GPUs are held, and counted
    hog = claim("hog", 10, current=3, wanted=8, held=2, unplaceable="no node of the pool can hold a serving pod")
    low = claim("low", 0, current=7, wanted=7, min_replicas=1)
    out, _ = share([hog, low], 0.0)
    assert out[("team", "low")].replicas == 6, "overcommitted by its 2 running pods: the lower one gives one up"
    assert out[("team", "hog")].replicas == 3 and "6 replica(s) not claimed" in out[("team", "hog")].waiting_for_capacity


def test_bound_replicas_counts_pods_on_a_node_and_not_those_leaving():
    from llmbackend.autoscaling.holding import bound_replicas

    leaving = _pod("c", node="n1")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    assert bound_replicas(3, [_pod("a", node="n1"), _pod("b"), leaving]) == 1
    assert bound_replicas(3, None) == 0 and bound_replicas(1, [_pod("a", node="n1"), _pod("b", node="n2")]) == 1


def test_bound_replicas_of_a_gpu_backend_count_only_pods_that_request_gpus():
    """A pod with the backend's labels that a tenant bound to a node itself, asking for no GPU, runs nothing of a
    GPU backend: it does not stand in for a replica whose pod waits (it would hide that pod from the pool)."""
    from llmbackend.autoscaling.holding import bound_replicas

    real = _pod("a", node="n1")
    real["spec"]["containers"] = [{"name": "server", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    forged = _pod("b", node="n1")
    forged["spec"]["containers"] = [{"name": "sleep"}]  # asks for no GPU
    assert bound_replicas(2, [real, forged], needs_gpus=True) == 1
    assert bound_replicas(2, [real, forged]) == 2  # a backend of no GPUs: any bound pod of its labels runs it


def _group_pod(name, group, size, node=None, unschedulable=None):
    """A pod of a LeaderWorkerSet group, labelled and annotated as the LWS controller does."""
    pod = _pod(name, node=node, unschedulable=unschedulable)
    backend = name.split("-")[0]
    pod["metadata"]["labels"] = {"leaderworkerset.sigs.k8s.io/group-index": str(group),
                                 "leaderworkerset.sigs.k8s.io/name": backend}
    pod["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    # the leader's StatefulSet is the LeaderWorkerSet's name, a worker's <name>-<group> (named <leader pod>-<n>)
    owner = backend if name.count("-") == 1 else f"{backend}-{group}"
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "uid": "sts",
                                           "name": owner, "controller": True}]
    return pod


def test_a_multi_node_group_holds_only_when_whole_and_each_pod_is_bound_or_waits_only_for_gpus():
    from llmbackend.autoscaling.holding import bound_replicas, held_replicas

    for_gpus = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    for_affinity = "0/4 nodes are available: 4 node(s) didn't match pod affinity rules."
    pods = [_group_pod("big-0", 0, 2, node="n1"), _group_pod("big-0-1", 0, 2, node="n2"),      # bound: holds
            _group_pod("big-1", 1, 2, unschedulable=for_gpus), _group_pod("big-1-1", 1, 2, node="n3"),  # for GPUs
            _group_pod("big-2", 2, 2, node="n4"), _group_pod("big-2-1", 2, 2, unschedulable=for_affinity),  # never
            _group_pod("big-3", 3, 2, node="n5")]  # its worker was refused (a quota): not whole
    assert held_replicas(5, pods, None) == 2, "groups 0 and 1; the fifth replica has no pod"
    assert bound_replicas(5, pods) == 1, "group 0 alone has every pod on a node"
    assert held_replicas(5, [], None) == 0 and bound_replicas(5, []) == 0


def _share_target(name, pool="H100/abc", multi_node=False):
    from llmbackend.api.v1alpha1 import AutoscalingSpec
    from llmbackend.controller.decide import AutoscaleTarget

    return AutoscaleTarget("tenant", name, AutoscalingSpec(enabled=True, max_replicas=8), "llm",
                           f"llmbackend.dev/backend={name}", 4, 8, 1, 8, pool=pool, pool_gpus=8,
                           multi_node=multi_node)


class _Reads:
    """The API server behind the operator's CachedKube: answers a Deployment read, counts them."""

    def __init__(self, answer=None, fail=False):
        self.reads, self.answer, self.fail = 0, answer, fail

    def get(self, kind, namespace, name):
        self.reads += 1
        if self.fail:
            raise OSError("connection refused")
        return self.answer

    def list(self, kind, namespace=None, label_selector=None, field_selector=None):
        self.reads += 1
        if self.fail:
            raise OSError("connection refused")
        return []


def _held(operator, target, pods):
    import asyncio

    return asyncio.run(operator._held((target.namespace, target.name), target, pods))


def test_the_pool_reads_a_deployments_absence_from_the_synced_watch_cache_and_nothing_live():
    from test_backoff import _operator

    operator = _operator()
    operator.kube.kube = reads = _Reads()  # type: ignore[assignment]
    store = operator.caches.stores["Deployment"]
    store.replace("", [{"metadata": {"namespace": "tenant", "name": "served"}, "status": {}}])
    assert store.synced
    target = _share_target("refused")
    for _ in range(3):
        assert _held(operator, target, []) == 0, "the API server refused its Deployment: it holds nothing"
    assert _held(operator, _share_target("served"), []) == 4, "a Deployment whose pods are on their way holds"
    assert reads.reads == 0


def test_before_the_caches_sync_an_absent_deployment_is_read_once_per_target_and_a_failed_read_is_not_known():
    from test_backoff import _operator

    operator = _operator()
    operator.kube.kube = reads = _Reads()  # type: ignore[assignment]
    target = _share_target("refused")
    assert [_held(operator, target, []) for _ in range(3)] == [0, 0, 0] and reads.reads == 1
    assert _held(operator, _share_target("refused"), []) == 0 and reads.reads == 2, "a new pass: read again"
    group = [_group_pod("refused-0", 0, 2, node="n1"), _group_pod("refused-0-1", 0, 2, node="n2")]
    multi_node = _share_target("refused", multi_node=True)
    assert _held(operator, multi_node, group) == 1 and reads.reads == 2, "a multi-node backend has no Deployment"
    # a Deployment backend's pods labelled as a group's (anyone who may create pods there can) do not make it one:
    # each GPU pod bound alone holds its replica
    assert _held(operator, target, group) == 2
    operator.kube.kube = _Reads(fail=True)  # type: ignore[assignment]
    assert _held(operator, _share_target("unread"), []) is None, "a read that failed: not known (all held)"


@pytest.mark.parametrize("message, held", [
    ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", 1),  # preemption placed it (nominated): no dry run said
    ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption "
     "victims found for incoming pod.", 1),  # the GPUs are held by equal or higher priorities: it waits for them
    ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 Insufficient "
     "nvidia.com/gpu.", 1),  # lower pods would not free enough: still GPUs
    ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: not eligible due to preemptionPolicy=Never.",
     1),  # no dry run: the filters' word stands
    # the dry run removed every lower pod and a filter after NodeResourcesFit failed: more GPUs would not place it
    ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 node(s) had "
     "volume node affinity conflict.", 0),
    ("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match pod topology spread "
     "constraints. preemption: 0/4 nodes are available: 2 node(s) didn't match pod affinity rules, 2 Preemption is "
     "not helpful for scheduling.", 0),
    ("0/4 nodes are available: 4 Insufficient memory.", 0),
])
def test_a_pending_pod_holds_when_the_scheduler_and_its_preemption_dry_run_both_say_gpus(message, held):
    from llmbackend.autoscaling.holding import held_replicas

    deployment = {"status": {"conditions": [{"type": "Available", "status": "True"}]}}
    assert held_replicas(1, [_pod("a", unschedulable=message)], deployment) == held
    assert held_replicas(1, [_group_pod("g-0", 0, 1, unschedulable=message)], None) == held


def test_a_running_multi_node_backend_holds_its_groups_with_the_workers_from_the_watch_cache():
    """The evaluation lists a backend's serving pods (the leaders): the pool reads the workers from the watch cache."""
    import asyncio

    from test_backoff import _operator

    operator = _operator()
    operator.kube.kube = reads = _Reads()  # type: ignore[assignment]
    leaders = [_group_pod(f"big-{g}", g, 2, node=f"n{g}") for g in range(2)]
    workers = [_group_pod(f"big-{g}-1", g, 2, node=f"m{g}") for g in range(2)]
    for p in leaders + workers:
        p["metadata"].update(namespace="tenant", labels={**p["metadata"]["labels"], "llmbackend.dev/backend": "big"})
    activator = {"metadata": {"namespace": "tenant", "name": "big-activator-x", "labels": {
        "llmbackend.dev/backend": "big"}}, "spec": {"nodeName": "cpu"}, "status": {}}
    operator.caches.stores["Pod"].replace("", [*leaders, *workers, activator])
    target = _share_target("big", multi_node=True)
    pods = asyncio.run(operator._pool_pods(("tenant", "big"), target, leaders))
    assert sorted(p["metadata"]["name"] for p in pods) == ["big-0", "big-0-1", "big-1", "big-1-1"]
    assert _held(operator, target, pods) == 2 and reads.reads == 0
    assert _held(operator, target, asyncio.run(operator._pool_pods(("tenant", "big"), target, leaders[:1]))) == 2
    workers[1]["spec"] = {}  # a worker not placed yet (its scheduler has not judged it): that group holds nothing
    operator.caches.stores["Pod"].replace("", [*leaders, *workers])
    assert _held(operator, target, asyncio.run(operator._pool_pods(("tenant", "big"), target, leaders))) == 1


def test_a_cut_read_again_before_the_reconciler_wrote_it_is_not_counted_twice():
    """CI, stop 58: the loop's next sync read the lower backend at its old count (the reconciler had not written the
    cut yet) and cut the same replicas again; status said 14 replicas were given up of 8."""
    state = PoolState()
    out, state = share([claim("chat", 10, current=0, wanted=8), claim("batch", 0, current=8, wanted=8)], 0.0, state)
    assert out[("team", "batch")].preempted_by == "team/chat (priority 10): 7 replica(s)"
    for t in (15.0, 30.0):  # batch still read at 8, then at the 1 the reconciler wrote
        current = 8 if t == 15.0 else 1
        out, state = share([claim("chat", 10, current=7, wanted=8), claim("batch", 0, current=current, wanted=8)], t,
                           state)
        assert out[("team", "batch")].replicas == 1
        assert out[("team", "batch")].preempted_by == "team/chat (priority 10): 7 replica(s)", t


def test_cuts_in_later_syncs_for_more_growth_still_add_up():
    state = PoolState()
    out, state = share([claim("chat", 10, current=0, wanted=3), claim("batch", 0, current=8, wanted=8)], 0.0, state)
    assert out[("team", "batch")].preempted_by == "team/chat (priority 10): 3 replica(s)"
    out, state = share([claim("chat", 10, current=3, wanted=7), claim("batch", 0, current=5, wanted=8)], 15.0, state)
    assert out[("team", "batch")].replicas == 1
    assert out[("team", "batch")].preempted_by == "team/chat (priority 10): 7 replica(s)"
