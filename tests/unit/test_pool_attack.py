"""Attacks on the GPU pool shared by priority (autoscaling/pool.py) by a TENANT: a user who may edit LLMBackends in
one namespace and nothing else (docs/security.md, "Trust model"). Each test is one probe against the pure share().

Probes that hold assert the claim plainly. Probes that break assert the SAFE behaviour and are xfail(strict=True)
with the finding as the reason: they start passing (and so fail as XPASS) once the break is fixed. Breaks since
fixed keep the finding as a comment.

Names: namespace "tenant" is the attacker's; "prod" is another team's.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmbackend.api.v1alpha1 import AutoscalingSpec
from llmbackend.autoscaling.pool import HOLD_S, Claim, PoolState, share

POOL = ("H100", "node-a")


def claim(name, namespace, priority=0, current=1, wanted=1, min_replicas=1, gpus=1, pool_gpus=8, **kw):
    return Claim(namespace=namespace, name=name, pool=kw.pop("pool", POOL), pool_gpus=pool_gpus, priority=priority,
                 current=current, wanted=wanted, min_replicas=min_replicas, gpus_per_replica=gpus, **kw)


def run_syncs(make_claims, syncs, period=10.0, state=None, across=False):
    """Drive share() as the loop does: each sync's current is the last share. Returns the shares of every sync."""
    current: dict = {}
    history = []
    for i in range(syncs):
        claims = make_claims(i, current)
        out, state = share(claims, i * period, state, across)
        current = {k: s.replicas for k, s in out.items()}
        history.append(out)
    return history, state


# --- probes that hold -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", [1_000_000, -1_000_000, 1])
def test_a_tenant_set_priority_never_takes_another_namespaces_replicas(priority):
    out, _ = share([claim("victim", "prod", 0, current=7, wanted=7),
                    claim("grab", "tenant", priority, current=1, wanted=8)], 0.0)
    assert out[("prod", "victim")].replicas == 7
    assert out[("prod", "victim")].preempted_by is None
    assert out[("tenant", "grab")].replicas == 1


def test_the_api_bounds_a_tenant_set_priority():
    for bad in (1_000_001, -1_000_001, 2**63):
        with pytest.raises(ValidationError):
            AutoscalingSpec.model_validate({"priority": bad})
    assert AutoscalingSpec.model_validate({"priority": 1_000_000}).priority == 1_000_000


def test_many_tenant_backends_overcommitting_the_pool_cut_nothing_of_another_namespace():
    # fifty backends, each "holding" the whole pool (Pending pods count as held): step 2 finds nobody to cut
    grabbers = [claim(f"grab-{i}", "tenant", 1_000_000, current=8, wanted=8, min_replicas=0) for i in range(50)]
    out, _ = share([claim("victim", "prod", 0, current=4, wanted=4), *grabbers], 0.0)
    assert out[("prod", "victim")].replicas == 4
    assert out[("prod", "victim")].preempted_by is None


def test_a_tenant_flapping_its_load_never_moves_another_namespaces_backend():
    def claims(i, current):
        return [claim("victim", "prod", 0, current=current.get(("prod", "victim"), 4), wanted=8 if i % 2 else 4),
                claim("flap", "tenant", 1_000_000, current=current.get(("tenant", "flap"), 4),
                      wanted=8 if i % 2 == 0 else 1, min_replicas=0)]
    history, _ = run_syncs(claims, 40)
    # the victim only grows into GPUs the tenant's own scale-down freed, and nothing is ever taken from it
    assert all(out[("prod", "victim")].preempted_by is None for out in history)
    victim = [out[("prod", "victim")].replicas for out in history]
    assert min(victim) == 4


def test_a_low_priority_holder_keeps_no_reservation_against_a_higher_one():
    # the hold of step 4 is kept only for the backend that outranks: "low" held 8 GPUs a moment ago and gave none
    # up, yet "high" still takes them at once
    state = PoolState(granted={("tenant", "low"): [(0.0, 8)]})
    out, _ = share([claim("low", "tenant", 0, current=8, wanted=8),
                    claim("high", "tenant", 10, current=0, wanted=4, min_replicas=0)], 1.0, state)
    assert out[("tenant", "high")].replicas == 4


def test_a_tenant_with_a_priority_class_thrashes_nobody_within_the_hold():
    # the tenant may legitimately use class "gold" (1000) and flaps between wanting 8 and 1 every sync: the victim
    # (class "bronze", 0, another namespace) gives GPUs up once and is not handed them back and forth
    def claims(i, current):
        return [claim("victim", "prod", 0, current=current.get(("prod", "victim"), 7), wanted=7, cluster_wide=True),
                claim("flap", "tenant", 1000, current=current.get(("tenant", "flap"), 1), wanted=8 if i % 2 == 0 else 1,
                      cluster_wide=True)]
    history, _ = run_syncs(claims, int(HOLD_S // 10) - 1)
    victim = [out[("prod", "victim")].replicas for out in history]
    drops = sum(1 for a, b in zip(victim, victim[1:]) if a != b)
    assert victim[0] == 1 and drops == 0, victim


# --- probes that break ------------------------------------------------------------------------------------------


# Found by the attacker pass (was a break (medium): a tenant-set spec.autoscaling.priority orders growth ACROSS namespaces); fixed in autoscaling/pool.py.
def test_a_tenant_set_priority_does_not_order_free_gpus_across_namespaces():
    def victim_share(tenant_priority):
        out, _ = share([claim("victim", "prod", 0, current=1, wanted=5),
                        claim("grab", "tenant", tenant_priority, current=1, wanted=5)], 0.0)
        return out[("prod", "victim")].replicas

    assert victim_share(1_000_000) == victim_share(-1_000_000)


# Found by the attacker pass (was a break (low): the backend's name orders growth across namespaces at equal priority (tie-break by name), so a tenant that names its backend 'a...' always wins free GPUs over another namespace's 'z...'); fixed in autoscaling/pool.py.
def test_a_tenant_backend_name_does_not_order_free_gpus_across_namespaces():
    def victim_share(tenant_name):
        out, _ = share([claim("model", "prod", 0, current=1, wanted=5),
                        claim(tenant_name, "tenant", 0, current=1, wanted=5)], 0.0)
        return out[("prod", "model")].replicas

    assert victim_share("aaaa") == victim_share("zzzz")


# Found by the attacker pass (was a break (medium): a tenant with no PriorityClass shields its GPUs from a backend of another namespace whose admin-granted PriorityClass is higher); fixed in autoscaling/pool.py.
def test_a_classless_tenant_cannot_hold_gpus_against_a_higher_priority_class_in_another_namespace():
    out, _ = share([claim("hog", "tenant", 0, current=8, wanted=8),
                    claim("prod", "prod", 1000, current=1, wanted=8, cluster_wide=True)], 0.0)
    # all of them: above the tenant's minReplicas taken, and the GPU of the one left counted for the higher class,
    # whose pods the kube-scheduler preempts (the tenant's Deployment keeps its replica, Pending)
    assert out[("prod", "prod")].replicas == 8


# Found by the attacker pass (was a break (low-medium): across namespaces a tenant's own minReplicas outranks the admin's PriorityClass order: a tenant of class 'bronze' (0) with minReplicas 8 keeps the whole pool against 'gold' (1000) of another namespace, whose replicas the operator then never creates (the kube-scheduler would preempt bronze pods whatever their Deployment's replica count)); fixed in autoscaling/pool.py.
def test_a_tenant_min_replicas_does_not_outrank_a_higher_class_of_another_namespace():
    out, _ = share([claim("hog", "tenant", 0, current=8, wanted=8, min_replicas=8, cluster_wide=True),
                    claim("prod", "prod", 1000, current=0, wanted=8, min_replicas=0, cluster_wide=True)], 0.0)
    assert out[("prod", "prod")].replicas > 0


# Found by the attacker pass (was a break (low): the hold of step 4 is remembered per backend, not per pool); fixed in autoscaling/pool.py.
def test_a_reservation_does_not_follow_a_backend_into_another_pool():
    other = ("H100", "node-b")
    _, state = share([claim("mover", "tenant", 1000, current=8, wanted=8, cluster_wide=True)], 0.0)
    out, _ = share([claim("mover", "tenant", 1000, current=1, wanted=1, cluster_wide=True, pool=other),
                    claim("prod", "prod", 0, current=1, wanted=7, cluster_wide=True, pool=other)], 10.0, state)
    assert out[("prod", "prod")].replicas == 7


# Found by the attacker pass (was a break (low-medium, information leak across the trust boundary): status.autoscaling.waitingForCapacity of a tenant's backend names another namespace's backends, their priorities and GPU counts ('held by prod/secret-model (priority 0): 8 GPU(s)'); preemptedBy and the taker's message do the same, and the PreemptedBy / WaitingForCapacity events carry them); fixed in autoscaling/pool.py.
def test_a_tenant_status_names_no_backend_of_another_namespace():
    out, _ = share([claim("secret-model", "prod", 0, current=8, wanted=8),
                    claim("probe", "tenant", 0, current=0, wanted=1, min_replicas=0)], 0.0)
    seen = out[("tenant", "probe")].waiting_for_capacity or ""
    assert "prod" not in seen and "secret-model" not in seen, seen


# Found by the attacker pass (was a break (low-medium, information leak): the victim of a PriorityClass preemption learns the preemptor's namespace and backend name (status.autoscaling.preemptedBy), and the preemptor's message names the victim's ('took replica(s) from prod/...')); fixed in autoscaling/pool.py.
def test_a_preemption_across_namespaces_names_neither_side_to_the_other():
    out, _ = share([claim("victim", "prod", 0, current=8, wanted=8, cluster_wide=True),
                    claim("taker", "tenant", 1000, current=0, wanted=4, min_replicas=0, cluster_wide=True)], 0.0)
    victim, taker = out[("prod", "victim")], out[("tenant", "taker")]
    assert taker.replicas == 4  # the preemption itself is legitimate (both priorities are admin classes)
    assert "tenant" not in (victim.preempted_by or "") and "prod" not in (taker.took or "")
