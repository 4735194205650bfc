"""Attacks on the GPU pool shared by priority (autoscaling/pool.py) by a TENANT on the real control plane: a user who
may create, edit and delete LLMBackends in one namespace and nothing else (no pods, no PriorityClasses, no RBAC),
behind the shipped admission policy (manifests/default/admission-policy.yaml), acting through `kubectl --as`.
The victim is another namespace's backend, made by an admin.

Probes that hold assert the claim plainly; probes that break assert the SAFE behaviour and are
xfail(strict=True) with the finding (none open now: fixed ones keep it as a comment). Two backends pinned to one
8-GPU node each ask for it whole through a schedule floor (kwok pods serve no metrics, so the floor is what each
one's autoscaler wants), as in test_gpu_pool_e2e.py.
"""

from __future__ import annotations

import time

import pytest
import yaml
from conftest import (
    apply_as,
    apply_as_once_admitted,
    apply_manifest,
    autoscaling_status,
    deployment_replicas,
    wait_for,
)
from pool_support import floor_backend, grant_use, priority_classes

TENANT = "tenant-mallory"
# 8 GPUs each, one GPU per replica of the e2e model: one node per test, so that a test's backends, still counted
# while their namespace is deleted, are in no other test's pool
NODES = {"numbers": "dgx-h100-0", "quota": "dgx-h100-1", "leak": "dgx-h100-2", "join": "dgx-h100-3"}


def as_tenant(cluster, *args, **kwargs):
    return cluster.kubectl(*args, "--as", TENANT, check=False, **kwargs)


def apply_as_tenant(cluster, manifest):
    return apply_as(cluster, TENANT, manifest)


@pytest.fixture
def gold_class(cluster):
    with priority_classes(cluster, {"gold": 1000}) as names:
        yield names["gold"]


def _clear(cluster, node):
    """The node, once no backend selects it: a test's backends are counted until its namespace is gone."""
    wait_for(lambda: not [b for b in cluster.kube.list("LLMBackend", None)
                          if (b["spec"].get("scheduling") or {}).get("nodeSelector", {}).get(
                              "kubernetes.io/hostname") == node], timeout=180, what=f"no backend left on {node}")
    return node


def _tenant_apply_ok(cluster, manifest):
    return apply_as_once_admitted(cluster, TENANT, manifest)


def test_a_tenant_cannot_name_a_priority_class_it_may_not_use_nor_take_gpus_with_a_priority_number(
        cluster, operator, tenant, victim, gold_class):
    apply_manifest(cluster, floor_backend("model", victim, 8, NODES["numbers"]))
    wait_for(lambda: deployment_replicas(cluster, victim, "model") == 8, timeout=90, what="the victim on all 8 GPUs")

    # the admin's class: refused at admission (no `use` on priorityclasses, no `create pods`)
    deadline = time.monotonic() + 30
    while True:
        refused = apply_as_tenant(cluster, floor_backend("grab", tenant, 8, NODES["numbers"], priority_class=gold_class))
        if refused.returncode != 0 or time.monotonic() > deadline:
            break
        as_tenant(cluster, "delete", "llmb", "grab", "-n", tenant, "--wait=false")
        time.sleep(0.5)
    assert refused.returncode != 0 and "priorityClassName" in refused.stderr, refused.stderr
    # a class that does not exist: refused the same way (a name the tenant was not granted)
    missing = apply_as_tenant(cluster, floor_backend("grab", tenant, 8, NODES["numbers"], priority_class="no-such-class"))
    assert missing.returncode != 0, missing.stderr

    # the highest priority number the API takes, and many backends: compared only within the tenant's namespace
    grabbers = ("graba", "grabb", "grabc")
    for name in grabbers:
        _tenant_apply_ok(cluster, floor_backend(name, tenant, 8, NODES["numbers"], min_replicas=8, priority=1_000_000))
    wait_for(lambda: all(autoscaling_status(cluster, tenant, name).get("reason") for name in grabbers), timeout=60,
             what="the tenant's backends decided")
    time.sleep(5)  # a few more syncs
    assert deployment_replicas(cluster, victim, "model") == 8
    assert autoscaling_status(cluster, victim, "model").get("preemptedBy") is None
    assert operator.proc.poll() is None, operator.log_tail()


# Found by the attacker pass (was a break (high): GPUs no pod of the tenant holds counted as held in the pool);
# fixed: autoscaling/holding.py held_replicas.
@pytest.mark.parametrize("how", ["quota", "unschedulable"])
def test_gpus_no_pod_of_the_tenant_holds_do_not_count_as_held_against_another_namespace(cluster, operator, tenant,
                                                                                        victim, how):
    node = _clear(cluster, NODES["quota"])
    hog = floor_backend("hog", tenant, 8, node, min_replicas=8)
    if how == "quota":  # the admin gave the tenant no GPUs: its ReplicaSet's pods are refused (exceeded quota)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-gpus", "namespace": tenant},
            "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}))
    else:  # no admin at all: memory no node has (spec.scheduling.resources), so the pods stay Pending, unbound
        hog["spec"]["scheduling"]["resources"] = {"memory": "100Ti"}
    _tenant_apply_ok(cluster, hog)
    wait_for(lambda: deployment_replicas(cluster, tenant, "hog") == 8, timeout=90, what="the tenant's Deployment at 8 replicas")
    time.sleep(3)
    bound = [p["metadata"]["name"] for p in cluster.kube.list("Pod", tenant)
             if p["spec"].get("nodeName") and any("nvidia.com/gpu" in ((c.get("resources") or {}).get("requests") or {})
                                                 for c in p["spec"]["containers"])]
    assert bound == [], "no serving pod of the tenant may hold a GPU"

    apply_manifest(cluster, floor_backend("model", victim, 8, node))
    # (today it is capped at its minReplicas: waitingForCapacity "held by <tenant>/hog (priority 0): 8 GPU(s)")
    wait_for(lambda: autoscaling_status(cluster, victim, "model").get("reason"), timeout=60, what="the victim decided")
    # the SAFE behaviour: nothing holds the node's 8 GPUs, so the victim gets them and keeps them (a new backend's
    # first decision can go out before the pool caps it, so a moment at 8 proves nothing:
    # test_a_backend_joining_a_full_pool_writes_no_more_than_its_share)
    def victim_has_the_gpus():
        status = autoscaling_status(cluster, victim, "model")
        return (deployment_replicas(cluster, victim, "model") == 8 and status.get("reason") not in (None, "AwaitingMetrics")
                and not status.get("waitingForCapacity"))

    try:
        wait_for(victim_has_the_gpus, timeout=60, what="the victim on the 8 idle GPUs")
        time.sleep(5)
        assert victim_has_the_gpus(), "the victim lost the idle GPUs again"
    except AssertionError as exc:
        status = autoscaling_status(cluster, victim, "model")
        raise AssertionError(f"{exc}; the victim's status.autoscaling: reason {status.get('reason')}, "
                             f"waitingForCapacity {status.get('waitingForCapacity')!r}") from None


# Found by the attacker pass (was a break (low-medium, information leak across the trust boundary): a tenant that puts a backend on another...); fixed.
def test_a_tenant_learns_nothing_of_another_namespace_from_its_own_status(cluster, operator, tenant, victim):
    apply_manifest(cluster, floor_backend("secret-model", victim, 8, NODES["leak"]))
    wait_for(lambda: deployment_replicas(cluster, victim, "secret-model") == 8, timeout=90, what="the victim on all 8 GPUs")
    assert as_tenant(cluster, "get", "llmb", "-n", victim).returncode != 0  # the tenant may not look there

    _tenant_apply_ok(cluster, floor_backend("probe", tenant, 2, NODES["leak"]))

    def seen():
        proc = as_tenant(cluster, "get", "llmb", "probe", "-n", tenant, "-o", "yaml")
        assert proc.returncode == 0, proc.stderr
        waiting = (((yaml.safe_load(proc.stdout) or {}).get("status") or {}).get("autoscaling") or {}).get(
            "waitingForCapacity")
        return waiting

    waiting = wait_for(seen, timeout=60, what="the tenant's backend waiting for capacity")
    assert victim not in waiting and "secret-model" not in waiting, waiting


# Found by the attacker pass (was a break (low): a backend's first decision goes out before the pool caps it. run.py _evaluate publishes...); fixed.
def test_a_backend_joining_a_full_pool_writes_no_more_than_its_share(cluster, operator, tenant, victim):
    node = NODES["join"]
    apply_manifest(cluster, floor_backend("model", victim, 8, node))
    wait_for(lambda: deployment_replicas(cluster, victim, "model") == 8
             and autoscaling_status(cluster, victim, "model").get("reason") not in (None, "AwaitingMetrics"),
             timeout=90, what="the victim on all 8 GPUs")
    # a race (the reconciler against _share_pools): five newcomers, one after another, so that one shows it
    seen: dict[str, set] = {}
    for name in ("newcomera", "newcomerb", "newcomerc", "newcomerd", "newcomere"):
        _tenant_apply_ok(cluster, floor_backend(name, tenant, 8, node))
        seen[name] = set()
        # its serving workload waits for its own download first (issue 42): watch until the pool has capped it
        deadline, capped = time.monotonic() + 60, False
        while time.monotonic() < deadline and not capped:
            seen[name].add(deployment_replicas(cluster, tenant, name))
            capped = bool(autoscaling_status(cluster, tenant, name).get("waitingForCapacity"))
            time.sleep(0.05)
        for _ in range(20):  # and a second longer, for a write that would come after the cap
            seen[name].add(deployment_replicas(cluster, tenant, name))
            time.sleep(0.05)
        assert capped, f"{name} never got its share"
    overshoots = {name: sorted(r for r in replicas if r is not None) for name, replicas in seen.items()
                  if max((r for r in replicas if r is not None), default=0) > 1}
    assert overshoots == {}, f"Deployments that went above their share of 1: {overshoots}"


# Found by the attacker pass (was a break (medium): with a PriorityClass it may use, a tenant whose pods can never run
# (memory no node has) drained another namespace's replicas above minReplicas once, before any of its pods existed to
# show they could not be placed); fixed: the reconciler judges the rendered pod against the pool's nodes with the
# kube-scheduler's filters (planning/podfit.py) and such a demand claims nothing (autoscaling/pool.py).
def test_a_tenant_with_a_class_cannot_drain_another_namespace_for_pods_that_never_run(cluster, operator, tenant,
                                                                                      victim, gold_class):
    node = _clear(cluster, NODES["quota"])
    bronze = f"{gold_class}-bronze"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": bronze}, "value": 0}]))
    # the admin lets the tenant use gold (verb use on that PriorityClass), as docs/security.md describes
    grant_use(cluster, TENANT, tenant, gold_class)
    try:
        apply_manifest(cluster, floor_backend("model", victim, 8, node, priority_class=bronze))
        wait_for(lambda: deployment_replicas(cluster, victim, "model") == 8
                 and autoscaling_status(cluster, victim, "model").get("reason") not in (None, "AwaitingMetrics"),
                 timeout=90, what="the victim on all 8 GPUs")
        hog = floor_backend("hog", tenant, 8, node, priority_class=gold_class)
        hog["spec"]["scheduling"]["resources"] = {"memory": "100Ti"}
        _tenant_apply_ok(cluster, hog)
        wait_for(lambda: autoscaling_status(cluster, tenant, "hog").get("reason") not in (None, "AwaitingMetrics"),
                 timeout=60, what="the tenant's backend decided")
        assert not [p for p in cluster.kube.list("Pod", tenant) if p["spec"].get("nodeName")
                    and p["metadata"]["name"].startswith("hog-")], "a pod of the tenant's backend was bound"
        # the victim keeps its 8 replicas (before the fix: 1, preemptedBy "<tenant>/hog (priority 1000)")
        for _ in range(20):
            assert deployment_replicas(cluster, victim, "model") == 8, autoscaling_status(cluster, victim, "model").get("preemptedBy")
            time.sleep(0.5)
        assert autoscaling_status(cluster, victim, "model").get("preemptedBy") is None
        # and the tenant reads why its backend does not grow, and what to change
        waiting = wait_for(lambda: autoscaling_status(cluster, tenant, "hog").get("waitingForCapacity"), timeout=30,
                           what="the tenant's backend saying why its demand is not claimed")
        assert "not claimed from the GPU pool" in waiting and "Insufficient memory" in waiting, waiting
        assert "it requests memory 100Ti, the most a node of the pool has is 2Ti" in waiting, waiting
    finally:
        cluster.kubectl("delete", "priorityclass", bronze, "--wait=false", check=False)
