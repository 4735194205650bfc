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
import uuid

import pytest
import yaml
from conftest import (
    BACKEND_EDITOR_RULES,
    apply_as_once_admitted,
    apply_manifest,
    autoscaling_status,
    backend_manifest,
    deployment_replicas,
    fresh_namespace,
    grant,
    wait_for,
)

TENANT = "tenant-trudy"
NODE = "dgx-h100-0"  # 8 GPUs, one GPU per replica of the e2e model


def _backend(name: str, namespace: str, floor: int, priority_class: str | None = None) -> dict:
    scheduling: dict = {"nodeSelector": {"kubernetes.io/hostname": NODE}}
    if priority_class:
        scheduling["priorityClassName"] = priority_class
    auto = {"enabled": True, "minReplicas": 1, "maxReplicas": 8, "syncPeriodSeconds": 1,
            "schedule": [{"start": "* * * * *", "end": "0 0 1 1 *", "desiredReplicas": floor}]}
    return backend_manifest(name, namespace, scheduling=scheduling, autoscaling=auto)


@pytest.fixture
def tenant(policy, namespace):
    """`namespace`, where TENANT may edit LLMBackends and `use` the gold class, with a quota of 4 GPUs."""
    grant(policy, TENANT, namespace, "llmbackend-editor", BACKEND_EDITOR_RULES)
    policy.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "four-gpus", "namespace": namespace},
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}}))
    return namespace


@pytest.fixture
def victim(cluster):
    with fresh_namespace(cluster, "prod") as name:
        yield name


@pytest.fixture
def gold(cluster, tenant):
    name = f"llmb-gold-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 1000}))
    grant(cluster, TENANT, tenant, "use-gold", [{"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"],
                                                 "resourceNames": [name], "verbs": ["use"]}])
    yield name
    cluster.kubectl("delete", "priorityclass", name, "--wait=false", check=False)


# Fixed (was a strict xfail): FINDING (medium) the pool drained another namespace for pods the tenant's GPU quota
# refused: run.py _share_pools reads the namespace's ResourceQuotas and caps the claim (pool.quota_replicas)
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
