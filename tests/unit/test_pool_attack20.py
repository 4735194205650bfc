"""Twentieth attacker pass on the GPU pool (autoscaling/pool.py, holding.py, controller/run.py ``_share_pools``), as a
tenant who may edit LLMBackends in its own namespace (any source, min/maxReplicas, names), create and patch pods there
(labels, annotations, ownerReferences) and use some PriorityClasses. Aimed at 11c9e2a and e331732: ``holding.made_by``
(a pod counts only with an apps/v1 controller reference to ``<workload>-<pod-template-hash>`` or the StatefulSets
``<workload>`` / ``<workload>-<digits>``), step 2's ``contested`` skip, and which backends get a claim at all. Shares
are fed back sync after sync through test_pool_bound.py's model of the kube-scheduler (pass 18's driver); pods the
pool does not see run in the model beside the claims.

Summary: four findings (three roots), all high. (1) A backend whose evaluation ends in ``_hold`` (spec.autoscaling.
source prometheus with a URL the admin did not allow: PrometheusNotAllowed) is popped from ``Operator.uncapped``, and
``_share_pools`` builds claims only for keys in ``uncapped``: the backend is left out of the pool altogether while its
Deployment keeps max(minReplicas, current) replicas (decide.py ``_replicas``). Its Pending pods then stop no other
namespace's reshuffle (``contested`` never sees them) and take the GPU it frees (first come first served): A 3 -> 2
GPUs, the tenant 0 -> 1, A's new replica Pending for good - pass 19's high finding back without any forged pod; and
(across) its running GPUs count as free: a higher priority is granted them and never runs. (2) ``made_by`` accepts
the StatefulSet ``<workload>-<digits>`` for any pod, so a leader pod of the tenant's second multi-node backend named
``t-7`` (its leader StatefulSet is ``t-7``) counts as ``t``'s once the tenant patches its llmbackend.dev/backend label
(no StatefulSet selector holds it) and drops the size annotation: a real running pod makes ``t``'s Pending group read
as running, another namespace's reshuffle goes ahead and ``t``'s older group takes the 2 GPUs (A 4 -> 2, t 0 -> 2,
for good). (3) A regression of e331732 (default mode, no forging): in step 2 a taker of a higher PriorityClass whose
one pod waits cuts another namespace's backend for the whole deficit, a tenant's Pending pods at their minReplicas
included (after the first cut the victim still does not "fit beneath": the taker's replica still reads as waiting,
and ``contested`` looks only at the taker's pod priority): b 3 -> 1 running where the scheduler alone leaves 3, the
tenant's older pods take 2 (before e331732: b 3, t 0). Sound: the ReplicaSet branch of ``made_by`` (old
ReplicaSets, the activator, another backend's ReplicaSet, a pod-template-hash the name does not carry, another
apiVersion), honest readings, no churn over 300 pools with Pending pods and three pod priorities, floors and names,
share() on odd input, linear CPU for a long contested step 2.

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

from llmbackend.autoscaling.holding import LWS_SIZE_ANNOTATION, bound_replicas, held_replicas, made_by
from llmbackend.autoscaling.pool import HOLD_S, Claim, Share, outranks, share
from llmbackend.render.multinode import GROUP_INDEX_LABEL

POOL_NODES = frozenset({"gpu-node-1", "gpu-node-2"})
LABELS = {"llmbackend.dev/backend": "t", "app.kubernetes.io/component": "server", "pod-template-hash": "5d8c7f"}
OWNED_RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t-5d8c7f", "uid": "rs-uid", "controller": True}


def _cpu(fn, runs: int = 3) -> float:
    return quiet_cpu_s(fn, runs)


def _runs(claims: list[Claim], across: bool = False, syncs: int = 5, seen=None, step: float = 30.0, unseen=()):
    """Each sync: the shares of the claims as the operator reads them (``seen(claim)``: the claim with the held and
    bound its pods say; by default what really runs), then the pods the scheduler runs (``unseen``: see
    ``_scheduled``; what of them waits after a sync waits on). Yields (claims, shares, running)."""
    state, now = None, 1000.0
    unseen = list(unseen)
    for _ in range(syncs):
        out, state = share([seen(c) if seen else c for c in claims], now, state, across)
        running = _scheduled(claims, out, unseen)
        yield claims, out, running
        claims = [dataclasses.replace(c, current=out[c.key].replicas, held=out[c.key].replicas,
                                      bound=running[c.key]) for c in claims]
        unseen = [(n, g, running[("unseen", n)], r + w - running[("unseen", n)]) for n, g, r, w in unseen]
        now += step


def _gpus(claims: list[Claim], running: dict, namespace: str) -> int:
    return sum(running[c.key] * c.gpus_per_replica for c in claims if c.namespace == namespace)


def _pod(name: str, node: str | None = None, gpus: int = 1, waits_for_gpus: bool = False, owner: dict | None = None,
         labels: dict | None = None, annotations: dict | None = None, **spec) -> dict:
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


def _read(current: int, pods: list[dict], name: str = "t") -> tuple[int | None, int]:
    """held and bound of a 1-GPU Deployment backend as controller/run.py reads them."""
    return (held_replicas(current, pods, {"status": {}}, POOL_NODES, True, grouped=False, workload_made=name),
            bound_replicas(current, pods, POOL_NODES, True, False, workload_made=name))


def _read_groups(current: int, pods: list[dict], name: str = "t") -> tuple[int | None, int]:
    """held and bound of a multi-node backend as controller/run.py reads them (``_pool_pods``: its label, group pods)."""
    return (held_replicas(current, pods, None, POOL_NODES, True, workload_made=name),
            bound_replicas(current, pods, POOL_NODES, True, True, workload_made=name))


def _sts(name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": f"uid-{name}", "controller": True}


def _group(lws: str, g: int, node: str | None, waits: bool = False) -> list[dict]:
    """Group g of the 2-node LeaderWorkerSet ``lws`` (1 GPU a pod), as LWS makes it: the leader ``<lws>-<g>`` (of
    the StatefulSet ``<lws>``) and its worker ``<lws>-<g>-1`` (of the StatefulSet ``<lws>-<g>``), both labelled as
    the operator renders them (llmbackend.dev/backend: the backend's name)."""
    meta = dict(labels={GROUP_INDEX_LABEL: str(g), "llmbackend.dev/backend": lws, "leaderworkerset.sigs.k8s.io/name": lws},
                annotations={LWS_SIZE_ANNOTATION: "2"})
    return [_pod(f"{lws}-{g}", node=node, waits_for_gpus=waits, owner=_sts(lws), **meta),
            _pod(f"{lws}-{g}-1", node=node, waits_for_gpus=waits, owner=_sts(f"{lws}-{g}"), **meta)]


def _listed(pods: list[dict], backend: str) -> list[dict]:
    """What ``_pool_pods`` lists for a multi-node backend: its label, pods of a group."""
    return [p for p in pods if p["metadata"]["labels"].get("llmbackend.dev/backend") == backend
            and (GROUP_INDEX_LABEL in p["metadata"]["labels"] or LWS_SIZE_ANNOTATION in p["metadata"]["annotations"])]


# --- (1) a backend held by its evaluation (PrometheusNotAllowed) has no claim: its pods are the pool's blind spot ----


def _targets_with_a_held_tenant():
    from test_autoscale_loop import _pool_target, _wanting
    from test_backoff import _operator

    from llmbackend.api.v1alpha1 import AutoscalingSpec

    operator = _operator()
    targets = {("a", "a0"): _pool_target("a", "a0", 3, priority=0), ("a", "a1"): _pool_target("a", "a1", 0, priority=5)}
    tenant = _pool_target("t", "t", 1)
    tenant.spec = AutoscalingSpec.model_validate({"enabled": True, "minReplicas": 1, "maxReplicas": 8,
                                                  "source": "prometheus",
                                                  "prometheus": {"url": "http://prometheus.t.svc:9090"}})
    targets[("t", "t")] = tenant
    operator.uncapped = {("a", "a0"): _wanting(3), ("a", "a1"): _wanting(1), ("t", "t"): _wanting(1)}
    return operator, targets


# Fixed (was what the two findings below rested on): a held backend got no claim; every target of a pool claims now
# (one whose decision is held keeps its replicas: wanted = current), its pods read before the hold.
def test_a_backend_whose_prometheus_is_not_allowed_still_claims(monkeypatch):
    """What the findings below rest on, through the operator's own code: the tenant's backend (source prometheus, a URL
    the admin did not allow) is evaluated: ``_hold`` pops it from ``uncapped``, and ``_share_pools`` then builds no
    claim for it though it is a target of the pool with a replica (minReplicas 1: decide.py writes max(minReplicas,
    the held decision))."""
    from llmbackend.controller import run

    operator, targets = _targets_with_a_held_tenant()
    seen: list[list[Claim]] = []
    real = run.share

    def spy(claims, *a, **kw):
        seen.append(list(claims))
        return real(seen[-1], *a, **kw)

    monkeypatch.setattr(run, "share", spy)

    # its one replica's pod, made by its ReplicaSet, waits for a GPU
    waiting = _pod("t-h-x", waits_for_gpus=True, labels={"pod-template-hash": "h"},
                   owner={**OWNED_RS, "name": "t-h"})
    monkeypatch.setattr(operator.kube, "list", lambda kind, namespace, label_selector=None: [waiting])

    async def go():
        scaler = operator.scalers[("t", "t")] = operator._new_scaler(targets[("t", "t")])
        await operator._evaluate(("t", "t"), targets[("t", "t")], scaler)
        await operator._share_pools(targets)

    asyncio.run(go())
    assert operator.state.decisions[("t", "t")].reason == "PrometheusNotAllowed"
    assert operator.state.decisions[("t", "t")].desired_replicas == 1
    claims = {c.key: c for c in seen[-1]}
    assert set(claims) == {("a", "a0"), ("a", "a1"), ("t", "t")}, claims  # t claims (it had none)
    assert claims[("t", "t")].wanted == claims[("t", "t")].current == 1
    assert claims[("t", "t")].bound == 0  # its pods read before the hold: its replica waits


def test_control_a_visible_pending_replica_stops_another_namespaces_reshuffle():
    """Control (pass 14's rule): pool 3, A's a0 runs 3; the tenant's t waits with 1 Pending pod (older; minReplicas
    1). a1 (A, priority 5) wants 1: A keeps its 3 GPUs, t runs nothing of A's."""
    a0 = claim("a", "a0", pool_gpus=3, current=3, held=3, wanted=3, bound=3)
    a1 = claim("a", "a1", pool_gpus=3, priority=5, wanted=1)
    t = claim("t", "t", pool_gpus=3, current=1, held=1, wanted=1, min_replicas=1, bound=0)
    for claims, out, running in _runs([t, a0, a1]):
        assert _gpus(claims, running, "a") == 3 and running[t.key] == 0, (out, running)


# Fixed (was a strict xfail): FINDING (high) a held backend (source prometheus, a URL the admin did not allow) got no claim, so its older Pending pod took the GPU another namespace's reshuffle freed; it claims now (test above), as here.
def test_a_held_backends_pending_pod_takes_the_gpu_of_another_namespaces_reshuffle():
    a0 = claim("a", "a0", pool_gpus=3, current=3, held=3, wanted=3, bound=3)
    a1 = claim("a", "a1", pool_gpus=3, priority=5, wanted=1)
    # the pool's claims: t's too (test above), its one replica waiting, older, at its floor
    t = claim("t", "t", pool_gpus=3, current=1, held=1, wanted=1, min_replicas=1, bound=0)
    for claims, out, running in _runs([t, a0, a1]):
        assert _gpus(claims, running, "a") == 3 and running[t.key] == 0, (out, running)


def test_across_control_a_higher_priority_takes_from_a_visible_lower_tenant():
    """Control: across namespaces, pool 4, the tenant's t (priority 0) runs 4; c (priority 5) wants 2: c runs 2."""
    c = claim("a", "c", priority=5, wanted=2)
    t = claim("t", "t", current=4, held=4, wanted=4, bound=4)
    *_, (_, out, running) = _runs([c, t], across=True)
    assert running[c.key] == 2, (out, running)


# Fixed (was a strict xfail): FINDING (high, across namespaces) the same root: a held backend's 4 running GPUs counted as free; it claims them now.
def test_across_a_held_backends_running_gpus_are_granted_to_a_higher_priority_and_never_free():
    c = claim("a", "c", priority=5, wanted=2)
    t = claim("t", "t", priority=1, current=4, held=4, wanted=4, bound=4)  # held: it keeps its 4 (wanted = current)
    *_, (_, out, running) = _runs([c, t], across=True)
    assert running[c.key] == 2 and running[t.key] <= 2, (out, running)


# --- (2) made_by: the StatefulSet <workload>-<digits> is also another backend's leader StatefulSet ------------------


def test_made_by_the_replica_set_branch_holds():
    """Pods a ReplicaSet named otherwise made are not the backend's: the activator's (``t-activator-<hash>``),
    another backend's whose name starts with ``t-`` (``t-abc-<hash>``), one whose pod-template-hash label the name does
    not carry (a relabel takes it out of that ReplicaSet's selector: it is released), a ReplicaSet of another apiVersion.
    An old ReplicaSet of t's Deployment (``t-<old hash>``, its pods labelled so) is t's: those pods are its replicas,
    and a forged one the old ReplicaSet adopts is deleted at once (scaled to 0, or over its count, unscheduled first)."""
    def rs(name: str, api: str = "apps/v1") -> dict:
        return {**OWNED_RS, "name": name, "apiVersion": api}

    assert not made_by(_pod("x", labels={"pod-template-hash": "9f9f9f"}, owner=rs("t-activator-9f9f9f")), "t")
    assert not made_by(_pod("x", labels={"pod-template-hash": "9f9f9f"}, owner=rs("t-abc-9f9f9f")), "t")
    assert not made_by(_pod("x", labels={"pod-template-hash": "abc-9f9f9f"}, owner=rs("t-9f9f9f")), "t")
    assert not made_by(_pod("x", owner=rs("t-5d8c7f", "apps/v1beta2")), "t")
    assert made_by(_pod("x", labels={"pod-template-hash": "0ld0ld"}, owner=rs("t-0ld0ld")), "t")
    # the pool's read of an honest rollout: the old pod runs, the new one waits (surge): one replica runs, one waits
    old = _pod("t-0ld0ld-a", node="gpu-node-1", labels={"pod-template-hash": "0ld0ld"}, owner=rs("t-0ld0ld"))
    assert _read(2, [old, _pod("t-5d8c7f-b", waits_for_gpus=True)]) == (2, 1)


def _tenant_pods(relabelled: bool) -> list[dict]:
    """The tenant's two multi-node backends in its namespace: t (2 GPUs a group) has one group, Pending (its pods
    wait for GPUs); t-7 (its LeaderWorkerSet ``t-7``: leader StatefulSet ``t-7``, workers ``t-7-<g>``) runs 2 groups.
    ``relabelled``: the tenant patched t-7's leader pod of group 1 - llmbackend.dev/backend t, the size annotation
    dropped. Neither is in a selector of the StatefulSets (LWS selects its leaders by its name label and worker
    index, its workers by its name label and group): the pod stays the StatefulSet ``t-7``'s, running."""
    pods = _group("t", 0, None, waits=True) + _group("t-7", 0, "gpu-node-1") + _group("t-7", 1, "gpu-node-2")
    if relabelled:
        leader = pods[4]
        assert leader["metadata"]["name"] == "t-7-1"
        leader["metadata"]["labels"]["llmbackend.dev/backend"] = "t"
        del leader["metadata"]["annotations"][LWS_SIZE_ANNOTATION]
    return pods


def test_control_honest_groups_read_as_they_run():
    pods = _tenant_pods(relabelled=False)
    assert _read_groups(1, _listed(pods, "t"), "t") == (1, 0)
    assert _read_groups(2, _listed(pods, "t-7"), "t-7") == (2, 2)


def _reshuffle() -> list[Claim]:
    """Pool 8 (2 GPUs a replica). A's a0 runs 2 (4 GPUs), a1 (A, priority 5) wants 1; the tenant's t waits with one
    group (older; minReplicas 1) and its t-7 runs 2 groups."""
    return [claim("t", "t", pool_gpus=8, current=1, held=1, wanted=1, min_replicas=1, bound=0, gpus_per_replica=2),
            claim("t", "t-7", pool_gpus=8, current=2, held=2, wanted=2, bound=2, gpus_per_replica=2),
            claim("a", "a0", pool_gpus=8, current=2, held=2, wanted=2, bound=2, gpus_per_replica=2),
            claim("a", "a1", pool_gpus=8, priority=5, wanted=1, gpus_per_replica=2)]


def test_control_a_waiting_group_stops_another_namespaces_reshuffle():
    *_, (last, out, running) = _runs(_reshuffle())
    assert _gpus(last, running, "a") == 4 and running[("t", "t")] == 0, (out, running)


# Fixed (was a strict xfail): FINDING (high) made_by accepted the StatefulSet '<workload>-<digits>' for any pod, so the tenant's other multi-node backend t-7's leader, relabelled, read as t's running group; a StatefulSet's pod counts only with the LeaderWorkerSet name label of the backend and its own group's worker set.
def test_a_sibling_backends_leader_pod_hides_a_pending_group_and_takes_another_namespaces_gpus():
    pods = _tenant_pods(relabelled=True)
    # as the operator reads them (was: made_by(t-7's leader, "t") and t (1, 1), t-7 (1, 1); honest (1, 0), (2, 2))
    held_t, bound_t = _read_groups(1, _listed(pods, "t"), "t")
    held_7, bound_7 = _read_groups(2, _listed(pods, "t-7"), "t-7")

    def seen(x: Claim) -> Claim:  # the relabelled pod stays: the readings move by what it moves
        if x.name == "t":
            return dataclasses.replace(x, bound=min(x.current, (x.bound or 0) + (bound_t - 0)))
        if x.name == "t-7":
            return dataclasses.replace(x, held=max(0, (x.held or 0) - (2 - held_7)),
                                       bound=max(0, (x.bound or 0) - (2 - bound_7)))
        return x

    for claims, out, running in _runs(_reshuffle(), seen=seen):
        assert _gpus(claims, running, "a") == 4 and running[("t", "t")] == 0, (out, running)


# --- (3) step 2's contested skip: sound ----------------------------------------------------------------------------


def _higher_class_waits(tenant_floor: int) -> list[Claim]:
    """Pool 4, default mode. B's b runs 4 (pod priority 0); C's c (PriorityClass 100) has one replica whose pod was
    recreated (a rollout, an eviction): it waits; the tenant's t (pod priority 0) has 2 Pending pods, older than
    anything the shares make, at minReplicas ``tenant_floor``. The kube-scheduler alone preempts one of b's pods for
    c: b 3, c 1, t 0."""
    return [claim("t", "t", current=2, held=2, wanted=2, min_replicas=tenant_floor, bound=0),
            claim("b", "b", current=4, held=4, wanted=4, bound=4),
            claim("c", "c", current=1, held=1, wanted=1, min_replicas=1, bound=0, class_priority=100)]


def test_control_a_higher_class_takes_one_replica_when_the_tenants_pending_pods_are_cuttable():
    """Control: the tenant's Pending replicas above its floor (0) are cut first (they free nothing): b gives c one
    replica and keeps 3, as the scheduler alone would leave it; the tenant runs nothing."""
    for across in (False, True):
        *_, (_, out, running) = _runs(_higher_class_waits(0), across)
        assert running == {("t", "t"): 0, ("b", "b"): 3, ("c", "c"): 1}, (across, out, running)


# Fixed (was a strict xfail): FINDING (high, a regression of e331732) step 2 kept cutting for a higher class's waiting replica after its first cut served it (its bound does not move within a pass), and the tenant's Pending pods at their floor took the rest; step 2 counts the GPUs it freed for those that wait above (freed_for_waiting).
def test_a_tenants_pending_pods_at_their_floor_take_what_step_2_cuts_for_a_higher_class():
    for across in (False, True):
        *_, (_, out, running) = _runs(_higher_class_waits(2), across)
        assert running[("b", "b")] == 3 and running[("t", "t")] == 0, (across, out, running)


def _fuzzed(rng: random.Random) -> list[Claim]:
    pool = rng.choice([4, 6, 8])
    cs, used = [], 0
    for i in range(rng.randint(2, 6)):
        g = rng.choice([1, 1, 2])
        cur = rng.randint(0, 3)
        bound = min(rng.randint(0, cur), (pool - used) // g)
        used += bound * g
        minimum = rng.choice([0, 0, 1, cur])
        ns = rng.choice("abcd")
        cs.append(claim(ns, f"secret-{ns}{i}", pool_gpus=pool, priority=rng.choice([0, 1, 5]), current=cur,
                        held=cur, bound=bound, wanted=max(minimum, cur + rng.randint(-1, 2)), min_replicas=minimum,
                        gpus_per_replica=g, class_priority=rng.choice([None, None, 5, 100])))
    return cs


def test_pending_pods_and_classes_settle_keep_floors_and_names():
    """300 pools (both modes, three pod priorities) fed through the scheduler model 12 syncs HOLD_S / 4 apart: no
    share moves after the 8th sync; no backend is cut below min(current, minReplicas) unless preempted, a cut
    backend is outranked, no status names another namespace's backend."""
    rng = random.Random(2001)
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
    rng = random.Random(2002)
    for _ in range(300):
        cs = []
        for i in range(rng.randint(1, 6)):
            cur = rng.randint(0, 5)
            cs.append(claim(rng.choice("ab"), f"x{i}", pool_gpus=rng.choice([0, 1, 4]),
                            priority=rng.choice([-(2**63), 0, 2**63]), current=cur, held=rng.choice([None, -1, cur]),
                            bound=rng.choice([None, -2, 0, cur + 3]), wanted=rng.randint(0, 6),
                            min_replicas=rng.randint(0, 7), gpus_per_replica=rng.choice([0, 1, 3, -1]),
                            class_priority=rng.choice([None, -5, 5])))
        for across in (False, True):
            out, state = share(cs, 1000.0, None, across)
            share(cs, 1030.0, state, across)
            assert set(out) == {c.key for c in cs}


def _contested_step_2(n: int) -> list[Claim]:
    """An overcommitted pool: n namespaces each with a waiting higher backend and a running lower one, and a third
    namespace's Pending pods of that pod priority: every cut step 2 looks at is contested."""
    cs = [claim("t", f"t{i:05d}", pool_gpus=2 * n, current=1, held=1, wanted=1, min_replicas=1, bound=0)
          for i in range(n)]
    for i in range(n):
        cs += [claim(f"v{i}", "lo", pool_gpus=2 * n, current=2, held=2, wanted=2, bound=2),
               claim(f"v{i}", "hi", pool_gpus=2 * n, priority=9, current=1, held=1, wanted=1, min_replicas=1,
                     bound=0)]
    return cs


@pytest.mark.parametrize("build", [_contested_step_2])
def test_cpu_stays_linear(build):
    for across in (False, True):
        small, big = build(200), build(800)
        t_small = _cpu(lambda: share(small, 1000.0, None, across))  # noqa: B023
        t_big = _cpu(lambda: share(big, 1000.0, None, across))  # noqa: B023
        assert t_big < 8 * t_small + 0.05, (build.__name__, across, t_small, t_big)
        assert isinstance(next(iter(share(small, 1000.0, None, across)[0].values())), Share)
