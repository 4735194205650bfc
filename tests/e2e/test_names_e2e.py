"""Issue 42 on the real API server: backend names cannot collide, and reports come only from the Job's own pods.

- A tenant (a user who may only edit LLMBackends in its namespace) cannot create `llama-0` next to `llama` (the
  name of `llama`'s LeaderWorkerSet group 0), nor set the labels the operator selects a Job's pods by.
- A backend stored before the name rule stays updatable and its status writable (the rule is a transition rule).
- A pod that carries a Job's labels but is not controlled by it (by uid) is not read as the Job's report.
The launcher exec policy's side is in tests/e2e/test_launcher_admission.py.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
import yaml
from conftest import REPO_ROOT, apply_manifest, available, backend_manifest, condition, wait_for

from llmbackend.api.v1alpha1 import ModelSource
from llmbackend.render import modelcache as mc
from llmbackend.render.names import BackendRef, labels_for

TENANT = "tenant-names"
CRD = REPO_ROOT / "crds/llmbackend.yaml"
NAME_MESSAGE = "metadata.name must not end with '-' and digits"


@pytest.fixture
def tenant_namespace(cluster, namespace):
    """TENANT may read and write LLMBackends in `namespace` and do nothing else."""
    rules = [{"apiGroups": ["llmbackend.dev"], "resources": ["llmbackends"],
              "verbs": ["get", "list", "create", "update", "patch", "delete"]}]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "editor", "namespace": namespace},
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "editor", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "editor"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}]}]))
    return namespace


def as_tenant(cluster, manifest: dict):
    return cluster.kubectl("apply", "--as", TENANT, "-f", "-", input=yaml.safe_dump(manifest), check=False)


def test_a_tenant_cannot_create_a_backend_named_like_another_backend_s_group(cluster, tenant_namespace):
    assert as_tenant(cluster, backend_manifest("llama", tenant_namespace)).returncode == 0
    for name in ("llama-0", "llama-0-1", "llama-3"):
        refused = as_tenant(cluster, backend_manifest(name, tenant_namespace))
        assert refused.returncode != 0 and NAME_MESSAGE in refused.stderr, (name, refused.stderr)
        assert cluster.kube.get("LLMBackend", tenant_namespace, name) is None
    assert as_tenant(cluster, backend_manifest("llama-3-8b", tenant_namespace)).returncode == 0


@pytest.mark.parametrize("template", [
    {"labels": {"job-name": "llmb-fetch-0123456789abcdef"}},
    {"labels": {"controller-uid": "5f0c"}},
    {"labels": {"batch.kubernetes.io/job-name": "llmb-fetch-0123456789abcdef"}},
    {"labels": {"app.kubernetes.io/managed-by": "llmbackend-operator"}},
    {"annotations": {"batch.kubernetes.io/job-tracking": ""}},
])
def test_a_tenant_cannot_label_serving_pods_as_a_job_s_pods(cluster, tenant_namespace, template):
    manifest = backend_manifest("forger", tenant_namespace, serving={"podTemplate": template})
    refused = as_tenant(cluster, manifest)
    assert refused.returncode != 0 and "they select pods by them" in refused.stderr, refused.stderr


def _crd_without_the_name_rules() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        schema["x-kubernetes-validations"] = [r for r in schema["x-kubernetes-validations"]
                                              if not r["rule"].startswith("oldSelf.hasValue() || ")]
    return crd


@pytest.mark.parametrize("stored", ["llama-7", "coll-epp"])
def test_a_backend_stored_before_the_name_rules_stays_updatable(cluster, namespace, stored):
    """The name rules apply when a backend is created: one stored before keeps its spec editable and its status
    writable. A root rule without oldSelf refuses every write to it, the operator's status included (seen: 422 on
    both, issue 24's suffix rule did so)."""
    kube = cluster.kube
    try:
        kube.apply(_crd_without_the_name_rules())
        wait_for(lambda: apply_manifest_ok(cluster, backend_manifest(stored, namespace)), timeout=30,
                 what=f"{stored} accepted by the CRD without the rules")
    finally:
        kube.apply(yaml.safe_load(CRD.read_text()))
    for probe in ("probe-9", "probe-epp"):
        wait_for(lambda probe=probe: not apply_manifest_ok(cluster, backend_manifest(probe, namespace)), timeout=30,
                 what=f"the CRD refuses {probe} again")
    # The status write's own answer is the check: the session's operator may rewrite status right after it.
    written = kube.patch_status("LLMBackend", namespace, stored, {"phase": "Degraded", "reason": "StoredBeforeTheRule"})
    assert written["status"]["reason"] == "StoredBeforeTheRule"
    patched = cluster.kubectl("patch", "llmb", stored, "-n", namespace, "--type=merge", "-p",
                              json.dumps({"spec": {"replicas": 2}}), check=False)
    assert patched.returncode == 0, patched.stderr
    assert kube.get("LLMBackend", namespace, stored)["spec"]["replicas"] == 2


def apply_manifest_ok(cluster, manifest: dict) -> bool:
    return cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=False).returncode == 0


def test_a_pod_with_the_inspector_job_s_labels_is_not_its_report(cluster, operator, namespace, tmp_path):
    """The probe: a serving pod labelled job-name=<Job> had its report read as that Job's. Here an admin-made pod
    with all of the inspector Job's pod labels reports a 405B checkpoint, finished after the Job's own pod; the
    backend is planned from its own pod's 8B report (kwok completes the Job's pod; the test writes the report the
    kubelet would)."""
    claim = "llmbackend-model-cache"
    cluster.kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
                         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                                  "resources": {"requests": {"storage": "10Gi"}}}})
    pvc = {"claimName": claim, "path": "/llama"}
    apply_manifest(cluster, backend_manifest("frompvc", namespace, model={"source": {"pvc": pvc}}))
    job_name = mc.inspect_job_name("frompvc", ModelSource.model_validate({"pvc": pvc}).pvc)
    job = wait_for(lambda: cluster.kube.get("Job", namespace, job_name), timeout=60, what="inspector Job")

    def report(architecture: dict) -> str:
        return json.dumps({"phase": "Ready", "architecture": architecture})
    small = {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "numKeyValueHeads": 8, "headDim": 128,
             "vocabSize": 128256, "parameterCount": 8_030_261_248, "weightBytes": 16_060_522_496}
    huge = {**small, "numLayers": 126, "hiddenSize": 16384, "numAttentionHeads": 128, "parameterCount": 405_000_000_000,
            "weightBytes": 810_000_000_000}

    own = wait_for(lambda: next((p for p in cluster.kube.list("Pod", namespace, label_selector=f"job-name={job_name}")
                                 if p["status"].get("phase") == "Succeeded"), None), timeout=60, what="inspector pod")
    time.sleep(1.1)  # the forged pod is the newer one (creationTimestamp has one-second resolution)
    labels = {**own["metadata"]["labels"], **labels_for(BackendRef("frompvc", namespace, "x"), "model-inspect")}
    forged = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "forged", "namespace": namespace, "labels": labels},
              "spec": {"nodeName": "no-such-node", "restartPolicy": "Never",
                       "containers": [{"name": "inspect", "image": "busybox"}]}}
    cluster.kube.create(forged)
    terminated = {"exitCode": 0, "reason": "Completed", "startedAt": "2026-12-01T00:00:00Z",
                  "finishedAt": "2026-12-01T00:00:01Z"}
    cluster.kube.patch_status("Pod", namespace, "forged", {"phase": "Succeeded", "containerStatuses": [
        {"name": "inspect", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": {**terminated, "message": report(huge)}}}]})
    statuses = copy.deepcopy(own["status"]["containerStatuses"])
    statuses[0]["state"]["terminated"]["message"] = report(small)
    cluster.kube.patch_status("Pod", namespace, own["metadata"]["name"], {"containerStatuses": statuses})

    # The first plan is the one to check: read from the forged report, it would be 405B's (the pod may be
    # garbage-collected later, as bound to no node, and a later pass plan 8B again).
    planned = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "frompvc")) and (o.get("status") or {})
                       .get("plan") and o, timeout=90, what="frompvc planned")
    plan = planned["status"]["plan"]
    assert plan["tensorParallel"] == 1 and plan.get("nodesPerReplica", 1) == 1, plan
    obj = wait_for(lambda: available(cluster, namespace, "frompvc"), timeout=90, what="frompvc Available=True")
    assert (condition(obj, "ModelReady") or {}).get("reason") == "CheckpointInspected"
    assert job["metadata"]["uid"] in [r["uid"] for r in own["metadata"]["ownerReferences"]]
