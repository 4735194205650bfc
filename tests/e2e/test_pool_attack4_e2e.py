"""Sixth attacker pass on the GPU pool shared by priority, on the real control plane (tests/unit/test_pool_attack6.py
has the pure and in-process probes).

Seat: a TENANT, a user who may create, edit and delete LLMBackends in one namespace and `use` one PriorityClass the
admin granted, behind the shipped admission policy, acting through `kubectl --as`. Its namespace has a ResourceQuota
on GPUs (the admin's, as docs/security.md recommends for who may run what). The victim is another namespace's backend,
made by an admin, on the same node.

Method: written from the docs and the code under operator/llmbackend/ before reading the earlier attack tests. A probe
that HOLDS asserts the claim plainly; a probe that BREAKS a claim asserts the SAFE behaviour and is xfail(strict=True)
with the finding and its severity.
"""

from __future__ import annotations

import time

import pytest
import yaml
from conftest import (
    apply_as_once_admitted,
    apply_manifest,
    autoscaling_status,
    deployment_replicas,
    wait_for,
)
from pool_support import floor_backend, grant_use, priority_classes

TENANT = "tenant-trudy"
NODE = "dgx-h100-0"  # 8 GPUs, one GPU per replica of the e2e model


def _backend(name: str, namespace: str, floor: int, priority_class: str | None = None) -> dict:
    return floor_backend(name, namespace, floor, NODE, max_replicas=8, priority_class=priority_class)


@pytest.fixture
def tenant(tenant, policy):
    """conftest's tenant namespace, with a quota of 4 GPUs."""
    policy.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "four-gpus", "namespace": tenant},
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}}))
    return tenant


@pytest.fixture
def gold(cluster, tenant):
    """A PriorityClass of 1000 that the tenant may `use`."""
    with priority_classes(cluster, {"gold": 1000}) as names:
        grant_use(cluster, TENANT, tenant, names["gold"])
        yield names["gold"]


# Fixed (was a strict xfail): FINDING (medium) the pool drained another namespace for pods the tenant's GPU quota
# refused: run.py _share_pools reads the namespace's ResourceQuotas and caps the claim (quota.quota_replicas)
def test_a_tenant_over_its_gpu_quota_never_drains_another_namespace(cluster, operator, tenant, victim, gold):
    """Tries: another namespace's class-less backend runs 4 replicas on NODE (4 GPUs free). The tenant, whose quota
    admits 4 GPUs, applies a backend of the gold class (1000) whose schedule floor asks for 8 replicas: 4 fit its
    quota and the free GPUs, 4 never can. Safe: the other
    backend keeps its 4 replicas throughout (the kube-scheduler would preempt none of its pods: the 4 pods the quota
    admits fit the free GPUs, and the API server refuses the rest)."""
    apply_manifest(cluster, _backend("model", victim, 4))
    wait_for(lambda: deployment_replicas(cluster, victim, "model") == 4
             and autoscaling_status(cluster, victim, "model").get("reason") not in (None, "AwaitingMetrics"),
             timeout=120, what="the victim at 4 replicas")
    lowest, said = 4, []

    def watch(seconds: float) -> None:
        nonlocal lowest
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            lowest = min(lowest, deployment_replicas(cluster, victim, "model") or 0)
            by = autoscaling_status(cluster, victim, "model").get("preemptedBy")
            if by:
                said.append(by)
            time.sleep(0.25)

    apply_as_once_admitted(cluster, TENANT, _backend("burst", tenant, 8, priority_class=gold))
    watch(30)
    tenant_pods = [p["metadata"]["name"] for p in cluster.kube.list("Pod", tenant)
                   if p["metadata"]["name"].startswith("burst-")]
    assert lowest == 4 and not said, (
        f"the other namespace's backend went down to {lowest} replica(s); its preemptedBy said {sorted(set(said))}; "
        f"the tenant's Deployment is at {deployment_replicas(cluster, tenant, 'burst')} with {len(tenant_pods)} pods; "
        f"the victim now at {deployment_replicas(cluster, victim, 'model')}")
