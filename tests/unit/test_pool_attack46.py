"""Forty-sixth attacker pass on the GPU pool (autoscaling/pool.py ``share``). Seat: an independent attacker who did not
write the code, as a tenant (namespace T) who may create LLMBackends and pods (any labels, ownerReferences, the
priorityClassName it may use) in its own namespace and may use one PriorityClass. Aimed at 7a54f1c (a claim's pods
beyond ``runs(c) * gpus_per_replica`` count in ``holding.unclaimed_bound`` at their pod priority; backends that name
no PriorityClass get the global default class's value) and its reverse: a claim that counts MORE GPUs than its pods
hold. Shares fed back sync after sync through pass 26's kube-scheduler model (``_scheduled``); "the scheduler alone"
is the same truth with nothing cut. Time-boxed pass (2 cores, about 25 minutes).

PROBES: 8 test functions, 17 cases (10 pass, 7 strict xfail; about 2 s): the production feed (``Operator._unclaimed``
with fake pod lists) for a thin adopted pod, controls (the same GPUs as a bare pod: nothing cut; the tenant's own
Pending pod of W's pod priority present: nothing cut), the scheduler alone with the tenant's late bare pod, and a strict xfail for the finding in both modes,
with and without the pods bound to the pool's nodes read, plus its gain variant (T 6 GPUs, W 0; alone T 4, W 2); the loop (``_share_pools``) with a quota
scoped to the global default class, a control naming the class and a strict xfail for finding 2.

FINDING 1 (high: lasting - every sync while the pod stays -, deterministic, both modes, whether or not the pool's
bound pods are read; the reverse of pass 45 finding 1): a claimed backend's pod that asks FEWER GPUs than a replica
counts as a whole replica. ``bound_replicas`` (``_replica_pods`` with ``needs_gpus``: any pod asking > 0 GPUs) counts
it running, so ``runs(c) * gpus_per_replica`` counts ``gpus_per_replica`` GPUs for it, and ``unclaimed_bound`` only
adds what a claim's pods hold BEYOND its count (``beyond > 0``), never takes off what they hold less. The tenant
creates in T a pod with its backend's ReplicaSet's labels, pod-template-hash and controller reference (uid readable
in T; the ReplicaSet adopts it and deletes an unscheduled replica first, as pass 45 finding 1) asking 1 GPU where the
backend's replicas ask 3. Step 1 (``_never_placed``: ``running`` from ``keeps(c) * gpus_per_replica``) and step 2 (the
claims' holdings against ``pool_gpus``) see 2 GPUs that no pod holds; ``idle_gpus`` takes ``max(in_use, claims)``,
so the real ``in_use`` does not correct it. Reduced: pool 6; T's t1 (class 5, 3-GPU replicas) runs one replica and
the adopted 1-GPU pod (real: 4 GPUs; the pool: 6); W's w (no class, 2-GPU replicas, min 0) runs one replica and wants
2. The pool sees 6 + 2 > 6, cuts w (the lowest, outranked by t1's class) to 0, every sync; the kube-scheduler alone
keeps w's pod (no Pending pod of a higher priority wants its GPUs; the real pool is 4 + 2 = 6, full). W loses its
running replica for nobody, and the 2 GPUs it frees are the tenant's to take with a bare pod of W's own pod priority
(class 0: the scheduler alone would never preempt W's equal pod for it) created once the cut is made: T holds 6 GPUs,
W none, for good (the pool then reads the bare pod beside t1's phantom 6, still "overcommitted"). A T Pending bare pod
of W's pod priority present BEFORE the cut stops it (HELD (2)): the tenant creates it after. The over-count scales
with the replica size (a 1-GPU pod of an 8-GPU backend: 7 phantom GPUs a pod). Docs: pool.py "Which pods run is
read from the pods (``Claim.bound``)", holding.py ``unclaimed_bound`` "a claim's pods beyond [its count] too: ... one
adopted that asks more GPUs than a replica"; the opposite is nowhere. Suspected fix: count a claim's running GPUs
from its pods, not its replica count - ``bound_replicas`` counts a pod as a replica only when it asks at least
``gpus_per_replica`` GPUs (or ``_replica_pods`` keeps pods whose GPU ask equals the template's), and a claim's
``counted`` in run.py is ``min(runs(c) * gpus_per_replica, GPUs its bound pods hold)``; simplest, in ``_share_pools``
pass ``bound`` = the replicas whose pods ask the full ``gpus_per_replica`` (a thinner pod then counts only in
``in_use``/``unclaimed_bound`` as beyond-count GPUs of 0 claimed replicas, i.e. at its pod priority like a bare pod).

FINDING 2 (medium: one cut, then the refused replicas read as holding nothing and ``_short`` stops the claim - the
heal is read from the code, not run -; the tenant repeats it each time its load dips and climbs again; precondition:
the admin caps the namespace with a ResourceQuota whose scopeSelector names the global default PriorityClass, e.g.
``PriorityClass In [default]``, a usual way to cap the default class per namespace): since 7a54f1c a backend that names
no class counts at the global default's value (its pods get that class at admission: the Priority admission plugin
sets spec.priorityClassName too), but ``_share_pools`` reads its quotas with ``target.priority_class`` (None), so
``quota._quota_applies(quota, "")`` says the default-scoped quota does not apply: its claim is uncapped. Reduced (the
loop itself, probe ``test_a_classless_...``): pool 8; prod's model (class "low", 5) runs 6 1-GPU replicas; T's
classless t runs 2, wants 8, its quota (scoped to "default") full. The pool grants t 8 and cuts prod to 1 for six
replicas the API server refuses (drains, cold starts; no GPU gained). Named "default" explicitly: prod 6, t 2
(control). The reverse scopes (``NotIn [default]``, ``DoesNotExist``) cap a classless tenant more than its pods are
(its own loss). Suspected fix: pass ``quota_replicas``/``quota_free`` the class its pods get: ``target.priority_class
or <the global default class's name>`` (keep the default's name beside its value in ``_read_priority_classes``).

HELD: (1) the same 4 GPUs held as t1's one replica plus a bare 1-GPU class-5 pod (what the kube-scheduler sees): w
keeps its replica, both modes (control). (2) A Pending pod of the tenant's at W's pod priority (class 0) already
waiting when the pool would cut: no cut (the pool cuts no victim for GPUs an older Pending pod of that pod priority
would take), so the gain variant needs the bare pod created after the cut. (3) The production feed
checks what the finding rests on: the thin pod counts as a replica (``bound_replicas`` 2), ``unclaimed_bound`` adds
nothing and ``in_use`` is the real 4 + 2.

SUSPECTED, NOT SHOWN: (a) the global default (aim 2, beyond finding 2): a failed first PriorityClass LIST leaves ``GLOBAL_DEFAULT``
unread, so classless backends count at 0 again (pass 45 finding 2's shape) until a LIST succeeds - the docstring says
so (fail-open, logged); a default class deleted by the admin while its pods run makes their backends count at 0 after
the 60 s TTL while their pods keep the admitted value (same shape, admin-triggered); a default created while pods
admitted at 0 still run makes their backends count at the default, shielding them from a tenant's class the
scheduler lets preempt them (tenant loses, no theft). Not built. (b) Stale ``bound`` (the evaluation's pods) against
the bound list read a moment later: a replica bound between the two reads counts in its claim as waiting AND in
``unclaimed_bound`` as beyond its count (double count; heals the next sync - MEDIUM at most); not built. (c) Pass
35's fuzz on seeds 17-20: not run in the time box.

A probe that holds asserts the claim; one that breaks asserts the safe behaviour and is a strict xfail naming the
finding.

FIXED (2026-12-07, reviewer): finding 1: the loop counts no more running replicas of a backend than the GPUs its
bound replica pods hold make in whole replicas (``holding.bound_gpus``), and ``unclaimed_bound`` then has the thin
pod's GPUs beyond them; ``_step`` feeds the pool as the loop now does, and the probes pass. Finding 2: the loop reads
the global default class's name with its value and reads a classless backend's quotas as of that class."""

from __future__ import annotations

import asyncio
import dataclasses
import types

import pytest
from test_autoscale_loop import _pool_target, _wanting
from test_backoff import _operator
from test_pool_attack26 import POOL, _scheduled, _shares
from test_pool_attack28 import claim, running_claim
from test_pool_attack45 import _replica
from test_pool_unclaimed import _node, _operator_with_pending

from llmbackend.autoscaling.holding import bound_gpus, bound_replicas
from llmbackend.autoscaling.pool import Claim, Unclaimed, share

MODES = pytest.mark.parametrize("across", [False, True], ids=["default", "across"])
READ = pytest.mark.parametrize("read", [True, False], ids=["bound-read", "bound-not-read"])


# --- the production feed: a thin adopted pod counts as a whole replica, and nothing takes the difference off -------

def test_production_feed_a_thin_adopted_pod_counts_no_more_than_the_gpus_it_holds(monkeypatch):
    """t1's replicas ask 3 GPUs; the tenant's adopted pod asks 1. ``bound_replicas`` counts 2 running replicas
    (6 GPUs) where the pods hold 4; fixed: the loop caps them at the whole replicas the GPUs its bound pods hold make
    (``bound_gpus``: 4 // 3 = 1), and ``unclaimed_bound`` has the GPU beyond that one replica."""
    real, thin = _replica("T", "t1", "t1-abc-0", 3), _replica("T", "t1", "t1-abc-thin", 1)
    w = _replica("W", "w", "w-abc-0", 2, priority=0)
    w_waiting = _replica("W", "w", "w-abc-1", 2, node=None, phase="Pending", priority=0)
    pods = [real, thin, w, w_waiting]
    assert bound_replicas(2, [real, thin], frozenset({"n1"}), True, False, workload_made="t1") == 2
    assert bound_gpus([real, thin], frozenset({"n1"}), True, workload_made="t1") == 4
    running = min(2, 4 // 3)  # what controller/run.py now counts
    operator = _operator_with_pending(monkeypatch, pods)
    operator.state.inventory = type("Nodes", (), {"nodes": staticmethod(lambda: [_node("n1", 6)])})()
    targets = {(ns, name): dataclasses.replace(_pool_target(ns, name, 2), pool_nodes=frozenset({"n1"}))
               for ns, name in [("T", "t1"), ("W", "w")]}
    claims = [Claim(namespace=ns, name=name, pool=(t.pool,), pool_gpus=6, priority=0, current=2, wanted=2,
                    min_replicas=0, gpus_per_replica=3 if name == "t1" else 2, held=2,
                    bound=running if name == "t1" else 1) for (ns, name), t in targets.items()]
    _, in_use, others = asyncio.run(operator._unclaimed(targets, claims))
    pool = ("H100/abc",)
    assert in_use == {pool: 3 + 1 + 2}
    assert others == {pool: {5: 1}}  # the thin pod's GPU, beyond t1's one replica
    # what the claims count running and what runs beside them: the 6 GPUs the pods hold
    assert sum(c.bound * c.gpus_per_replica for c in claims) + sum(others[pool].values()) == in_use[pool]


# --- (F1) the model: W's running replica cut for the phantom GPUs --------------------------------------------------

def _truth():
    """Pool 6: T's t1 (class 5, 3-GPU replicas) runs one replica; W's w (no class, 2-GPU, min 0) runs one, wants 2.
    The tenant's thin 1-GPU class-5 pod is a bare pod in the truth (``(namespace, GPUs, running, waiting, prio)``)."""
    return ([running_claim("T", "t1", 6, 1, 3, class_priority=5),
             claim("W", "w", 6, gpus_per_replica=2, current=1, held=1, bound=1, wanted=2)],
            [("T", 1, 1, 0, 5)])


def _step(truth, bare, now, state, across, thin: bool, read: bool):
    """One sync. ``thin``: the pool sees the 1-GPU pod as t1's second replica (adopted), as the loop now counts it: a
    replica that neither runs nor holds (its bound pods' 4 GPUs make one 3-GPU replica: ``holding.bound_gpus``; the
    one the cap takes off is bound, not waiting: pass 47 finding 1), and its GPU beyond the claim's count in
    ``bound_unclaimed`` (before the fix: a second running replica, and nothing there); else as a bare pod at its pod
    priority; ``read``: the pods bound to the pool's nodes are read (``in_use``, ``bound_unclaimed``)."""
    t1 = truth[0]
    seen = [dataclasses.replace(t1, current=t1.current + 1, wanted=t1.wanted + 1) if thin else t1, *truth[1:]]
    others: dict[int, int] = {}
    for _, g, r, _, p in bare:
        others[p] = others.get(p, 0) + g * r
    in_use = sum(c.bound * c.gpus_per_replica for c in truth) + sum(g * r for _, g, r, _, _ in bare)
    out, state = share(seen, now, state, across,
                       {POOL: [Unclaimed(ns, p, g) for ns, g, _, w, p in bare for _ in range(w)]},
                       {POOL: in_use} if read else None, {POOL: others} if read else None)
    # the truth: t1's share less the thin pod (which the ReplicaSet keeps as one of its replicas)
    applied = {k: types.SimpleNamespace(replicas=s.replicas - (1 if thin and k == t1.key else 0))
               for k, s in out.items()}
    running = _scheduled(truth, applied, bare)
    nxt = [dataclasses.replace(c, current=applied[c.key].replicas, held=applied[c.key].replicas,
                               bound=running[c.key]) for c in truth]
    nxt_bare = [(ns, g, running[("bare", i)], r + w - running[("bare", i)], p)
                for i, (ns, g, r, w, p) in enumerate(bare)]
    return out, running, state, nxt, nxt_bare


def _runs(across, thin, read, syncs=3, late_bare=None):
    truth, bare = _truth()
    state = None
    for sync in range(syncs):
        if sync == 1 and late_bare:
            bare = [*bare, late_bare]
        out, running, state, truth, bare = _step(truth, bare, 1000.0 + 30 * sync, state, across, thin, read)
    return out, running, bare


def _gpus_of(namespace, running, bare) -> int:
    truth, _ = _truth()
    return sum(running[c.key] * c.gpus_per_replica for c in truth if c.namespace == namespace) + sum(
        running[("bare", i)] * b[1] for i, b in enumerate(bare) if b[0] == namespace)


@MODES
@READ
def test_control_the_same_gpus_as_a_bare_pod_cut_nothing(across, read):
    out, running, bare = _runs(across, thin=False, read=read)
    assert running[("W", "w")] == 1 and _gpus_of("T", running, bare) == 4, (_shares(out), running)


@MODES
def test_held_a_tenants_pending_pod_of_ws_pod_priority_waiting_first_stops_the_cut(across):
    truth, bare = _truth()
    bare = [*bare, ("T", 2, 0, 1, 0)]
    state = None
    for sync in range(3):
        out, running, state, truth, bare = _step(truth, bare, 1000.0 + 30 * sync, state, across, True, True)
    assert running[("W", "w")] == 1 and running[("bare", 1)] == 0, (_shares(out), running)


# Fixed (was a strict xfail): pass 46 finding 1 (high): a claimed backend's adopted pod asking fewer GPUs than a replica counts as a whole replica (bound_replicas; unclaimed_bound only adds beyond a claim's count): the pool sees phantom GPUs, calls the pool overcommitted and cuts W's running replica of a lower pod priority for nobody, every sync
@MODES
@READ
def test_a_thin_adopted_pod_cuts_no_running_replica_of_another_namespace(across, read):
    out, running, bare = _runs(across, thin=True, read=read)
    assert running[("W", "w")] == 1, (_shares(out), running)


# Fixed (was a strict xfail): pass 46 finding 1 (high), gain: after the cut the tenant's bare pod of W's own pod priority runs on W's freed GPUs, which the kube-scheduler alone never gives it (T 6, W 0)
@MODES
def test_the_tenant_gains_no_gpus_of_ws_from_a_thin_adopted_pod(across):
    out, running, bare = _runs(across, thin=True, read=True, syncs=4, late_bare=("T", 2, 0, 1, 0))
    assert running[("W", "w")] == 1 and _gpus_of("T", running, bare) <= 4, (_shares(out), running)


@MODES
def test_control_the_scheduler_alone_keeps_ws_replica_and_the_tenants_late_bare_pod_waits(across):
    """Nothing cut (the thin pod seen for what it is): W keeps its pod, T's class-0 bare pod waits (an equal)."""
    out, running, bare = _runs(across, thin=False, read=True, syncs=4, late_bare=("T", 2, 0, 1, 0))
    assert running[("W", "w")] == 1 and _gpus_of("T", running, bare) == 4, (_shares(out), running)



# --- (F2) the global default PriorityClass and the namespace's quotas scoped by PriorityClass ----------------------

def _quota_scoped_loop(monkeypatch, tenant_class, fail_classes: bool = False):
    """The loop over pool 8: prod's model (class "low", value 5) runs 6 1-GPU replicas; the tenant's t runs 2 and wants
    8, under a ResourceQuota scoped to the PriorityClass "default" (the global default, value 1000) with no GPU free.
    ``tenant_class``: the class t names (None: none, its pods get "default" at admission); ``fail_classes``: the
    PriorityClass LIST fails."""
    operator = _operator()
    other = operator.kube.list

    def listed(kind, namespace=None, **kw):
        if kind == "PriorityClass":
            if fail_classes:
                raise RuntimeError("forbidden")
            return [{"metadata": {"name": "default"}, "value": 1000, "globalDefault": True},
                    {"metadata": {"name": "low"}, "value": 5}]
        if kind == "ResourceQuota":
            return [] if namespace != "tenant" else [{
                "metadata": {"name": "gpus"},
                "spec": {"hard": {"requests.nvidia.com/gpu": "2"}, "scopeSelector": {"matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "In", "values": ["default"]}]}},
                "status": {"used": {"requests.nvidia.com/gpu": "2"}}}]
        return other(kind, namespace, **kw)
    monkeypatch.setattr(operator.kube, "list", listed)
    targets = {("prod", "model"): _pool_target("prod", "model", 6, priority_class="low"),
               ("tenant", "t"): _pool_target("tenant", "t", 2, priority_class=tenant_class)}
    operator.uncapped = {("prod", "model"): _wanting(6), ("tenant", "t"): _wanting(8)}
    asyncio.run(operator._share_pools(targets))
    return operator.state.decisions[("prod", "model")], operator.state.decisions[("tenant", "t")]


def test_control_a_backend_naming_the_default_class_is_capped_by_its_quota(monkeypatch):
    prod, tenant = _quota_scoped_loop(monkeypatch, "default")
    assert (prod.desired_replicas, tenant.desired_replicas) == (6, 2)


# Fixed (was a strict xfail): pass 46 finding 2 (medium): a backend that names no PriorityClass counts at the global default's value but its quota scope is read as no class (quota_free(..., None)), so a quota scoped to the default class does not cap it: the pool cuts another namespace's lower class for replicas the API server refuses (prod 6 -> 1)
def test_a_classless_backend_is_capped_by_a_quota_scoped_to_the_default_class(monkeypatch):
    prod, tenant = _quota_scoped_loop(monkeypatch, None)
    assert prod.desired_replicas == 6 and tenant.desired_replicas == 2, (prod, tenant)
