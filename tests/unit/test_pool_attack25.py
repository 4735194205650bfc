"""Twenty-fifth attacker pass on the GPU pool (autoscaling/pool.py ``share``/``served_first``/
``smallest_waiting_above``/``third_waits``/``contested``, holding.py ``unclaimed_waiting``/``_node_kind``/
``_with_volatile``, planning/inventory.py ``GPUNode.volatile_labels``), as a tenant who may edit LLMBackends in its
own namespace and create, patch and delete pods there. Aimed at 36391a2 (pass 24's fixes): step 2's check that the
cuts complete a whole waiting replica (``freed_for_waiting % need + givable.pod_priority_below(highest_waiting) >=
need``), step 3's ``third_waits`` counting the taker's namespace, and node kinds built from the label keys some node
of each pool has. Shares are fed back sync after sync through the kube-scheduler model of tests/unit/pool_scheduler.py
(the pool as one bin of GPUs; among pods of one priority the unseen bare pods are the oldest; a pod that does not fit
preempts lower pod priorities only when that makes it fit).

Summary: five findings.
High (theft, no class, no forgery; needs pools whose nodes carry distinct label keys with one value, e.g. an admin's
``pool-a=true`` / ``pool-b=true``): ``unclaimed_waiting`` caches a fit by (pod shape, node kind), and since the kinds
keep only the label keys some node of *that* pool has, a kind no longer says which keys its values are of. A pod whose
required affinity is ``pool-a In [true], pool-b DoesNotExist`` has the kind ``(("true",), ...)`` in both pools: judged
on pool A first it is counted in pool B too, where it can never run (denial: B's reshuffles freeze); judged on pool B
first it is counted in neither, so it takes the GPU a reshuffle of pool A frees (theft, shown through ``share``). A
differential test over several pools finds it on its own. Fix: key ``fits`` (and ``kinds``) by the pruned key names
too, e.g. ``fits[(shape, here, kind)]``.
High (theft through a claimed backend, no bare pod, no class): the pass-24 completeness check lives in
``served_first`` only, which returns at once when no Pending pod outside the cut's namespace is listed. Pool 5: c
(class 5, 2-GPU replicas) runs 2 and waits 1; b (another namespace) runs 1 GPU; the tenant's own backend d holds one
Pending replica at its minReplicas. Step 2 cuts b for c's replica, which the 1 freed GPU cannot complete; the tenant's
Pending replica takes it (b 1 -> 0, d 0 -> 1 running). Without d, b is drained for nobody and stays at 0 (the
kube-scheduler alone never preempts b: it frees too little). Fix: apply the whole-replica condition to every step-2 cut
made for waiting replicas, not only where unclaimed pods are listed.
High (theft, bare pods, multi-GPU classes): ``givable.pod_priority_below(highest_waiting)`` counts GPUs of Pending
replicas above their floors (they free nothing when cut) and ``need`` is read at step 2's start (a class whose waiting
replica the first cuts completed stays the "smallest"). Two shapes: (a) a Pending replica above its floor of any
namespace (here b's own higher-priority backend e, behind b in its namespace's order) makes the check pass for a
2-GPU replica one running GPU cannot complete, and the tenant's older bare pod takes b's GPU; (b) c10 (2-GPU) and c5 (3-GPU)
wait, b runs 4: the first two cuts complete c10's replica, the next two are still judged with need 2 though only c5's
3-GPU replica waits, so b is cut to 0 and the tenant's two bare pods take 2 GPUs (the scheduler alone: b keeps 2).
The fuzz with mixed sizes and bare pods in every namespace finds (a) on its own. Fix: count as givable only running
GPUs (``runs``) of those below, and recompute ``need`` from the replicas still waiting beyond ``freed_for_waiting``.
Medium (denial, one bare pod, no class): ``third_waits``/``served_first`` compare pod priorities only, never sizes. A
tenant's 2-GPU bare pod (it fits a node of the pool) freezes namespace a's 1-GPU reshuffle for good, in step 2 and in
step 3, though the one GPU a cut frees could never place it. Rests on the model: no GPU free beside the one a cut
frees. Fix: count an unclaimed pod against a cut only while its GPUs are at most what the cuts (with the free GPUs) free.
Low (theft, judged mode only: every claim's pods unread): ``served_first`` skips only for bare pods of the cut's pod
priority or above, so a class-1 backend's running GPU cut for a class-5 2-GPU replica it cannot complete goes to a
priority-0 bare pod. Fix: in judged mode skip the cut while any unclaimed pod waits and the taker's replica is larger
than the GPUs the cuts free.
Sound: a class's waiting 2-GPU replica completed by two cuts feeds no bare pod; the tenant's bare pod at a lower pod
priority stops no class taker (``third_waits``); unclaimed_waiting agrees with a per-node podfit check, one pool a
call, over fuzzed pods (In/NotIn/Exists/DoesNotExist/Gt on keys no node has, nodeSelector, the GFD timestamp on some
nodes only) and nodes with and without volatile labels; a GPUNode with a new timestamp equals the old one and parse_node
keeps only volatile labels aside; pods that read the timestamp cost no more than pods that read the hostname; a fuzz
of 300 pools of 1-GPU replicas with bare pods in every namespace (the taker's included) feeds no bare pod.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random

import pytest
from cpu_probe import quiet_cpu_s
from test_pool_attack24 import _runs, claim
from test_pool_unclaimed import _node, _pod

from llmbackend.autoscaling.holding import unclaimed_waiting
from llmbackend.autoscaling.pool import Unclaimed, share
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.podfit import failures, pod_requests

STAMP = "nvidia.com/gfd.timestamp"
PA, PB = ("pool-a",), ("pool-b",)


def _shares(out) -> dict:
    return {k: s.replicas for k, s in out.items()}


# --- (1) unclaimed_waiting: a fit cached across pools whose kinds read other keys ----------------------------------

def _split_nodes() -> dict:
    """Two pools split by the admin with a label each: pool-a=true on A's nodes, pool-b=true on B's (same hardware)."""
    return {PA: [_node("a1", labels={"pool-a": "true", "kubernetes.io/hostname": "a1"})],
            PB: [_node("b1", labels={"pool-b": "true", "kubernetes.io/hostname": "b1"})]}


def _pool_a_only_pod() -> dict:
    return _pod(namespace="t", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool-a", "operator": "In", "values": ["true"]},
                                                    {"key": "pool-b", "operator": "DoesNotExist"}]}]}}})


def test_control_each_pool_alone_judges_the_pod_as_its_node_would():
    pod, nodes = _pool_a_only_pod(), _split_nodes()
    req = pod_requests(pod["spec"])
    assert not failures(pod["spec"], req, nodes[PA][0]) and failures(pod["spec"], req, nodes[PB][0])
    assert unclaimed_waiting([pod], {PA: nodes[PA]}, lambda p: None)[PA] == [Unclaimed("t", 0, 1)]
    assert unclaimed_waiting([pod], {PB: nodes[PB]}, lambda p: None)[PB] == []


# Fixed (was a strict xfail): FINDING (high) a fit judged for one pool's node kind was reused for another pool whose kinds read other label keys; the fit cache is keyed by the keys a kind reads too.
@pytest.mark.parametrize("order", ["a-first", "b-first"])
def test_a_pod_counts_in_each_pool_as_its_nodes_would_place_it_whatever_the_pool_order(order):
    nodes = _split_nodes()
    pools = {PA: nodes[PA], PB: nodes[PB]} if order == "a-first" else {PB: nodes[PB], PA: nodes[PA]}
    listed = unclaimed_waiting([_pool_a_only_pod()], pools, lambda p: None)
    assert listed[PA] == [Unclaimed("t", 0, 1)] and listed[PB] == [], listed


# Fixed (was a strict xfail): FINDING (high) the same cache collision, judged on the other pool first; fixed with it.
def test_a_reshuffle_waits_for_a_bare_pod_the_other_pool_was_judged_first_for():
    nodes = _split_nodes()
    listed = unclaimed_waiting([_pool_a_only_pod()], {PB: nodes[PB], PA: nodes[PA]}, lambda p: None)
    cs = [claim("a", "a0", pool=PA, pool_gpus=4, current=4, held=4, bound=4, wanted=4),
          claim("a", "a1", pool=PA, pool_gpus=4, priority=5, current=1, held=1, bound=0, wanted=1)]
    out, _ = share(cs, 1000.0, unclaimed=listed)
    assert _shares(out)[("a", "a0")] == 4, (listed, _shares(out))


def _random_nodes(rng: random.Random, prefix: str, keys: list[str]) -> list:
    nodes = []
    for i in range(rng.randint(1, 4)):
        labels = {k: rng.choice(["true", "x", "7"]) for k in keys if rng.random() < 0.6}
        labels["kubernetes.io/hostname"] = f"{prefix}{i}"
        node = _node(f"{prefix}{i}", gpus=rng.choice([2, 4]), labels=labels,
                     taints=[("dedicated", "llm", "NoSchedule")] if rng.random() < 0.2 else ())
        if rng.random() < 0.6:
            node = dataclasses.replace(node, volatile_labels=((STAMP, rng.choice(["100", "200"])),))
        nodes.append(node)
    return nodes


def _random_pod(rng: random.Random, i: int, keys: list[str]) -> dict:
    def expr():
        key = rng.choice(keys + [STAMP, "absent-key"])
        op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt"])
        e = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            e["values"] = rng.sample(["true", "x", "7", "100", "200"], rng.randint(1, 2))
        elif op == "Gt":
            e["values"] = [rng.choice(["5", "150"])]
        return e
    spec = {}
    if rng.random() < 0.3:
        spec["nodeSelector"] = {rng.choice(keys + [STAMP]): rng.choice(["true", "x", "100"])}
    if rng.random() < 0.8:
        terms = [{"matchExpressions": [expr() for _ in range(rng.randint(1, 2))]} for _ in range(rng.randint(1, 2))]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    if rng.random() < 0.2:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    return _pod(namespace="t", name=f"p{i}", gpus=rng.choice([1, 2, 4]), **spec)


def _seen_by_scheduler(node):
    return dataclasses.replace(node, labels=tuple(sorted((*node.labels, *node.volatile_labels))))


def _differential(seed: int, several: bool, trials: int = 150) -> None:
    rng = random.Random(seed)
    for trial in range(trials):
        if several:  # pools whose nodes carry distinct keys (an admin's split), judged in one call
            pools = {(f"P{p}",): _random_nodes(rng, f"n{p}-", [f"pool-{p}", "rack"]) for p in range(3)}
            keys = ["pool-0", "pool-1", "pool-2", "rack"]
        else:
            keys = ["gpu", "rack", "zone"]
            pools = {("P",): _random_nodes(rng, "n", keys)}
        pods = [_random_pod(rng, i, keys) for i in range(8)]
        listed = unclaimed_waiting(pods, pools, lambda p: None)
        for pool, nodes in pools.items():
            want = [Unclaimed("t", 0, int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]))
                    for p in pods if any(not failures(p["spec"], pod_requests(p["spec"]), _seen_by_scheduler(n))
                                         for n in nodes)]
            assert listed[pool] == want, (trial, pool, nodes, pods, listed[pool], want)


def test_unclaimed_waiting_agrees_with_a_per_node_check_one_pool_a_call():
    _differential(2501, several=False)


# Fixed (was a strict xfail): FINDING (high) the differential's find of that collision; fixed with it.
def test_unclaimed_waiting_agrees_with_a_per_node_check_over_several_pools():
    _differential(2502, several=True)


def test_volatile_labels_are_kept_aside_and_not_compared():
    node = {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "nvidia.com/gpu.count": "2", STAMP: "1"}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}
    later = {**node, "metadata": {**node["metadata"], "labels": {**node["metadata"]["labels"], STAMP: "2"}}}
    bare = {**node, "metadata": {**node["metadata"], "labels": {
        k: v for k, v in node["metadata"]["labels"].items() if k != STAMP}}}
    first, second, without = parse_node(node), parse_node(later), parse_node(bare)
    assert first == second == without
    assert first.volatile_labels == ((STAMP, "1"),) and without.volatile_labels == ()
    assert STAMP not in dict(first.labels)


# --- (2) step 2: the whole-replica check only where unclaimed pods are listed ----------------------------------------

def _class_waits_two(extra=()) -> list:
    """Pool 5: c (class 5, 2-GPU replicas) runs 2 and waits 1; b (another namespace) runs 1 GPU."""
    return [claim("c", "c", pool_gpus=5, class_priority=5, gpus_per_replica=2, current=3, held=3, bound=2, wanted=3),
            claim("b", "b", pool_gpus=5, current=1, held=1, bound=1, wanted=1), *extra]


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_control_with_a_bare_pod_listed_b_keeps_its_gpu(across):
    d = claim("t", "d", pool_gpus=5, current=1, held=1, bound=0, wanted=1, min_replicas=1)
    for _, out, running, _before in _runs(_class_waits_two([d]), across=across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("b", "b")] == 1 and running[("unseen", "t")] == 0, (_shares(out), running)


# Fixed (was a strict xfail): FINDING (high) the whole-replica check ran only with unclaimed pods listed; step 2 (feeds_others) now asks of every cut of a running replica that the cuts can complete the replica next in line.
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_tenants_pending_replica_takes_a_gpu_step_2_freed_for_a_replica_it_cannot_complete(across):
    d = claim("t", "d", pool_gpus=5, current=1, held=1, bound=0, wanted=1, min_replicas=1)
    for _, out, running, before in _runs(_class_waits_two([d]), across=across, syncs=3):
        assert running[("b", "b")] == 1 and running[("t", "d")] == 0, (_shares(out), running, before)


# Fixed (was a strict xfail): FINDING (high) same cause; fixed with it.
def test_b_is_not_drained_for_a_replica_its_gpu_cannot_complete():
    for _, out, running, _before in _runs(_class_waits_two(), syncs=3):
        assert _shares(out)[("b", "b")] == 1 and running[("b", "b")] == 1, (_shares(out), running)


# --- (3) step 2: givable counts Pending replicas; need read at step 2's start ---------------------------------------

# Fixed (was a strict xfail): FINDING (high) the check counted Pending replicas as what cuts free; it counts running replicas above their floors (running_givable) only.
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_pending_replica_above_its_floor_does_not_make_a_cut_complete_a_replica(across):
    # b's namespace's own higher-priority backend e holds one Pending replica above its floor (b goes first there)
    e = claim("b", "e", pool_gpus=5, priority=5, current=1, held=1, bound=0, wanted=1)
    for _, out, running, before in _runs(_class_waits_two([e]), across=across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("unseen", "t")] == 0 and running[("b", "b")] == 1, (_shares(out), running, before)


def _two_classes_wait(c5: bool) -> list:
    cs = [claim("c", "c10", pool_gpus=4, class_priority=10, gpus_per_replica=2, current=1, held=1, bound=0, wanted=1),
          claim("b", "b", pool_gpus=4, current=4, held=4, bound=4, wanted=4)]
    if c5:
        cs.append(claim("d", "c5", pool_gpus=4, class_priority=5, gpus_per_replica=3, current=1, held=1, bound=0,
                        wanted=1, min_replicas=1))
    return cs


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_control_one_class_waiting_b_gives_only_what_completes_its_replica(across):
    for _, out, running, _before in _runs(_two_classes_wait(False), across=across, syncs=3, unseen=[("t", 1, 0, 2)]):
        assert running[("unseen", "t")] == 0, (_shares(out), running)
    assert running[("c", "c10")] == 1 and running[("b", "b")] == 2, (_shares(out), running)


# Fixed (was a strict xfail): FINDING (high) the need was read at step 2's start; the replica next in line is followed as cuts free GPUs (next_waiting).
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_completed_class_replica_does_not_stay_the_need_of_later_cuts(across):
    for _, out, running, before in _runs(_two_classes_wait(True), across=across, syncs=3, unseen=[("t", 1, 0, 2)]):
        assert running[("unseen", "t")] == 0 and running[("b", "b")] >= 2, (_shares(out), running, before)


# --- (4) pod priorities only, never sizes: a bare pod that could never take the freed GPU ----------------------------

def _a_reshuffle(step2: bool) -> list:
    a1 = dict(current=1, held=1, bound=0) if step2 else {}
    return [claim("a", "a0", pool_gpus=4, current=4, held=4, bound=4, wanted=4),
            claim("a", "a1", pool_gpus=4, priority=5, wanted=1, **a1)]


@pytest.mark.parametrize("step2", [True, False], ids=["step-2", "step-3"])
def test_control_a_one_gpu_bare_pod_stops_a_reshuffle_whose_gpu_it_would_take(step2):
    for _, out, running, _ in _runs(_a_reshuffle(step2), syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("unseen", "t")] == 0, (_shares(out), running)
    assert running[("a", "a0")] == 4, running


# Fixed (was a strict xfail): FINDING (medium, denial) pods no claim covers were compared by priority only; one counts against a cut only when it fits in what the cut frees with the idle GPUs (_UnclaimedPods by size).
@pytest.mark.parametrize("step2", [True, False], ids=["step-2", "step-3"])
def test_a_bare_pod_larger_than_what_the_cut_frees_does_not_freeze_a_reshuffle(step2):
    for _, out, running, _ in _runs(_a_reshuffle(step2), syncs=3, unseen=[("t", 2, 0, 1)]):
        assert running[("unseen", "t")] == 0, (_shares(out), running)
    assert running[("a", "a1")] == 1 and running[("a", "a0")] == 3, (_shares(out), running)


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_lower_bare_pod_of_the_tenant_does_not_stop_a_class_taker(across):
    """third_waits counts pods of the taker's pod priority or above: the tenant's priority-0 pod stops no class-5
    backend of another namespace from taking b's GPUs (and takes none of them)."""
    cs = [claim("c", "c", pool_gpus=4, class_priority=5, wanted=2),
          claim("b", "b", pool_gpus=4, current=4, held=4, bound=4, wanted=4)]
    for _, out, running, _ in _runs(cs, across=across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("unseen", "t")] == 0, (_shares(out), running)
    assert running[("c", "c")] == 2 and running[("b", "b")] == 2, (_shares(out), running)


# --- (5) judged mode (no pod read) --------------------------------------------------------------------------------

# Fixed (was a strict xfail): FINDING (low) judged mode compared priorities; with no pods read, step 2 makes no cut of a running replica while such pods wait outside the cut's namespace.
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_judged_mode_does_not_feed_a_lower_bare_pod(across):
    cs = [claim("c", "c", pool_gpus=5, class_priority=5, gpus_per_replica=2, current=3, held=3, bound=2, wanted=3),
          claim("b", "b", pool_gpus=5, class_priority=1, current=1, held=1, bound=1, wanted=1)]
    for _, out, running, _ in _runs(cs, across=across, syncs=3, unseen=[("t", 1, 0, 1)],
                                    seen=lambda c: dataclasses.replace(c, bound=None)):
        assert running[("unseen", "t")] == 0 and running[("b", "b")] == 1, (_shares(out), running)


# --- (6) fuzz: bare pods in every namespace, the taker's included --------------------------------------------------

def _fuzz_pool(rng: random.Random, sizes: list[int]):
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
    """Pass 24's fuzz with bare Pending pods of 1 to 3 namespaces among the claims' own (t, a, b, c) and one outside
    (x). A bare pod of a namespace whose backend lost a running replica is that namespace's own reshuffle: not
    counted. The rest gain no GPUs beyond those free before the sync and those the scheduler model preempted, unless
    a backend that ran more outranks by pod priority one that ran less."""
    rng = random.Random(seed)
    for trial in range(trials):
        across = trial % 2 == 0
        cs, pool = _fuzz_pool(rng, sizes)
        unread = {c.key for c in cs if rng.random() < 0.3}

        def seen(c, unread=unread):
            return dataclasses.replace(c, bound=None) if c.key in unread else c

        unseen = [(ns, rng.choice([1, 2]), 0, rng.randint(1, 2)) for ns in rng.sample("tabcx", rng.randint(1, 3))]
        for claims, out, running, before in _runs(cs, across, syncs=5, unseen=unseen, seen=seen):
            fell_ns = {c.namespace for c in claims if running[c.key] < before[c.key]}
            free_before = pool - sum(before[c.key] * c.gpus_per_replica for c in claims) - sum(
                before[("unseen", n)] * g for n, g, _, _ in unseen)
            gained = sum((running[("unseen", n)] - before[("unseen", n)]) * g for n, g, _, _ in unseen
                         if n not in fell_ns)
            preempted = sum(max(0, min(before[c.key], out[c.key].replicas) - running[c.key]) * c.gpus_per_replica
                            for c in claims)
            grew = [c for c in claims if running[c.key] > before[c.key]]
            fell = [c for c in claims if running[c.key] < before[c.key]]
            scheduler_would = any(g.scheduling_priority > f.scheduling_priority for g in grew for f in fell)
            assert gained <= max(0, free_before) + preempted or scheduler_would, (
                trial, across, unread, claims, _shares(out), running, before, unseen)
            for v in claims:
                assert out[v.key].replicas >= min(v.current, v.min_replicas) or out[v.key].preempted_by, (trial, v)


def test_fuzz_one_gpu_replicas_bare_pods_in_every_namespace_feed_no_bare_pod():
    _fuzz(2511, [1])


# Fixed (was a strict xfail): FINDING (high) the fuzz's find of the Pending-replica case above; fixed with it.
def test_fuzz_mixed_sizes_bare_pods_in_every_namespace_feed_no_bare_pod():
    _fuzz(2502, [1, 1, 2, 4])


# --- (7) cost ------------------------------------------------------------------------------------------------------

def _cpu(pods, pools) -> float:
    return quiet_cpu_s(lambda: unclaimed_waiting(pods, pools, lambda pod: None))


def test_pods_that_read_the_timestamp_cost_no_more_than_pods_that_read_the_hostname():
    pools = {(f"P{p}",): [dataclasses.replace(
        _node(f"n{p}-{i}", labels={"gpu": "h", "kubernetes.io/hostname": f"n{p}-{i}"}),
        volatile_labels=((STAMP, str(1000 + 8 * p + i)),)) for i in range(8)] for p in range(8)}

    def pods(key):
        out = []
        for i in range(150):
            pod = _pod(namespace="t", name=f"p{i}", affinity={"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": key, "operator": "In", "values": ["none"]}]}]}}})
            pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{i + 1}m"}
            out.append(pod)
        return out
    hostname, stamp = _cpu(pods("kubernetes.io/hostname"), pools), _cpu(pods(STAMP), pools)
    assert stamp <= 3 * hostname + 0.02, (hostname, stamp)
