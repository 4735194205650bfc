"""A second attacker pass on the GPU pool shared by priority, on the real control plane, as a TENANT: a user who may
create, edit and delete LLMBackends in one namespace (and, where a probe says so, `use` one PriorityClass the admin
granted), behind the shipped admission policy, acting through `kubectl --as`. The victim is another namespace's
backend, made by an admin. Probes that break a claim of docs/security.md assert the SAFE behaviour and are
xfail(strict=True) with the finding and its severity (tests/unit/test_pool_attack2.py has the pure probes).

The first lever: a toleration the CRD admits and the API server refuses in a pod template ({operator: Exists, value: x}).
The operator renders it as written, so the backend's Deployment is refused (422) and no pod ever exists; but the
reconciler registered the backend with the autoscaler loop before it applied anything, its pod passes podfit (which
does not ask whether the pod may exist), and a Deployment that does not exist makes held_replicas() "not known",
which counts every replica as held. The second: a multi-node backend (LeaderWorkerSet) has no Deployment at all, so
its replicas count as held whatever its pods do (here: none, a quota refused them). Both fixed: a Deployment known
absent holds nothing, and a multi-node backend's groups hold only what their pods hold (autoscaling/pool.py
held_replicas, controller/run.py _held).
"""

from __future__ import annotations

import time

import pytest
import yaml
from conftest import (
    apply_as_once_admitted,
    apply_manifest,
    autoscaling_status,
    backend_manifest,
    deployment_replicas,
    wait_for,
)
from pool_support import floor_backend, grant_use, priority_classes

TENANT = "tenant-eve"
NODES = {"class": "dgx-h100-0", "no-class": "dgx-h100-1", "lever": "dgx-h100-2"}  # 8 GPUs each, one GPU per replica of the e2e model
REFUSED_TOLERATION = {"key": "example.com/anything", "operator": "Exists", "value": "x"}


def as_tenant(cluster, *args, **kwargs):
    return cluster.kubectl(*args, "--as", TENANT, check=False, **kwargs)


@pytest.fixture
def classes(cluster, tenant):
    """gold (1000), which the admin lets the tenant `use`, and bronze (0), the victim's."""
    with priority_classes(cluster, {"gold": 1000, "bronze": 0}) as names:
        grant_use(cluster, TENANT, tenant, names["gold"])
        yield names["gold"], names["bronze"]


def _tenant_apply_ok(cluster, manifest):
    return apply_as_once_admitted(cluster, TENANT, manifest)


def _no_pod_and_no_deployment(cluster, namespace, name):
    """The phantom: the API server refused its Deployment, so no pod of it exists, and the operator says why."""
    assert cluster.kube.get("Deployment", namespace, name) is None
    assert not [p for p in cluster.kube.list("Pod", namespace) if p["metadata"]["name"].startswith(f"{name}-")]


def _refuse_deployments(cluster, namespace):
    """The lever since the CRD refuses the toleration: a ResourceQuota of no Deployments in the tenant's namespace
    (the admin's, or any object-count quota the namespace has used up) refuses the backend's Deployment (403)."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-deployments", "namespace": namespace},
        "spec": {"hard": {"count/deployments.apps": "0"}}}))


def test_the_crd_refuses_a_toleration_the_api_server_refuses_in_a_pod(cluster, operator, tenant):
    """The lever is gone: the API server refuses the tenant's backend itself (the CRD's rules, api/v1alpha1.py
    _TOLERATION_RULES), as it refuses the toleration in a pod; tests/e2e/test_pod_field_parity_e2e.py has the rest."""
    node = NODES["lever"]
    refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False, input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lever-probe", "namespace": tenant},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "tolerations": [REFUSED_TOLERATION]}}))
    assert refused.returncode != 0 and "operator" in refused.stderr, refused.stderr
    said = "value must be empty when operator is Exists"
    for _ in range(20):  # the admission policy's plugin may not have caught up yet: it refuses with its own words
        proc = as_tenant(cluster, "apply", "-f", "-", input=yaml.safe_dump(
            floor_backend("lever", tenant, 2, node, tolerations=[REFUSED_TOLERATION])))
        if proc.returncode == 0 or said in proc.stderr:
            break
        time.sleep(0.5)
    assert proc.returncode != 0 and said in proc.stderr, proc.stderr
    _no_pod_and_no_deployment(cluster, tenant, "lever")


# Found by the second attacker pass (was a break (high)); fixed: autoscaling/holding.py held_replicas (a Deployment
# known absent holds nothing).
def test_a_tenant_whose_deployment_is_refused_cannot_drain_another_namespace(cluster, operator, tenant, victim,
                                                                             classes):
    gold, bronze = classes
    node = NODES["class"]
    apply_manifest(cluster, floor_backend("model", victim, 8, node, priority_class=bronze))
    wait_for(lambda: deployment_replicas(cluster, victim, "model") == 8
             and autoscaling_status(cluster, victim, "model").get("reason") not in (None, "AwaitingMetrics"),
             timeout=120, what="the victim on all 8 GPUs")
    _refuse_deployments(cluster, tenant)
    _tenant_apply_ok(cluster, floor_backend("phantom", tenant, 8, node, min_replicas=8, priority_class=gold))
    time.sleep(8)  # the tenant's backend registered and a few syncs of the pool
    _no_pod_and_no_deployment(cluster, tenant, "phantom")
    # the SAFE behaviour: nothing of the tenant holds a GPU, so the victim keeps its 8 replicas
    for _ in range(20):
        assert deployment_replicas(cluster, victim, "model") == 8, autoscaling_status(cluster, victim, "model").get("preemptedBy")
        time.sleep(0.5)
    assert autoscaling_status(cluster, victim, "model").get("preemptedBy") is None


# Found by the second attacker pass (was a break (medium)); fixed: autoscaling/holding.py held_replicas.
def test_a_tenant_whose_deployment_is_refused_holds_back_no_gpus(cluster, operator, tenant, victim):
    node = NODES["no-class"]
    _refuse_deployments(cluster, tenant)
    _tenant_apply_ok(cluster, floor_backend("phantom", tenant, 8, node, min_replicas=8))
    wait_for(lambda: autoscaling_status(cluster, tenant, "phantom").get("reason") not in (None, "AwaitingMetrics"),
             timeout=60, what="the tenant's backend decided")
    _no_pod_and_no_deployment(cluster, tenant, "phantom")
    apply_manifest(cluster, floor_backend("model", victim, 8, node))
    wait_for(lambda: autoscaling_status(cluster, victim, "model").get("reason") not in (None, "AwaitingMetrics"),
             timeout=60, what="the victim decided")

    def victim_has_the_gpus():
        status = autoscaling_status(cluster, victim, "model")
        return deployment_replicas(cluster, victim, "model") == 8 and not status.get("waitingForCapacity")

    try:
        wait_for(victim_has_the_gpus, timeout=30, what="the victim on the 8 idle GPUs")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; replicas {deployment_replicas(cluster, victim, 'model')}, waitingForCapacity "
                             f"{autoscaling_status(cluster, victim, 'model').get('waitingForCapacity')!r}") from None


# Found by the second attacker pass (was a break (high)); fixed: autoscaling/holding.py held_replicas (groups from their
# pods) and controller/run.py _held.
def test_a_multi_node_tenant_with_no_gpu_quota_cannot_drain_another_namespace(cluster, operator, tenant, victim,
                                                                             classes, lws):
    gold, bronze = classes
    # every node: the pool of a backend with no node selector is all four (32 GPUs); earlier tests' backends gone
    wait_for(lambda: not [b for b in cluster.kube.list("LLMBackend", None)
                          if b["metadata"]["namespace"] not in (tenant, victim)], timeout=180,
             what="no other backend left in the pool")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-gpus", "namespace": tenant},
        "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}))
    model = backend_manifest("model", victim, scheduling={"priorityClassName": bronze}, autoscaling={
        "enabled": True, "minReplicas": 1, "maxReplicas": 32, "syncPeriodSeconds": 1,
        "schedule": [{"start": "* * * * *", "end": "0 0 1 1 *", "desiredReplicas": 32}]})
    apply_manifest(cluster, model)
    wait_for(lambda: deployment_replicas(cluster, victim, "model") == 32
             and autoscaling_status(cluster, victim, "model").get("reason") not in (None, "AwaitingMetrics"),
             timeout=180, what="the victim on all 32 GPUs")
    big = backend_manifest("big", tenant, model={"preset": "llama-3.1-405b",
                                                 "source": {"uri": "s3://models/llama-3.1-405b"}},
                           parallelism={}, scheduling={"priorityClassName": gold},
                           autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 2, "syncPeriodSeconds": 1})
    _tenant_apply_ok(cluster, big)
    wait_for(lambda: cluster.kube.get("LeaderWorkerSet", tenant, "big") is not None, timeout=60,
             what="the tenant's LeaderWorkerSet")
    time.sleep(8)
    assert not [p for p in cluster.kube.list("Pod", tenant) if p["metadata"]["name"].startswith("big-")
                and any("nvidia.com/gpu" in ((c.get("resources") or {}).get("requests") or {})
                        for c in p["spec"]["containers"])], "the quota let a GPU pod of the tenant exist"
    # the SAFE behaviour: nothing of the tenant holds a GPU, so the victim keeps its 32 replicas
    for _ in range(20):
        assert deployment_replicas(cluster, victim, "model") == 32, autoscaling_status(cluster, victim, "model").get("preemptedBy")
        time.sleep(0.5)


def test_a_running_multi_node_group_holds_its_gpus_against_another_namespace(cluster, operator, tenant, victim, lws):
    """The other side of the fix above: a group whose pods all run holds its GPUs (16: a leader and a worker of 8),
    with its workers counted (the autoscaler lists the leaders only), so an equal backend of another namespace grows
    into the other 16 GPUs and waits for the rest."""
    wait_for(lambda: not [b for b in cluster.kube.list("LLMBackend", None)
                          if b["metadata"]["namespace"] not in (tenant, victim)], timeout=180,
             what="no other backend left in the pool")
    big = backend_manifest("big", tenant, model={"preset": "llama-3.1-405b",
                                                 "source": {"uri": "s3://models/llama-3.1-405b"}},
                           parallelism={}, autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 1,
                                                        "syncPeriodSeconds": 1})
    _tenant_apply_ok(cluster, big)

    def group_bound():
        pods = [p for p in cluster.kube.list("Pod", tenant) if p["metadata"]["name"].startswith("big-")
                and "leaderworkerset.sigs.k8s.io/group-index" in (p["metadata"].get("labels") or {})]
        return len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)

    wait_for(group_bound, timeout=120, what="the tenant's group (leader and worker) bound to nodes")
    model = backend_manifest("model", victim, autoscaling={
        "enabled": True, "minReplicas": 1, "maxReplicas": 32, "syncPeriodSeconds": 1,
        "schedule": [{"start": "* * * * *", "end": "0 0 1 1 *", "desiredReplicas": 32}]})
    apply_manifest(cluster, model)
    wait_for(lambda: deployment_replicas(cluster, victim, "model") == 16
             and "1 backend(s) of other namespaces: 16 GPU(s)" in (
                 autoscaling_status(cluster, victim, "model").get("waitingForCapacity") or ""),
             timeout=120, what="the other namespace's backend on the 16 free GPUs, waiting for the group's")
    for _ in range(6):
        assert deployment_replicas(cluster, victim, "model") == 16, autoscaling_status(cluster, victim, "model")
        time.sleep(0.5)
