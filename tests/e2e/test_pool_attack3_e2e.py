"""Third attacker pass on the GPU pool, on the real control plane (kube-apiserver, controller-manager, scheduler,
kwok): the one e2e probe, for finding 2 of tests/unit/test_pool_attack3.py.

A ResourceQuota on count/replicasets.apps (the admin's; a tenant fills it with its own Deployments' revision
history, ten old ReplicaSets per Deployment by default) makes the Deployment controller fail to create the
ReplicaSet. The controller then says so in Progressing=False (reason ReplicaSetCreateError), never in
ReplicaFailure, which is the only refusal held_replicas reads: no pod ever exists, and every replica reads as held.
"""

from __future__ import annotations

import pytest
from conftest import condition, wait_for

from llmbackend.autoscaling.holding import held_replicas
from llmbackend.controller.kube import KINDS
from llmbackend.render.names import BACKEND_LABEL

KINDS.setdefault("ResourceQuota", ("v1", "resourcequotas"))
REPLICAS = 2


def _deployment(namespace: str) -> dict:
    labels = {BACKEND_LABEL: "hog", "app.kubernetes.io/component": "server"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hog", "namespace": namespace},
            "spec": {"replicas": REPLICAS, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                         {"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                         "containers": [{"name": "server", "image": "example.invalid/server:1",
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


# Fixed (was a strict xfail): FINDING 2 (medium): a Deployment whose ReplicaSet a quota refused has Progressing=False
# ReplicaSetCreateError and no ReplicaFailure; held_replicas counts all its replicas as held though no pod exists
def test_a_deployment_whose_replicaset_a_quota_refused_holds_no_gpus(cluster, namespace):
    kube = cluster.kube
    try:
        kube.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "rs", "namespace": namespace},
                     "spec": {"hard": {"count/replicasets.apps": "0"}}})
        wait_for(lambda: ((kube.get("ResourceQuota", namespace, "rs") or {}).get("status") or {}).get("hard"),
                 timeout=60, what="the quota controller's status of the ReplicaSet quota")
        kube.create(_deployment(namespace))

        def refused():
            obj = kube.get("Deployment", namespace, "hog")
            progressing = condition(obj, "Progressing")
            return obj if progressing and progressing.get("reason") == "ReplicaSetCreateError" else None
        deployment = wait_for(refused, timeout=90, what="the Deployment controller's ReplicaSetCreateError")
    except AssertionError as exc:  # the setup, not the finding: fail plainly, never as the expected failure
        pytest.fail(f"setup: {exc}")
    pods = kube.list("Pod", namespace, label_selector=f"{BACKEND_LABEL}=hog")
    if pods or condition(deployment, "ReplicaFailure") or kube.list("ReplicaSet", namespace):
        pytest.fail(f"setup: expected no pod, no ReplicaSet and no ReplicaFailure: {pods}, {deployment['status']}")
    held = held_replicas(REPLICAS, pods, deployment)
    assert held == 0, (f"no ReplicaSet, no pod, conditions {deployment['status'].get('conditions')}: "
                       f"{held} of {REPLICAS} replicas read as holding GPUs")
