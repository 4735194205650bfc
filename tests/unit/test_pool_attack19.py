"""Nineteenth attacker pass on the GPU pool (autoscaling/pool.py, holding.py), as a tenant who may edit LLMBackends in
its own namespace, create pods there (any labels, nodeName, requests, scheduling gates, ownerReferences, a controller
one included) and use some PriorityClasses. Aimed at e331732 and the three before it: ``holding._replica_pods``'s
``workload_made`` (a controller ownerReference to a ReplicaSet or StatefulSet) as controller/run.py passes it, the
pool's ``_held`` (max(held, bound)), step 2's new "none of its outrankers waits" condition and ``absorbed_by``, step
3's ``cuttable_in``/``older_waiting`` skip, and CPU. Shares are fed back sync after sync through test_pool_bound.py's
model of the kube-scheduler (pass 18's driver).

Summary: four findings (two root causes). High x2 (one root cause): ``workload_made`` asks only that some controller ownerReference
has kind ReplicaSet or StatefulSet - not its apiVersion, name or uid, nor that it is the backend's own workload. A
tenant writes ``{apiVersion: example.invalid/v1, kind: ReplicaSet, name: x, uid: x, controller: true}``: the
ReplicaSet and StatefulSet controllers ignore it (their resolveControllerRef looks the owner up by name and checks the
uid: none, so neither counts nor releases the pod) and the garbage collector never deletes it (an owner whose type
has no REST mapping is re-checked for good, never found absent). Pass 18's two high findings come back through it: a
gated pod that requests a GPU makes a Deployment backend's Pending replica read as unplaceable, so another namespace's
reshuffle goes ahead and the tenant's older Pending pod takes the GPU it frees (A 3 -> 2 GPUs, the tenant 0 -> 1,
for good); and
a gated pod with a multi-node backend's group-index label makes each running group read as neither held nor bound
(``_held``'s max(held, bound) does not help: both drop), so across namespaces a higher priority is granted GPUs that
are not free and never runs (0 of 1, the tenant keeps 4 of 4 for good). High (no forgery, not across namespaces): step
2's new condition cuts a namespace's own lower backend for its higher one whose replica waits, while a third
namespace's older Pending pods of the same pod priority wait too: FIFO gives them the freed GPU first (step 3's
``contested`` rule has no counterpart in step 2): A 2 -> 1 GPUs, the tenant 0 -> 1, for good. High (across, older
than e331732, the same gap): a tenant's Pending pod at its minReplicas (lowest priority, so step 2 may not cut it)
counts in the deficit, step 2 cuts a third namespace for it too and FIFO hands the tenant the GPU (a 2 -> 0, t 0 -> 1). Sound: honest pods read
as they run, floors, names, no churn over 300 pools, linear CPU for many takers passing over absorbed victims and for
a long step 2.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding."""

from __future__ import annotations

import dataclasses
import random

import pytest
from cpu_probe import quiet_cpu_s
from pool_scheduler import claim
from pool_scheduler import scheduled as _scheduled

from llmbackend.autoscaling.holding import LWS_SIZE_ANNOTATION, bound_replicas, held_replicas
from llmbackend.autoscaling.pool import HOLD_S, Claim, Share, outranks, share
from llmbackend.render.multinode import GROUP_INDEX_LABEL

POOL_NODES = frozenset({"gpu-node-1", "gpu-node-2"})
LABELS = {"llmbackend.dev/backend": "t", "app.kubernetes.io/component": "server", "pod-template-hash": "5d8c7f"}
# what the ReplicaSet and StatefulSet controllers make (apps/v1, their own uid)
OWNED_RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t-5d8c7f", "uid": "rs-uid", "controller": True}
OWNED_STS = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "t-0", "uid": "sts-uid", "controller": True}
# what a tenant writes: a kind the check accepts, an owner no controller resolves (resolveControllerRef: by name, then
# uid) and whose type the garbage collector cannot map (it waits for the type to exist, never deletes the pod)
FORGED_RS = {"apiVersion": "example.invalid/v1", "kind": "ReplicaSet", "name": "x", "uid": "x", "controller": True}
FORGED_STS = {**FORGED_RS, "kind": "StatefulSet"}
GATE = [{"name": "example.com/never"}]


def _cpu(fn, runs: int = 3) -> float:
    return quiet_cpu_s(fn, runs)


def _runs(claims: list[Claim], across: bool = False, syncs: int = 5, seen=None, step: float = 30.0):
    """Each sync: the shares of the claims as the operator reads them (``seen(claim)``: the claim with the held and
    bound its pods say; by default what really runs), then the pods the scheduler runs. Yields (claims, shares,
    running)."""
    state, now = None, 1000.0
    for _ in range(syncs):
        out, state = share([seen(c) if seen else c for c in claims], now, state, across)
        running = _scheduled(claims, out)
        yield claims, out, running
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas,
                                      bound=running[c.key]) for c in claims]
        now += step


def _gpus(claims: list[Claim], running: dict, namespace: str) -> int:
    return sum(running[c.key] * c.gpus_per_replica for c in claims if c.namespace == namespace)


def _pod(name: str, node: str | None = None, gpus: int = 1, waits_for_gpus: bool = False, owner: dict | None = None,
         labels: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    """A pod as the evaluation lists it (by the backend's labels). ``owner``: its controller ownerReference (the
    ReplicaSet's by default)."""
    status: dict = {"phase": "Running" if node else "Pending"}
    if waits_for_gpus:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 "
                                            "nodes are available: 2 No preemption victims found for incoming pod."}]
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"metadata": {"name": name, "labels": {**LABELS, **(labels or {})}, "annotations": dict(annotations or {}),
                         "ownerReferences": [owner or OWNED_RS]},
            "spec": {**({"nodeName": node} if node else {}), "containers": [{"name": "c", "resources": resources}],
                     **spec},
            "status": status}


def _read(current: int, pods: list[dict]) -> tuple[int | None, int]:
    """held and bound of a 1-GPU Deployment backend as controller/run.py reads them (``_held``: held_replicas with
    its Deployment, needs_gpus, grouped=False, workload_made; bound_replicas likewise)."""
    return (held_replicas(current, pods, {"status": {}}, POOL_NODES, True, grouped=False, workload_made="t"),
            bound_replicas(current, pods, POOL_NODES, True, False, workload_made="t"))


def _read_groups(current: int, pods: list[dict]) -> tuple[int | None, int]:
    """held and bound of a multi-node backend as controller/run.py reads them (``_held``: held_replicas without a
    Deployment, grouped, needs_gpus, workload_made; bound_replicas grouped)."""
    return (held_replicas(current, pods, None, POOL_NODES, True, workload_made="t"),
            bound_replicas(current, pods, POOL_NODES, True, True, workload_made="t"))


def _group(g: int, node: str) -> list[dict]:
    """Group g of a 2-node multi-node backend (1 GPU a pod: 2 GPUs a replica), both pods running, as LWS makes them:
    the leader (StatefulSet t) and its worker (StatefulSet t-g)."""
    meta = dict(labels={GROUP_INDEX_LABEL: str(g), "leaderworkerset.sigs.k8s.io/name": "t"},
                annotations={LWS_SIZE_ANNOTATION: "2"})
    return [_pod(f"t-{g}", node=node, owner={**OWNED_STS, "name": "t"}, **meta),
            _pod(f"t-{g}-1", node=node, owner={**OWNED_STS, "name": f"t-{g}", "uid": f"sts-{g}"}, **meta)]


# --- (1) a forged controller ownerReference: a Deployment backend's Pending replica hidden -------------------------


def test_control_honest_pods_read_as_they_run():
    running = [_pod(f"t-5d8c7f-{i}", node="gpu-node-1") for i in range(4)]
    assert _read(4, running) == (4, 4)
    pending = running[:3] + [_pod("t-5d8c7f-3", waits_for_gpus=True)]
    assert _read(4, pending) == (4, 3)
    assert _read_groups(2, _group(0, "gpu-node-1") + _group(1, "gpu-node-2")) == (2, 2)
    # a bare decoy (pass 18's) still counts for nothing
    bare = dict(owner={"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x", "controller": True})
    assert _read(1, [_pod("t-5d8c7f-0", waits_for_gpus=True), _pod("decoy", schedulingGates=GATE, **bare)]) == (1, 0)


def _pending_beside_a_forged_gated_pod() -> tuple[int | None, int]:
    """t's one replica waits for GPUs (Pending, made by its ReplicaSet); beside it the tenant's own pod with t's
    labels, 1 GPU requested, held back by a scheduling gate (it never runs, costs no GPU), and a controller
    ownerReference of kind ReplicaSet that no controller resolves."""
    return _read(1, [_pod("t-5d8c7f-x2kq9", waits_for_gpus=True),
                     _pod("decoy", owner=FORGED_RS, schedulingGates=GATE)])


def test_control_a_pending_replica_stops_another_namespaces_reshuffle():
    """Control (pass 14's rule, step 3's ``contested``): pool 3, A's a0 runs 3; the tenant's t waits with 1 Pending
    pod (older; minReplicas 1). a1 (A, priority 5) wants 1: A keeps its 3 GPUs, t runs nothing of A's."""
    a0 = claim("a", "a0", pool_gpus=3, current=3, held=3, wanted=3, bound=3)
    a1 = claim("a", "a1", pool_gpus=3, priority=5, wanted=1)
    t = claim("t", "t", pool_gpus=3, current=1, held=1, wanted=1, min_replicas=1, bound=0)
    for claims, out, running in _runs([t, a0, a1]):
        assert _gpus(claims, running, "a") == 3 and running[t.key] == 0, (out, running)


# Fixed (was a strict xfail): FINDING (high) a controller ownerReference of kind ReplicaSet and an apiVersion nothing resolves (never garbage-collected) made a tenant's gated pod count and hid its Pending replica; a pod counts only with an apps/v1 controller reference named as the backend's own workload names its ReplicaSet or StatefulSets (holding.made_by).
def test_a_forged_owner_reference_hides_a_pending_replica_and_takes_another_namespaces_gpu():
    held, bound = _pending_beside_a_forged_gated_pod()  # as the operator reads it (was (0, 0); honest (1, 0))
    a0 = claim("a", "a0", pool_gpus=3, current=3, held=3, wanted=3, bound=3)
    a1 = claim("a", "a1", pool_gpus=3, priority=5, wanted=1)
    t = claim("t", "t", pool_gpus=3, current=1, held=1, wanted=1, min_replicas=1, bound=0)

    def seen(x: Claim) -> Claim:  # the decoy stays: t's replicas read as many fewer held as the decoy hides
        return dataclasses.replace(x, held=max(0, (x.held or 0) - (1 - held))) if x.name == "t" else x

    for claims, out, running in _runs([t, a0, a1], seen=seen):
        assert _gpus(claims, running, "a") == 3 and running[t.key] == 0, (out, running)


# --- (2) a forged controller ownerReference: a multi-node backend's running groups hidden --------------------------


def _groups_beside_forged_gated_pods() -> tuple[int | None, int]:
    """t runs 2 groups (4 GPUs); the tenant adds to each group one pod of its own with the group-index label, 1 GPU
    requested, a scheduling gate and a forged StatefulSet controller reference."""
    pods = _group(0, "gpu-node-1") + _group(1, "gpu-node-2")
    pods += [_pod(f"decoy-{g}", owner=FORGED_STS, labels={GROUP_INDEX_LABEL: str(g)}, schedulingGates=GATE)
             for g in range(2)]
    return _read_groups(2, pods)


def test_across_control_a_higher_priority_takes_a_group_from_a_lower_tenant():
    """Control: pool 4, the tenant's multi-node t (priority 1, 2 GPUs a group) runs 2 groups; c (another namespace,
    priority 5) wants 1 group: across namespaces it takes one, both run."""
    c = claim("a", "c", priority=5, wanted=1, gpus_per_replica=2)
    t = claim("t", "t", priority=1, current=2, held=2, wanted=2, bound=2, gpus_per_replica=2)
    *_, (_, out, running) = _runs([c, t], across=True)
    assert running[c.key] == 1 and running[t.key] == 1, (out, running)


# Fixed (was a strict xfail): FINDING (high, across namespaces) the same forgery on a multi-node backend's group pods; fixed with it.
def test_across_forged_group_members_hide_running_groups_from_a_higher_priority():
    held, bound = _groups_beside_forged_gated_pods()  # as the operator reads it (was (0, 0); honest (2, 2))
    c = claim("a", "c", priority=5, wanted=1, gpus_per_replica=2)
    t = claim("t", "t", priority=1, current=2, held=2, wanted=2, bound=2, gpus_per_replica=2)

    def seen(x: Claim) -> Claim:  # the decoys stay: t's groups read as the operator reads them
        return dataclasses.replace(x, held=held, bound=bound) if x.name == "t" else x

    *_, (_, out, running) = _runs([c, t], across=True, seen=seen)
    assert running[c.key] == 1 and running[t.key] <= 1, (out, running)


# --- (3) step 2's new condition and a third namespace's older Pending pods ----------------------------------------


def _reshuffle(pool_gpus: int = 4) -> list[Claim]:
    """Pool 4, one pod priority, priorities compared inside a namespace only. The tenant's t waits with one Pending
    pod (its oldest), B's b runs 2, A's a_lo (priority 0) runs 2 and A's a_hi (priority 5) has one replica whose pod
    a rollout recreated: it waits, newer than t's. The pool is overcommitted (5 held, 4 GPUs): step 2."""
    return [claim("t", "t", pool_gpus=pool_gpus, current=1, held=1, wanted=1, min_replicas=1, bound=0),
            claim("b", "b", pool_gpus=pool_gpus, current=2, held=2, wanted=2, bound=2),
            claim("a", "a_lo", pool_gpus=pool_gpus, current=2, held=2, wanted=2, bound=2),
            claim("a", "a_hi", pool_gpus=pool_gpus, priority=5, current=1, held=1, wanted=1, min_replicas=1, bound=0)]


def test_control_step_2_cuts_for_a_waiting_outranker_with_no_third_namespace_waiting():
    """Control (pass 18's fix): as above without the tenant's Pending pod (pool 4: B 2, a_lo 2, a_hi waiting 1): A
    gives a_lo's replica to a_hi, A keeps its 2 GPUs."""
    claims = _reshuffle()[1:]
    *_, (last, out, running) = _runs(claims)
    assert running[("a", "a_hi")] == 1 and _gpus(last, running, "a") == 2, (out, running)


# Fixed (was a strict xfail): FINDING (high, a regression of e331732) step 2 cut a namespace for its waiting backend while a tenant's older Pending pod of that pod priority took the GPU; step 2 skips a cut while a third namespace's pods of the taker's pod priority wait (contested), as step 3 does.
def test_step_2_cuts_a_namespace_for_its_waiting_backend_while_a_tenants_older_pod_takes_the_gpu():
    *_, (last, out, running) = _runs(_reshuffle())
    assert _gpus(last, running, "a") == 2 and running[("t", "t")] == 0, (out, running)


# Fixed (was a strict xfail): FINDING (high, across namespaces) the same root across namespaces (a tenant's pod at its floor); fixed with it.
def test_across_step_2_cuts_a_third_namespace_while_a_tenants_pod_at_its_floor_takes_the_gpu():
    t = claim("t", "t", priority=-1, current=1, held=1, bound=0, wanted=1, min_replicas=1)
    a = claim("a", "a", current=2, held=2, bound=2, wanted=2)
    b = claim("b", "b", priority=5, current=3, held=3, bound=2, wanted=3)
    for _, out, running in _runs([t, a, b], across=True):
        assert running[t.key] == 0, (out, running)


# --- (4) what holds -----------------------------------------------------------------------------------------------


def test_across_a_waiting_outranker_in_step_2_takes_its_gpu_back_when_no_third_namespace_waits():
    """Across namespaces, the tenant's older Pending pod is of a lower priority: step 2 cuts the tenant's own
    Pending replica first (it frees nothing, and the ReplicaSet deletes it), then a lower running one; the waiting
    higher backend runs and the tenant gains nothing."""
    claims = [claim("t", "t", priority=-1, current=1, held=1, wanted=1, bound=0),
              claim("b", "b", priority=3, current=2, held=2, wanted=2, bound=2),
              claim("a", "a_lo", current=2, held=2, wanted=2, bound=2),
              claim("a", "a_hi", priority=5, current=1, held=1, wanted=1, min_replicas=1, bound=0)]
    *_, (last, out, running) = _runs(claims, across=True)
    assert running[("a", "a_hi")] == 1 and running[("t", "t")] == 0, (out, running)


def _fuzzed(rng: random.Random) -> list[Claim]:
    pool = rng.choice([4, 6, 8])
    cs, used = [], 0
    for i in range(rng.randint(2, 6)):
        g = rng.choice([1, 1, 2])
        cur = rng.randint(0, 3)
        bound = min(rng.randint(0, cur), (pool - used) // g)  # what runs fits the pool; the rest waits
        used += bound * g
        minimum = rng.choice([0, 0, 1, cur])
        ns = rng.choice("abcd")
        cs.append(claim(ns, f"secret-{ns}{i}", pool_gpus=pool, priority=rng.choice([0, 1, 5, 10**9]), current=cur,
                        held=cur, bound=bound, wanted=max(minimum, cur + rng.randint(-1, 2)), min_replicas=minimum,
                        gpus_per_replica=g, class_priority=rng.choice([None, None, 5])))
    return cs


def test_pending_pods_anywhere_settle_and_keep_floors_and_names():
    """300 pools (both modes) with Pending pods in any namespace and a priority of 10**9 among them, fed through the
    scheduler model 12 syncs HOLD_S / 4 apart: no share moves after the 8th sync; no backend is cut below
    min(current, minReplicas) unless preempted, a cut backend is outranked by some backend of the pool, and no status
    names another namespace's backend."""
    rng = random.Random(1901)
    for trial in range(300):
        across = trial % 2 == 0
        history = list(_runs(_fuzzed(rng), across, 12, step=HOLD_S / 4 + 1))
        shares = [{k: s.replicas for k, s in out.items()} for _, out, _ in history]
        assert all(s == shares[8] for s in shares[8:]), (across, history[0][0], shares[7:])
        for b_claims, out, _ in history[:3]:
            for v in b_claims:
                s = out[v.key]
                if s.replicas < min(v.current, v.wanted):
                    assert any(outranks(o, v, across) for o in b_claims), (across, v, b_claims, out)
                assert s.replicas >= min(v.current, v.min_replicas) or s.preempted_by, (v, out)
                for text in (s.preempted_by, s.waiting_for_capacity, s.took):
                    for o in b_claims:
                        if o.namespace != v.namespace:
                            assert o.name not in (text or ""), (v, text)


def test_share_never_raises_on_odd_claims():
    """share() takes what a tenant may write (negative and huge priorities, minReplicas above wanted, 0-GPU and huge
    replicas, bound above current, held negative) without raising."""
    rng = random.Random(1902)
    for _ in range(300):
        cs = []
        for i in range(rng.randint(1, 6)):
            cur = rng.randint(0, 5)
            cs.append(claim(rng.choice("ab"), f"x{i}", pool_gpus=rng.choice([0, 1, 4]),
                            priority=rng.choice([-(2**63), 0, 2**63]), current=cur, held=rng.choice([None, -1, cur]),
                            bound=rng.choice([None, 0, cur + 3]), wanted=rng.randint(0, 6),
                            min_replicas=rng.randint(0, 7), gpus_per_replica=rng.choice([0, 1, 3, 10**6]),
                            class_priority=rng.choice([None, -5, 5])))
        for across in (False, True):
            out, state = share(cs, 1000.0, None, across)
            share(cs, 1030.0, state, across)
            assert set(out) == {c.key for c in cs}


def _passing_over(n: int) -> list[Claim]:
    """n takers of n namespaces (across: n tiers), each facing a victim namespace whose older waiting pods would
    absorb all it could cut there (``cuttable_in``), n victims deep: each taker passes over PASS_OVER of them."""
    cs = [claim("v", f"r{i:05d}", pool_gpus=2 * n, current=1, held=1, wanted=1, bound=1) for i in range(n)]
    cs += [claim("v", f"w{i:05d}", pool_gpus=2 * n, current=1, held=1, wanted=1, min_replicas=1, bound=0, priority=3)
           for i in range(n)]
    cs += [claim(f"a{i}", "a", pool_gpus=2 * n, priority=10 + i, wanted=2) for i in range(n)]
    return cs


def _long_step_2(n: int) -> list[Claim]:
    """An overcommitted pool (every holder of one namespace waits) with n namespaces of running lower backends above
    their floors: step 2 cuts n times."""
    cs = [claim(f"v{i}", "r", pool_gpus=2 * n, current=2, held=2, wanted=2, bound=2) for i in range(n)]
    cs += [claim("h", f"h{i:05d}", pool_gpus=2 * n, priority=9, current=1, held=1, wanted=1, min_replicas=1, bound=0)
           for i in range(n)]
    return cs


@pytest.mark.parametrize("build", [_passing_over, _long_step_2])
def test_cpu_stays_linear(build):
    """4x the claims, about 4x the CPU (least of 3 runs), both modes."""
    for across in (False, True):
        small, big = build(200), build(800)
        t_small = _cpu(lambda: share(small, 1000.0, None, across))  # noqa: B023
        t_big = _cpu(lambda: share(big, 1000.0, None, across))  # noqa: B023
        assert t_big < 8 * t_small + 0.05, (build.__name__, across, t_small, t_big)
        assert isinstance(next(iter(share(small, 1000.0, None, across)[0].values())), Share)
