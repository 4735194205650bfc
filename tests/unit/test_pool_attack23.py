"""Twenty-third attacker pass on the GPU pool (autoscaling/pool.py ``share``/``served_first``/``runs``/
``waiting_gpus``/``blocking_gpus``, holding.py ``unclaimed_waiting``/``held_replicas``/``_node_kind``, planning
inventory's node labels), as a tenant who may edit LLMBackends in its own namespace and create, patch and delete pods
there (labels, annotations, ownerReferences, nodeSelector, affinity, tolerations, requests, schedulerName, classes it
may use), and make its own backends' pod lists fail. Aimed at c5ecce8: a claimed backend's pod is covered in its own
pool only (``claimed_in``), step 2 skips a cut whose GPU a third namespace's unclaimed pod gets (``served_first``), a
pod shape is judged once a node kind, and a claim whose pods were not read counts as running where that justifies a
cut and as waiting where that stops one. Shares are fed back sync after sync through the kube-scheduler model of
tests/unit/pool_scheduler.py (with a claim read by the pool as unread while the model runs its true pods).

Summary: three findings.
High (theft, both modes, no forgery, one field of a pod): ``unclaimed_waiting`` judges a pod against the inventory's
``GPUNode.labels``, which drop ``nvidia.com/gfd.timestamp`` (``VOLATILE_LABELS``), a label GPU Feature Discovery puts
on every GPU node. A tenant's bare Pending pod whose required node affinity says ``Exists`` on that key is judged to
fit no node of the pool, so it is not listed: another namespace's own reshuffle goes ahead (a0 3 -> 2; through
``Operator._share_pools``: ns/low 3 -> 2) and the kube-scheduler, which reads the real labels, places the tenant's
older pod on the GPU the cut freed - pass 21's high finding back through a label the operator does not keep.
Medium (denial, needs its backend's own Pending replica slot): a pod the tenant's claimed backend's ReplicaSet
adopted (the backend's labels and no owner; a pod-deletion-cost annotation makes the ReplicaSet delete the backend's
own Pending pod instead) that names a scheduler that does not exist is never judged, so ``held_replicas`` counts it as
a held replica that waits for GPUs, for good: it stops every other namespace's reshuffle in the pool (``contested``)
though it can never run. The same pod as a bare pod stops nothing since pass 22's fix (``unclaimed_waiting`` counts a
pod not judged yet only for the default scheduler): the fix did not reach the claimed path.
Low (across namespaces only, while the tenant's pod list fails): an unread claim counts as waiting where that stops a
cut, and ``older_waiting(c, v)`` counts the victim's own unread replicas as its namespace's older Pending pods that
absorb what cutting it frees: a tenant whose running backend is unread is never cut by a higher priority of its pod
priority (t keeps 4 of 4, b waits for good; read: 3 and 1) - pass 21's low finding in another shape.
Sound: ``unclaimed_waiting`` against a per-node ``podfit.failures`` check over 1,360 fuzzed pods (node selectors,
In/NotIn/Exists/DoesNotExist/Gt/Lt and unknown operators, keys only some nodes have, matchFields with expressions,
taints and cordons differing per node, allocatable) in 3 pools of fuzzed nodes each of 8 trials: no pod counted for a
pool it cannot run in nor missed for one it can (node kinds are sound, given the labels the inventory keeps); in
default mode a tenant whose claims are unread never runs more GPUs at another namespace's claims' expense (400
fuzzed pools, one sync from the same pods); a fuzz of 300 pools (both modes) with the tenant's claims unread every
sync and bare pods of third namespaces through the scheduler model: floors hold, the shares settle, the bare pods run
on no GPU a cut freed except a class taker's leftover; step 2 cuts for a higher class's waiting replica and the bare
pod of a third namespace gets nothing (both modes); the cost of a pass of 800 claims with half of them unread, or
with 2,000 unclaimed pods, stays within 4 times the all-read pass (measured ~1.0-1.1x, linear to 1,600 claims).

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest
from cpu_probe import quiet_cpu_s
from pool_scheduler import claim
from pool_scheduler import scheduled as _scheduled
from pool_scheduler import unclaimed as _unclaimed
from test_autoscale_loop import _pool_target, _wanting
from test_pool_unclaimed import _operator_with_pending, _pod

from llmbackend.autoscaling.holding import bound_replicas, held_replicas, unclaimed_waiting
from llmbackend.autoscaling.pool import Claim, Unclaimed, share
from llmbackend.planning.inventory import GPUNode, parse_node
from llmbackend.planning.podfit import failures, pod_requests

POOL = ("gpu",)


def _runs(claims: list[Claim], across: bool = False, syncs: int = 5, step: float = 30.0, unseen=(), seen=None):
    """Pass 22's driver, with ``seen``: the claims as the pool reads them (a failed pod list: ``bound`` None) while the
    scheduler model runs the true ones. Yields (claims, shares, running, running before the sync)."""
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


def _reshuffle(pool_gpus: int = 3, **extra) -> list[Claim]:
    """Namespace a's own reshuffle: a0 runs 3 GPUs, a1 (priority 5) wants 1."""
    return [claim("a", "a0", pool_gpus=pool_gpus, current=3, held=3, bound=3, wanted=3),
            claim("a", "a1", pool_gpus=pool_gpus, priority=5, wanted=1)]


# --- (1) a label the inventory drops ----------------------------------------------------------------------------------

GFD_NODE = {"metadata": {"name": "n1", "labels": {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "3", "kubernetes.io/hostname": "n1",
    "nvidia.com/gfd.timestamp": "1733900000"}},  # GPU Feature Discovery writes it on every node it labels
    "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "3", "cpu": "64", "memory": "512Gi", "pods": "110"}}}


def _requiring(key: str, operator: str = "Exists") -> dict:
    return _pod(namespace="t", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": operator}]}]}}})


def test_control_a_bare_pod_requiring_a_label_the_node_keeps_stops_the_reshuffle():
    node = parse_node(GFD_NODE)
    listed = unclaimed_waiting([_requiring("nvidia.com/gpu.product")], {POOL: [node]}, lambda pod: None)
    assert listed == {POOL: [Unclaimed("t", 0, 1)]}
    out, _ = share(_reshuffle(), 1000.0, unclaimed=listed)
    assert out[("a", "a0")].replicas == 3 and out[("a", "a1")].replicas == 0, out


# Fixed (was a strict xfail): FINDING (high) a pod that required a label the inventory drops (nvidia.com/gfd.timestamp) was judged to fit no node and was not listed; unclaimed_waiting now takes what a pod asks of such labels as met (holding._volatile_met).
def test_a_bare_pod_requiring_a_label_the_inventory_drops_takes_the_gpu_of_the_reshuffle():
    node = parse_node(GFD_NODE)
    pod = _requiring("nvidia.com/gfd.timestamp")
    # the kube-scheduler places it on the node as the API server has it (all its labels)
    real = dataclasses.replace(node, labels=tuple(sorted(GFD_NODE["metadata"]["labels"].items())))
    assert failures(pod["spec"], pod_requests(pod["spec"]), real) == []
    listed = unclaimed_waiting([pod], {POOL: [node]}, lambda pod: None)
    out, _ = share(_reshuffle(), 1000.0, unclaimed=listed)
    assert out[("a", "a0")].replicas == 3, (listed, out)  # the cut would free the GPU for the tenant's pod


def _controller_reshuffle(monkeypatch, pod: dict) -> tuple[int, int]:
    """Through Operator._share_pools: the pool is GFD_NODE (3 GPUs, its inventory entry as parse_node reads the node);
    ns/low runs 3, ns/high (priority 10) wants 1; ``pod`` is the one Pending pod the cluster-wide list answers."""
    operator = _operator_with_pending(monkeypatch, [pod])
    operator.state.inventory.upsert(GFD_NODE)
    targets = {("ns", "high"): _pool_target("ns", "high", 0, priority=10),
               ("ns", "low"): _pool_target("ns", "low", 3, priority=0)}
    targets = {k: dataclasses.replace(t, pool_nodes=frozenset({"n1"}), pool_gpus=3) for k, t in targets.items()}
    operator.uncapped = {("ns", "high"): _wanting(1), ("ns", "low"): _wanting(3)}
    asyncio.run(operator._share_pools(targets))
    return (operator.state.decisions[("ns", "high")].desired_replicas,
            operator.state.decisions[("ns", "low")].desired_replicas)


def test_control_the_loop_waits_for_a_pod_requiring_a_label_the_node_keeps(monkeypatch):
    assert _controller_reshuffle(monkeypatch, _requiring("nvidia.com/gpu.product")) == (0, 3)


# Fixed (was a strict xfail): FINDING (high) the same through Operator._share_pools; fixed with it.
def test_the_loop_cuts_for_a_pod_requiring_a_label_the_inventory_drops(monkeypatch):
    assert _controller_reshuffle(monkeypatch, _requiring("nvidia.com/gfd.timestamp")) == (0, 3)


# --- (2) a claimed backend's adopted pod that no scheduler will ever judge ---------------------------------------------

RS_T0 = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t0-5d8c7f", "uid": "uid-of-t0-rs", "controller": True}
T0_LABELS = {"llmbackend.dev/backend": "t0", "app.kubernetes.io/component": "server", "pod-template-hash": "5d8c7f"}


def _tenant_claim(adopted: dict) -> Claim:
    """The tenant's backend t0 in the pool (4 GPUs): one replica runs on n1, the other is ``adopted``, as the operator
    reads them (held_replicas with its Deployment, bound_replicas)."""
    running = _pod(namespace="t", name="t0-5d8c7f-a", node="n1", phase="Running", labels=T0_LABELS, owner=RS_T0)
    pods, nodes = [running, adopted], frozenset({"n1", "n2"})
    held = held_replicas(2, pods, {"status": {"conditions": []}}, nodes, True, grouped=False, workload_made="t0")
    bound = bound_replicas(2, pods, nodes, True, False, "t0")
    return claim("t", "t0", current=2, held=held, bound=bound, wanted=2)


def _adopted(**spec) -> dict:
    pod = _pod(namespace="t", name="t0-5d8c7f-f", labels=T0_LABELS, owner=RS_T0, **spec)
    pod["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "2147483647"}
    return pod


def test_control_the_tenants_own_pending_replica_stops_another_namespaces_reshuffle():
    """Its Pending replica of the default scheduler would take the GPU a's cut frees (older): a1 waits."""
    cs = [_tenant_claim(_adopted()), *_reshuffle(pool_gpus=4)]
    out, _ = share(cs, 1000.0, unclaimed=unclaimed_waiting([], {POOL: None}, lambda pod: None))
    assert out[("a", "a1")].replicas == 0 and out[("a", "a0")].replicas == 3, out


def test_control_the_same_pod_bare_stops_nothing():
    """Pass 22's fix: a bare pod of a scheduler that does not exist is never counted."""
    bare = _pod(namespace="t", name="f", schedulerName="no-such-scheduler")
    listed = unclaimed_waiting([bare], {POOL: None}, lambda pod: None)
    out, _ = share(_reshuffle(pool_gpus=3), 1000.0, unclaimed=listed)
    assert out[("a", "a1")].replicas == 1 and out[("a", "a0")].replicas == 2, (listed, out)


# Fixed (was a strict xfail): FINDING (medium) a claimed backend's adopted pod of a scheduler that does not exist counted as a held replica waiting for GPUs for good; a Pending pod not judged yet and of another scheduler than the default is unplaceable (holding._unplaceable), so it holds nothing.
def test_a_claimed_backends_adopted_pod_of_no_scheduler_freezes_another_namespaces_reshuffle():
    cs = [_tenant_claim(_adopted(schedulerName="no-such-scheduler")), *_reshuffle(pool_gpus=4)]
    out, _ = share(cs, 1000.0, unclaimed=unclaimed_waiting([], {POOL: None}, lambda pod: None))
    assert out[("a", "a1")].replicas == 1, (cs[0], out)


# --- (3) differential: unclaimed_waiting against a per-node podfit check --------------------------------------------

KEYS = ["zone", "rack", "gpu", "spot", "num", "only-some"]
VALUES = ["a", "b", "c", "1", "5", "10", ""]


def _fuzz_node(rng: random.Random, name: str) -> GPUNode:
    labels = {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.6}
    labels["kubernetes.io/hostname"] = name
    taints = tuple(sorted({(rng.choice(["dedicated", "spot", "gpu"]), rng.choice(["", "llm", "x"]),
                            rng.choice(["NoSchedule", "NoExecute", "PreferNoSchedule"]))
                           for _ in range(rng.choice([0, 0, 1, 2]))}))
    gpus = rng.choice([1, 2, 4, 8])
    allocatable = (("cpu", rng.choice([8000, 64000])), ("memory", rng.choice([64 << 30, 512 << 30])),
                   ("nvidia.com/gpu", gpus), ("pods", rng.choice([0, 110, 110])))
    return GPUNode(name=name, gpu_count=gpus, product="NVIDIA-H100-80GB-HBM3", memory_bytes=80 << 30,
                   family="hopper", compute_capability=(9, 0), clique=None, nvlink_domains=(tuple(range(gpus)),),
                   topology_source="inferred", schedulable=not taints, taints=taints,
                   labels=tuple(sorted(labels.items())), cordoned=rng.random() < 0.15, allocatable=allocatable)


def _fuzz_expression(rng: random.Random) -> dict:
    op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"])
    expr = {"key": rng.choice(KEYS), "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = rng.sample(VALUES, rng.randint(0, 2))
    elif op in ("Gt", "Lt"):
        expr["values"] = [rng.choice(["1", "5", "x", "7"])]
    elif rng.random() < 0.2:
        expr["values"] = ["a"]  # invalid for Exists: the term matches nothing
    return expr


def _fuzz_pod(rng: random.Random, i: int, names: list[str]) -> dict:
    spec: dict = {}
    if rng.random() < 0.5:
        spec["nodeSelector"] = {k: rng.choice(VALUES) for k in rng.sample(KEYS, rng.randint(1, 2))}
    if rng.random() < 0.6:
        terms = []
        for _ in range(rng.randint(1, 2)):
            term: dict = {}
            if rng.random() < 0.8:
                term["matchExpressions"] = [_fuzz_expression(rng) for _ in range(rng.randint(1, 2))]
            if rng.random() < 0.3:
                term["matchFields"] = [{"key": "metadata.name", "operator": rng.choice(["In", "NotIn"]),
                                        "values": [rng.choice(names)]}]
            terms.append(term)
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    if rng.random() < 0.5:
        spec["tolerations"] = [rng.choice([
            {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"},
            {"operator": "Exists"},
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "gpu", "operator": "Equal", "value": "x"}]) for _ in range(rng.randint(1, 2))]
    pod = _pod(namespace=f"p{i}", name=f"p{i}", gpus=rng.choice([1, 2, 4, 8]), **spec)
    if rng.random() < 0.3:
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": rng.choice(["1", "32"]),
                                                                  "memory": rng.choice(["1Gi", "256Gi"])}
    return pod


def test_unclaimed_waiting_agrees_with_a_per_node_podfit_check_on_fuzzed_nodes_and_pods():
    rng = random.Random(2301)
    for trial in range(8):
        pools = {(f"P{p}",): [_fuzz_node(rng, f"n{p}-{i}") for i in range(rng.randint(1, 6))] for p in range(3)}
        names = [n.name for nodes in pools.values() for n in nodes] + ["elsewhere"]
        pods = [_fuzz_pod(rng, i, names) for i in range(150)]
        pods += [dict(p) for p in rng.sample(pods, 20)]  # shapes seen twice: the cache answers
        listed = unclaimed_waiting(pods, pools, lambda pod: None)
        for pool, nodes in pools.items():
            expected = sorted(p["metadata"]["namespace"] for p in pods
                              if any(not failures(p["spec"], pod_requests(p["spec"]), n) for n in nodes))
            got = sorted(w.namespace for w in listed[pool])
            assert got == expected, (trial, pool, set(got) ^ set(expected))


# --- (4) a claim the pool cannot read --------------------------------------------------------------------------------


def _fuzz_pool(rng: random.Random, tenant_unread_ok: bool = True) -> tuple[list[Claim], int]:
    pool = rng.choice([3, 4, 6, 8])
    cs, used = [], 0
    for i in range(rng.randint(2, 6)):
        g = rng.choice([1, 1, 2])
        cur = rng.randint(0, 3)
        bound = min(cur, max(0, (pool - used) // g))
        used += bound * g
        minimum = rng.choice([0, 0, 1, cur])
        ns = rng.choice("tabc") if i else "t"
        cs.append(claim(ns, f"{ns}{i}", pool_gpus=pool, priority=rng.choice([0, 1, 5]), current=cur, held=cur,
                        bound=bound, wanted=max(cur, minimum) + rng.randint(0, 2), min_replicas=minimum,
                        gpus_per_replica=g, class_priority=rng.choice([None, None, 5])))
    return cs, pool


def _unread_tenant(c: Claim) -> Claim:
    return dataclasses.replace(c, bound=None) if c.namespace == "t" else c


def _gpus_of(claims: list[Claim], running: dict, namespace: str) -> int:
    return sum(running[c.key] * c.gpus_per_replica for c in claims if c.namespace == namespace)


def test_a_tenant_gains_nothing_from_other_namespaces_by_making_its_claims_unread():
    """Default mode, one sync from the same pods: with the tenant's pod lists failing (its claims unread) it runs more
    GPUs after the scheduler than with them read only where no other namespace's claim runs fewer (GPUs a bare pod
    would have got as a class taker's leftover)."""
    rng = random.Random(2302)
    for trial in range(400):
        cs, _ = _fuzz_pool(rng)
        unseen = [("bare", 1, 0, rng.randint(0, 2))]
        listed = _unclaimed(cs, unseen)
        read, _ = share(cs, 1000.0, None, False, listed)
        unread, _ = share([_unread_tenant(c) for c in cs], 1000.0, None, False, listed)
        run_read, run_unread = _scheduled(cs, read, unseen), _scheduled(cs, unread, unseen)
        gain = _gpus_of(cs, run_unread, "t") - _gpus_of(cs, run_read, "t")
        lost = sum(max(0, _gpus_of(cs, run_read, ns) - _gpus_of(cs, run_unread, ns)) for ns in "abc")
        assert gain <= 0 or lost == 0, (trial, cs, read, unread)


def _higher_priority_beside_the_tenant() -> list[Claim]:
    """Across namespaces, pool 4: the tenant's t (priority 0) runs 4, b (priority 5, same pod priority 0) wants 1."""
    return [claim("t", "t", current=4, held=4, bound=4, wanted=4), claim("b", "b", priority=5, wanted=1)]


def test_across_control_with_the_tenants_pods_read_the_higher_priority_runs():
    *_, (claims, out, running, _) = _runs(_higher_priority_beside_the_tenant(), across=True, syncs=4)
    assert running[("b", "b")] == 1 and running[("t", "t")] == 3, (out, running)


# Fixed (was a strict xfail): FINDING (low) older_waiting counted an unread victim's own replicas as its namespace's older waiting pods, so it was never cut; they are left out of that count.
def test_across_a_tenant_whose_running_claim_is_unread_is_never_cut_by_a_higher_priority():
    def seen(c: Claim) -> Claim:
        return dataclasses.replace(c, bound=None) if c.namespace == "t" else c

    *_, (claims, out, running, _) = _runs(_higher_priority_beside_the_tenant(), across=True, syncs=4, seen=seen)
    assert running[("b", "b")] == 1 and running[("t", "t")] == 3, (out, running)


def test_fuzz_unread_tenant_claims_and_bare_pods_keep_floors_settle_and_feed_no_bare_pod():
    """300 pools (both modes): the tenant's claims unread every sync, bare Pending pods of a third namespace. Over 5
    syncs: no backend below min(current, minReplicas) unless preempted, the bare pods gain no GPUs beyond those free
    before the sync or the scheduler's own preemption left, except where a class taker cut (pass 22's rule), and the
    last two syncs' shares are equal."""
    rng = random.Random(2303)
    for trial in range(300):
        across = trial % 2 == 0
        cs, pool = _fuzz_pool(rng)
        unseen = [(f"bare{j}", rng.choice([1, 2]), 0, rng.randint(1, 2)) for j in range(rng.randint(1, 2))]
        shares = []
        for claims, out, running, before in _runs(cs, across, syncs=5, unseen=unseen, seen=_unread_tenant):
            free_before = pool - sum(before[c.key] * c.gpus_per_replica for c in claims) - sum(
                before[("unseen", n)] * g for n, g, _, _ in unseen)
            gained = sum((running[("unseen", n)] - before[("unseen", n)]) * g for n, g, _, _ in unseen)
            preempted = sum(max(0, min(before[c.key], out[c.key].replicas) - running[c.key]) * c.gpus_per_replica
                            for c in claims)
            if gained > max(0, free_before) + preempted:
                takers = [c for c in claims if out[c.key].took]
                assert takers and all(c.scheduling_priority > 0 for c in takers), (
                    trial, across, claims, out, running, before)
            for v in claims:
                s = out[v.key]
                assert s.replicas >= min(v.current, v.min_replicas) or s.preempted_by, (trial, v, out)
            shares.append({k: s.replicas for k, s in out.items()})
        assert shares[-1] == shares[-2], (trial, across, shares)


# --- (5) step 2: a higher class's waiting replica and a third namespace's bare pod -------------------------------------


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_step_2_cuts_for_a_higher_class_waiting_replica_and_the_bare_pod_gets_nothing(across):
    """Pool 3: b0 runs 2 (b's floor-less low), c (class 5) runs 1 and waits 1; a bare 1-GPU pod of t waits (priority
    0). The kube-scheduler preempts b0 for c's pod anyway: the cut serves c, never the bare pod."""
    cs = [claim("b", "b0", pool_gpus=3, current=2, held=2, bound=2, wanted=2),
          claim("c", "c", pool_gpus=3, class_priority=5, current=2, held=2, bound=1, wanted=2, min_replicas=1)]
    for _, out, running, _ in _runs(cs, across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("unseen", "t")] == 0, (out, running)
    assert running[("c", "c")] == 2 and running[("b", "b0")] == 1, (out, running)


# --- (6) cost ------------------------------------------------------------------------------------------------------------


def _cpu(claims: list[Claim], unclaimed=None) -> float:
    return quiet_cpu_s(lambda: share(claims, 1000.0, unclaimed=unclaimed))


def _big_pool(n: int) -> list[Claim]:
    """n backends of 8 namespaces in a pool of n GPUs, each holding 2 of which 1 runs (overcommitted: step 2 looks at
    all), a few of a class wanting more."""
    return [claim(f"ns{i % 8}", f"b{i}", pool_gpus=n, priority=i % 7, current=2, held=2, bound=1,
                  wanted=2 + (i % 5 == 0), class_priority=5 if i % 11 == 0 else None) for i in range(n)]


def test_cost_of_a_pass_with_unread_claims_and_many_unclaimed_pods_stays_near_the_all_read_pass():
    claims = _big_pool(800)
    read = _cpu(claims)
    unread = _cpu([dataclasses.replace(c, bound=None) if i % 2 else c for i, c in enumerate(claims)])
    many = _cpu(claims, {POOL: [Unclaimed(f"t{i % 50}", i % 3, 1) for i in range(2000)]})
    assert unread <= 4 * read + 0.05, (read, unread)
    assert many <= 4 * read + 0.05, (read, many)
