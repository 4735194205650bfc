"""Twenty-second attacker pass on the GPU pool (autoscaling/pool.py ``share``/``third_waits``/``older_waiting``,
holding.py ``unclaimed_waiting``/``made_by``, controller/run.py ``_share_pools``/``_unclaimed_waiting``), as a tenant
who may edit LLMBackends in its own namespace and create, patch and delete pods there (labels, annotations,
ownerReferences, nodeSelector, requests, schedulerName, schedulingGates, classes it may use). Aimed at 326018b: each
pass of a shared pool lists every namespace's unscheduled pods once and ``share()`` makes no cut for a taker while
Pending GPU pods no claim covers, of its pod priority or above, wait in a third namespace. Shares are fed back sync
after sync through the kube-scheduler model of tests/unit/pool_scheduler.py; the controller is driven through
``Operator._share_pools`` with ``kube.list`` answered by the test.

Summary: five findings.
High (theft, both modes): ``_unclaimed_waiting`` treats a pod as covered when it is ``made_by`` any claimed backend
of any shared pool, but a claim counts its pods for its own pool only. A tenant's Pending pod whose controller is its
backend t0's ReplicaSet (an orphan with t0's labels that the ReplicaSet adopts; a pod-deletion-cost annotation makes
the ReplicaSet delete t0's own Pending pod instead of it) that asks for another pool's GPUs is counted by nobody
there: another namespace's own reshuffle in that pool goes ahead (7/1 instead of 2/6) and the tenant's older pod takes
the GPU it frees - pass 21's finding back through a real controller reference.
High (theft, both modes, no forgery): step 2 asks ``third_waits``/``contested`` about its nominal taker (the highest
holder that outranks the cut), not the pods that wait for what the cut frees: with any PriorityClass backend holding
GPUs in the pool, step 2 cuts namespace b's running replica for b's own waiting sibling and the tenant's older bare
pod (priority 0) takes the GPU (found by this pass's fuzz, its only exception in 300 pools).
Medium (denial): a Pending pod with a ``schedulerName`` no scheduler serves is never judged, so it counts ("one not
judged yet counts") for good: one such 1-GPU pod freezes every other namespace's reshuffle in every pool it fits,
and it can never run - the very case 326018b says no longer freezes anyone.
Medium (cost): ``unclaimed_waiting`` runs on the event loop and judges every pod of a distinct shape against every
node of every shared pool: 400 never-judged pods of distinct requests cost ~11x more CPU with 32 pools of 8 nodes than
with one (~0.5 s a pass here, ~1.2 s per 1,000 pods; the pass runs every second); needs no GPU quota in the tenant's
namespace.
Low (denial amplification): one 1-GPU pod that fits several pools stops the reshuffles of all of them, where the
scheduler would let it take one GPU and the other pools reshuffle.
Sound: a visible bare pod of the default scheduler (control), an orphan not yet adopted, and step 2 with no class
holder stop the cut; status never names the namespace of a Pending pod no claim covers; a fuzz of 300 pools (both
modes) with such pods through the scheduler model: outside step 2 they never run on GPUs a cut for a taker of their
pod priority freed, floors hold and the shares settle. Not probed: a forged controller reference to a backend's own
ReplicaSet in its own pool (the garbage collector deletes it, or the ReplicaSet counts it as one of its pods).

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
from test_pool_unclaimed import _node, _operator_with_pending, _pod

from llmbackend.autoscaling.holding import unclaimed_waiting
from llmbackend.autoscaling.pool import Claim, Unclaimed, share
from llmbackend.planning.inventory import GPUNode

RS_T0 = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t0-5d8c7f", "uid": "uid-of-t0-rs", "controller": True}
T0_LABELS = {"llmbackend.dev/backend": "t0", "app.kubernetes.io/component": "server", "pod-template-hash": "5d8c7f"}


def _runs(claims: list[Claim], across: bool = False, syncs: int = 5, step: float = 30.0, unseen=()):
    """Pass 21's driver: each sync the shares (with the unseen backends' waiting pods as the operator lists them),
    then what the scheduler runs; the next sync's claims are the shares and what ran. Yields (claims, shares,
    running, running before the sync)."""
    state, now = None, 1000.0
    unseen = list(unseen)
    before = {c.key: c.bound or 0 for c in claims} | {("unseen", n): r for n, _, r, _ in unseen}
    for _ in range(syncs):
        out, state = share(claims, now, state, across, _unclaimed(claims, unseen))
        running = _scheduled(claims, out, unseen)
        yield claims, out, running, before
        before = dict(running)
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas,
                                      bound=running[c.key]) for c in claims]
        unseen = [(n, g, running[("unseen", n)], r + w - running[("unseen", n)]) for n, g, r, w in unseen]
        now += step


def _reshuffle(operator, extra: dict | None = None) -> tuple[int, int]:
    """Namespace ns's own reshuffle in pool H100/abc (8 GPUs): high (priority 10) runs 2 and wants 8, low runs 6:
    with nothing else waiting it becomes 7/1; a Pending pod no claim covers in a third namespace keeps it at 2/6."""
    targets = {("ns", "high"): _pool_target("ns", "high", 2, priority=10),
               ("ns", "low"): _pool_target("ns", "low", 6, priority=0), **(extra or {})}
    operator.uncapped = {("ns", "high"): _wanting(8), ("ns", "low"): _wanting(6)}
    asyncio.run(operator._share_pools(targets))
    return (operator.state.decisions[("ns", "high")].desired_replicas,
            operator.state.decisions[("ns", "low")].desired_replicas)


# --- (1) a pod whose controller is a claimed backend of ANOTHER pool -------------------------------------------------


def _tenant_pool() -> dict:
    """The tenant's two backends t0 and t1 in another pool (A100/xyz: shared, so t0 is a claimed backend)."""
    t0, t1 = _pool_target("t", "t0", 1), _pool_target("t", "t1", 0)
    for target in (t0, t1):
        target.pool = "A100/xyz"
    return {("t", "t0"): t0, ("t", "t1"): t1}


def _for_h100(owner: dict | None) -> dict:
    """The tenant's Pending 1-GPU pod for the H100 pool, with t0's labels (and, once its ReplicaSet adopted it, t0's
    ReplicaSet as controller)."""
    pod = _pod(namespace="t", name="t0-5d8c7f-x", labels=T0_LABELS, owner=owner,
               nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    pod["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "2147483647"}
    return pod


def test_control_an_orphan_with_another_pools_backend_labels_stops_the_reshuffle(monkeypatch):
    """Before its ReplicaSet adopts it the pod is no claimed backend's: it counts, and ns waits (2/6)."""
    operator = _operator_with_pending(monkeypatch, [_for_h100(owner=None)])
    assert _reshuffle(operator, _tenant_pool()) == (2, 6)


# Fixed (was a strict xfail): FINDING (high, both modes) a pod made by a claimed backend counted as covered in every pool, though its claim counts it in its own pool only; unclaimed_waiting now takes the pool whose claim counts a pod (claimed_in) and lists it in every other pool it fits.
def test_a_pod_its_other_pools_replicaset_adopted_takes_the_gpu_of_the_reshuffle(monkeypatch):
    operator = _operator_with_pending(monkeypatch, [_for_h100(owner=RS_T0)])
    assert _reshuffle(operator, _tenant_pool()) == (2, 6)


# --- (2) a pod no scheduler will ever judge ---------------------------------------------------------------------------


def test_control_a_pending_pod_of_the_default_scheduler_stops_the_reshuffle(monkeypatch):
    operator = _operator_with_pending(monkeypatch, [_pod(namespace="t", schedulerName="default-scheduler")])
    assert _reshuffle(operator) == (2, 6)


# Fixed (was a strict xfail): FINDING (medium, denial) a pod of a scheduler that does not exist was counted for good; a pod not judged yet counts only for the default scheduler, one of another scheduler once it judged the pod short of GPUs.
def test_a_pod_of_a_scheduler_that_does_not_exist_freezes_another_namespaces_reshuffle(monkeypatch):
    operator = _operator_with_pending(monkeypatch, [_pod(namespace="t", schedulerName="no-such-scheduler")])
    assert _reshuffle(operator) == (7, 1)


# --- (3) one pod, several pools ----------------------------------------------------------------------------------------


def _two_pools() -> list[Claim]:
    """Namespace a's own reshuffle in pool X and namespace b's in pool Y (3 GPUs each): a0/b0 run 3, a1/b1
    (priority 5) want 1."""
    out = []
    for ns, pool in (("a", ("X",)), ("b", ("Y",))):
        out += [claim(ns, f"{ns}0", pool=pool, pool_gpus=3, current=3, held=3, wanted=3, bound=3),
                claim(ns, f"{ns}1", pool=pool, pool_gpus=3, priority=5, wanted=1)]
    return out


# Was a strict xfail (low, "denial amplification": one pod that fits two pools stops the reshuffles of both), judged
# not a finding, 2026-12-06. The pod is older than both takers and of their pod priority, so the kube-scheduler gives it
# the first GPU any cut frees, in whichever pool: each pool's cut alone would feed it and leave its own taker waiting.
# The suggested budget (the pod stops the first pool only) lets the second pool cut, and the pod then runs on that
# pool's freed GPU: the theft pass 21 found, moved one pool over. The tenant gains no GPU either way, and a taker of a
# higher pod priority than the pod's is not stopped (test_a_higher_taker_is_not_stopped_by_a_pod_that_fits_two_pools).
def test_one_pod_that_fits_two_pools_stops_both_reshuffles():
    nodes = {("X",): [_node("x1", labels={"gpu": "h100", "rack": "x"})],
             ("Y",): [_node("y1", labels={"gpu": "h100", "rack": "y"})]}
    listed = unclaimed_waiting([_pod(namespace="t")], nodes, lambda pod: None)
    assert listed == {("X",): [Unclaimed("t", 0, 1)], ("Y",): [Unclaimed("t", 0, 1)]}  # counted in both
    out, _ = share(_two_pools(), 1000.0, unclaimed=listed)
    assert [ns for ns in "ab" if out[(ns, f"{ns}1")].replicas == 1] == [], out  # either cut would feed the pod
    assert all(out[(ns, f"{ns}0")].replicas == 3 for ns in "ab"), out
    alone = {("Y",): listed[("Y",)]}  # the pod seen in one pool only: the other reshuffles (the pod is not counted twice there)
    out, _ = share(_two_pools(), 1000.0, unclaimed=alone)
    assert out[("a", "a1")].replicas == 1 and out[("b", "b1")].replicas == 0, out


def test_a_higher_taker_is_not_stopped_by_a_pod_that_fits_two_pools():
    """The pod's pod priority (0) is below a class-10 taker's: the scheduler serves the taker first, so both pools cut."""
    listed = {("X",): [Unclaimed("t", 0, 1)], ("Y",): [Unclaimed("t", 0, 1)]}
    classed = [dataclasses.replace(c, class_priority=10, cluster_wide=False) if c.name.endswith("1") else c
               for c in _two_pools()]
    out, _ = share(classed, 1000.0, unclaimed=listed)
    assert [ns for ns in "ab" if out[(ns, f"{ns}1")].replicas == 1] == ["a", "b"], out


# --- (4) what a tenant reads --------------------------------------------------------------------------------------------


def test_status_never_names_the_namespace_of_a_pending_pod_no_claim_covers():
    """Both modes, and a taker of a class: the texts of every backend say nothing of the namespace whose bare pods
    stop the cut (only that the taker waits)."""
    for across in (False, True):
        cs = [claim("a", "a0", current=3, held=3, wanted=3, bound=3),
              claim("a", "a1", priority=5, wanted=1),
              claim("b", "b0", class_priority=100, wanted=1)]
        out, _ = share(cs, 1000.0, across_namespaces=across,
                       unclaimed={("gpu",): [Unclaimed("secret-team", 100, 1), Unclaimed("secret-team", 0, 2)]})
        assert out[("a", "a1")].replicas == 0 and out[("a", "a1")].waiting_for_capacity, out
        for s in out.values():
            for text in (s.preempted_by, s.waiting_for_capacity, s.took):
                assert "secret" not in (text or ""), text


# --- (5) regression fuzz, and (5b) step 2's nominal taker: pods no claim covers, through the scheduler model ----------------------------------------------


def test_fuzz_pods_no_claim_covers_never_run_on_a_cut_and_floors_hold():
    """300 pools (both modes) with bare Pending pods of third namespaces (the model's unseen backends, pod priority
    0) beside claims that never scale themselves down: over 5 syncs the bare pods gain no more GPUs than were free
    before the sync or the scheduler's own preemption left over, except what a whole replica cut for a higher pod
    priority's smaller need leaves over (no cut for a taker of their pod priority serves them; syncs that start
    overcommitted, where step 2 cuts, were excepted until probe (5b)'s fix: its scene was the fuzz's only exception,
    1 of 300 pools), no backend goes below min(current, minReplicas) unless preempted, and the
    last two syncs' shares are equal (settled)."""
    rng = random.Random(2201)
    for trial in range(300):
        across = trial % 2 == 0
        pool = rng.choice([3, 4, 6, 8])
        cs, used = [], 0
        for i in range(rng.randint(2, 5)):
            g = rng.choice([1, 1, 2])
            cur = rng.randint(0, 3)
            bound = min(cur, max(0, (pool - used) // g))
            used += bound * g
            minimum = rng.choice([0, 0, 1, cur])
            ns = rng.choice("abc")
            cs.append(claim(ns, f"{ns}{i}", pool_gpus=pool, priority=rng.choice([0, 1, 5]), current=cur, held=cur,
                            bound=bound, wanted=max(cur, minimum) + rng.randint(0, 2), min_replicas=minimum,
                            gpus_per_replica=g, class_priority=rng.choice([None, None, 5])))
        free = pool - used
        unseen = [(f"bare{j}", rng.choice([1, 2]), 0, rng.randint(1, 2)) for j in range(rng.randint(1, 2))]
        # (the bare pods start waiting: none runs, whatever is free goes to them first, as the oldest)
        unseen = [(n, g, 0, w) for n, g, _, w in unseen]
        shares = []
        for claims, out, running, before in _runs(cs, across, syncs=5, unseen=unseen):
            free_before = pool - sum(before[c.key] * c.gpus_per_replica for c in claims) - sum(
                before[("unseen", n)] * g for n, g, _, _ in unseen)
            gained = sum((running[("unseen", n)] - before[("unseen", n)]) * g for n, g, _, _ in unseen)
            # the scheduler's own preemption (a class's Pending pod) may leave GPUs over: not a cut of the pool
            preempted = sum(max(0, min(before[c.key], out[c.key].replicas) - running[c.key]) * c.gpus_per_replica
                            for c in claims)
            if gained > max(0, free_before) + preempted:  # step 2 too, since probe (5b)'s fix
                # a cut's GPUs went to them: only GPUs a whole replica freed beyond what a taker of a higher pod
                # priority needed (placed before them) may be left over; a taker of their pod priority cuts nothing
                takers = [c for c in claims if out[c.key].took]
                assert takers and all(c.scheduling_priority > 0 for c in takers), (
                    trial, across, claims, out, running, before)
            for v in claims:
                s = out[v.key]
                assert s.replicas >= min(v.current, v.min_replicas) or s.preempted_by, (trial, v, out)
            shares.append({k: s.replicas for k, s in out.items()})
        assert shares[-1] == shares[-2], (trial, across, shares)
        assert free >= 0


def _step_2_scene(with_class_holder: bool) -> list[Claim]:
    """Namespace b: b0 runs 2, its b1 (priority 5, minReplicas 1) has one Pending replica: an overcommitted pool,
    b's own reshuffle by step 2. With a class holder: c (PriorityClass 5) runs 1 more GPU and wants nothing more."""
    gpus = 3 if with_class_holder else 2
    cs = [claim("b", "b0", pool_gpus=gpus, current=2, held=2, bound=2, wanted=2),
          claim("b", "b1", pool_gpus=gpus, priority=5, current=1, held=1, bound=0, wanted=1, min_replicas=1)]
    if with_class_holder:
        cs.append(claim("c", "c", pool_gpus=gpus, class_priority=5, current=1, held=1, bound=1, wanted=1,
                        min_replicas=1))
    return cs


@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_control_step_2_waits_for_a_tenants_bare_pod_without_a_class_holder(across):
    for _, out, running, _ in _runs(_step_2_scene(False), across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("b", "b0")] == 2 and running[("unseen", "t")] == 0, (out, running)


# Fixed (was a strict xfail): FINDING (high, both modes) step 2 asked about its nominal taker's pod priority; it now asks whether backends' replicas of a higher pod priority than the third namespace's unclaimed pods wait for what the cut frees (served_first).
@pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
def test_a_class_holder_in_the_pool_lets_step_2_cut_for_a_tenants_bare_pod(across):
    for _, out, running, _ in _runs(_step_2_scene(True), across, syncs=3, unseen=[("t", 1, 0, 1)]):
        assert running[("b", "b0")] == 2 and running[("unseen", "t")] == 0, (out, running)


# --- (6) cost: pods of distinct shapes, judged against every node of every shared pool -------------------------------------


def _rack_node(name: str, rack: int) -> GPUNode:
    return GPUNode(name=name, gpu_count=8, product="NVIDIA-H100-80GB-HBM3", memory_bytes=80 << 30, family="hopper",
                   compute_capability=(9, 0), clique=None, nvlink_domains=(tuple(range(8)),),
                   topology_source="inferred", schedulable=True, taints=(),
                   labels=tuple(sorted({"gpu": "h100", "rack": f"r{rack}", "kubernetes.io/hostname": name}.items())),
                   allocatable=(("cpu", 192_000), ("memory", 2 << 40), ("nvidia.com/gpu", 8), ("pods", 110)))


def _cpu(pods: list[dict], pools: dict) -> float:
    return quiet_cpu_s(lambda: unclaimed_waiting(pods, pools, lambda pod: None))


# Fixed (was a strict xfail): FINDING (medium, cost) each pod shape was judged against every node of every pool; it is now judged once a node kind (what it reads of a node: the label keys it names, taints, allocatable), its nodeSelector checked first. The probe now uses pods of the default scheduler (pods of a scheduler that does not exist no longer count at all).
def test_pods_of_distinct_shapes_cost_the_product_of_pods_and_pool_nodes():
    pods = []
    for k in range(400):
        pod = _pod(namespace="t", name=f"p{k}")  # not judged yet by the default scheduler: counted
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{1000 + k}m", "memory": "100Ti"}
        pods.append(pod)
    racks = [[_rack_node(f"n{r}-{i}", r) for i in range(8)] for r in range(32)]
    one = _cpu(pods, {("H100/r0",): racks[0]})
    many = _cpu(pods, {(f"H100/r{r}",): racks[r] for r in range(32)})
    assert many <= 4 * one, (one, many)
