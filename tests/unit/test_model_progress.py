"""The model-cache step tells work in flight from stuck work and names the cause (controller/modelcache.py):
a fetch pod Pending on a claim without StorageClass, one that cannot be scheduled, an image that cannot be
pulled, a Job without a pod; and a cache claim sized from what is known, never a guess."""

from __future__ import annotations

from typing import Any

import pytest

from llmbackend.api import conditions as cond
from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller import modelcache
from llmbackend.controller.fakekube import FakeKube
from llmbackend.render import modelcache as mc
from llmbackend.render.names import BackendRef

NS = "serving"
T = "2026-12-01T10:00:00Z"


def spec(model: dict[str, Any]) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({"model": model})


def pod_of(kube: FakeKube, job_name: str, status: dict[str, Any]) -> dict[str, Any]:
    """A pod of the Job as the Job controller creates it (its controller ownerReference names the Job's uid)."""
    uid = kube.objects[("Job", NS, job_name)]["metadata"]["uid"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job_name}-x", "namespace": NS, "creationTimestamp": T,
                         "labels": {"app.kubernetes.io/managed-by": "llmbackend-operator", "job-name": job_name},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": uid,
                                              "controller": True}]},
            "status": status}


def pending(message: str) -> dict[str, Any]:
    return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                "message": message, "lastTransitionTime": T}]}


UNBOUND = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available."
SOURCE = {"uri": "s3://models/llama"}


def first_sync(kube: FakeKube, model: dict[str, Any]):
    return modelcache.sync_model_cache(kube, NS, spec(model), owner=BackendRef("llama", NS, "u-1"))


def test_a_fetch_pod_waiting_on_a_claim_without_storage_class_says_so():
    kube = FakeKube()
    model = {"preset": "llama-3.1-8b", "source": SOURCE}
    first_sync(kube, model)
    job = mc.download_job_name(spec(model).model.source)
    kube.objects[("Pod", NS, f"{job}-x")] = pod_of(kube, job, pending(UNBOUND))
    result = first_sync(kube, model)
    assert result.stuck and result.reason == cond.NO_STORAGE_CLASS and result.stuck_since == T
    assert "spec.model.source.cache.storageClassName" in result.message and "ReadWriteMany" in result.message


def test_a_claim_with_a_storage_class_that_does_not_bind_names_the_class_and_access_mode():
    kube = FakeKube()
    model = {"preset": "llama-3.1-8b", "source": {**SOURCE, "cache": {"storageClassName": "standard"}}}
    first_sync(kube, model)
    job = mc.download_job_name(spec(model).model.source)
    kube.objects[("Pod", NS, f"{job}-x")] = pod_of(kube, job, pending(UNBOUND))
    result = first_sync(kube, model)
    assert result.reason == cond.CACHE_CLAIM_NOT_BOUND
    assert "StorageClass standard" in result.message and "ReadWriteMany" in result.message


@pytest.mark.parametrize("status, reason, since", [
    (pending("0/3 nodes are available: 3 Insufficient cpu."), cond.FETCH_POD_UNSCHEDULABLE, T),
    ({"phase": "Pending", "containerStatuses": [{"name": "fetch", "image": "registry/op:1",
                                                 "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]},
     cond.DOWNLOADER_IMAGE_PULL_FAILED, None),
])
def test_a_fetch_pod_that_does_not_start_names_the_cause(status, reason, since):
    kube = FakeKube()
    model = {"preset": "llama-3.1-8b", "source": SOURCE}
    first_sync(kube, model)
    job = mc.download_job_name(spec(model).model.source)
    kube.objects[("Pod", NS, f"{job}-x")] = pod_of(kube, job, status)
    result = first_sync(kube, model)
    assert (result.stuck, result.reason, result.stuck_since) == (True, reason, since)


def test_a_job_without_a_pod_is_told_apart_from_one_just_created():
    job = {"metadata": {"name": "llmb-fetch-1", "creationTimestamp": T}}
    created = 1796119200.0  # T as a Unix time
    assert modelcache.stuck_pod(job, [], None, "download", now=created + 10) is None
    reason, message, since = modelcache.stuck_pod(job, [], None, "download", now=created + 120)
    assert reason == cond.FETCH_POD_NOT_CREATED and "ResourceQuota" in message and since == T


def test_an_inspector_pod_on_an_unbound_claim_asks_to_bind_the_checkpoints_volume():
    kube = FakeKube()
    kube.objects[("PersistentVolumeClaim", NS, "models")] = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteMany"]}, "status": {"phase": "Pending"}}
    model = {"source": {"pvc": {"claimName": "models", "path": "/llama"}}}
    first_sync(kube, model)
    job = mc.inspect_job_name("llama", spec(model).model.source.pvc)
    kube.objects[("Pod", NS, f"{job}-x")] = pod_of(kube, job, pending(UNBOUND))
    result = first_sync(kube, model)
    assert result.reason == cond.CACHE_CLAIM_NOT_BOUND and "bind the PersistentVolume" in result.message


def test_a_missing_pvc_source_needs_a_person_now():
    result = first_sync(FakeKube(), {"source": {"pvc": {"claimName": "nope"}}})
    assert result.stuck and result.stuck_since is None and result.reason == "ClaimNotFound"


def claim_size(kube: FakeKube) -> str:
    return kube.objects[("PersistentVolumeClaim", NS, mc.DEFAULT_CACHE_CLAIM)]["spec"]["resources"]["requests"]["storage"]


def test_the_cache_claim_is_sized_from_the_preset_not_a_guess():
    kube = FakeKube()
    first_sync(kube, {"preset": "llama-3.1-70b", "source": SOURCE})
    assert int(claim_size(kube).removesuffix("Gi")) >= 140, "70B parameters in 16 bits, plus headroom"


def test_the_cache_claim_takes_source_cache_size_when_nothing_else_says():
    kube = FakeKube()
    first_sync(kube, {"source": {**SOURCE, "cache": {"size": "300Gi"}}})
    assert claim_size(kube) == "300Gi"


def test_an_unknown_size_is_a_condition_and_no_claim_is_made():
    kube = FakeKube()
    result = first_sync(kube, {"source": SOURCE})
    assert result.reason == cond.CACHE_SIZE_UNKNOWN and result.stuck and result.stuck_since is None
    assert "spec.model.source.cache.size" in result.message
    assert ("PersistentVolumeClaim", NS, mc.DEFAULT_CACHE_CLAIM) not in kube.objects
    assert not [o for o in kube.created if o["kind"] == "Job"]


def test_a_download_no_backend_names_is_cancelled_then_cleaned_and_resumed_when_named_again():
    kube = FakeKube()
    model = {"preset": "llama-3.1-8b", "source": SOURCE}
    first_sync(kube, model)
    job = mc.download_job_name(spec(model).model.source)
    kube.objects[("Pod", NS, f"{job}-x")] = pod_of(kube, job, {"phase": "Running"})

    # The backend is gone (deleted, or its source edited): the download stops at the next pass in the namespace.
    assert modelcache.cleanup_model_caches(kube, NS) is True, "the cleanup waits for the cancelled pod"
    assert kube.objects[("Job", NS, job)]["spec"]["suspend"] is True
    assert not [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]

    del kube.objects[("Pod", NS, f"{job}-x")]  # the Job controller deleted the suspended Job's pod
    assert modelcache.cleanup_model_caches(kube, NS) is False
    assert [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    assert ("Job", job) in kube.deleted, "the prune path takes over: the stale Job goes with its copy"


def test_a_cancelled_download_named_again_resumes():
    kube = FakeKube()
    model = {"preset": "llama-3.1-8b", "source": SOURCE}
    first_sync(kube, model)
    job = mc.download_job_name(spec(model).model.source)
    kube.objects[("Job", NS, job)]["spec"]["suspend"] = True
    first_sync(kube, model)
    assert kube.objects[("Job", NS, job)]["spec"]["suspend"] is False
