"""The operator's model-cache step (controller/modelcache.py) on a fake API server and the Hub-shaped server:
create-if-missing of the shared claim and Job, status.model, ModelReady, architecture from the checkpoint."""

from __future__ import annotations

import copy
import json

from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller import modelcache as cmc
from llmbackend.controller.fakekube import FakeKube
from llmbackend.render import modelcache as mc


def spec(source: dict, **model) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({"model": {"source": source, **model}})


def job_pod(kube: FakeKube, job: str, state: dict, name: str = "fetch-1") -> None:
    # A Job's pods carry its template's labels (the managed-by label the operator's pod watch selects on).
    template_labels = kube.objects[("Job", "serving", job)]["spec"]["template"]["metadata"]["labels"]
    kube.objects[("Pod", "serving", name)] = {
        "metadata": {"name": name, "labels": {**template_labels, "job-name": job}, "creationTimestamp": "2026-12-03T00:00:00Z"},
        "status": {"containerStatuses": [{"name": "fetch", "state": state}]},
    }


def test_one_claim_and_one_job_for_two_backends_of_one_model(hub) -> None:
    kube = FakeKube()
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}
    first = cmc.sync_model_cache(kube, "serving", spec(source))
    second = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert [o["kind"] for o in kube.created] == ["PersistentVolumeClaim", "Job"]
    assert all("ownerReferences" not in o["metadata"] for o in kube.created)
    # The architecture came from config.json and the index over HTTPS, before any download.
    arch = first.spec.model.architecture
    assert arch.num_layers == 32 and arch.weight_bytes == 1_800_000
    assert second.spec.model.architecture is None and second.spec.model.preset == "llama-3.1-8b"
    assert (first.ready, first.reason, first.status["phase"]) == (False, "Downloading", "Downloading")
    assert kube.created[0]["spec"]["resources"]["requests"]["storage"] == "10Gi"


def test_progress_from_the_running_pod_then_ready(hub) -> None:
    kube = FakeKube()
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}
    cmc.sync_model_cache(kube, "serving", spec(source))
    name = mc.download_job_name(spec(source).model.source)
    job_pod(kube, name, {"running": {}})
    kube.logs["fetch-1"] = json.dumps({"phase": "Downloading", "bytesDone": 700, "bytesTotal": 1800, "resolvedRevision": "abc"})
    running = cmc.sync_model_cache(kube, "serving", spec(source))
    assert (running.status["bytesDone"], running.status["bytesTotal"], running.status["resolvedRevision"]) == (700, 1800, "abc")
    kube.objects[("Job", "serving", name)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    job_pod(kube, name, {"terminated": {"exitCode": 0, "message": json.dumps(
        {"phase": "Ready", "resolvedRevision": "abc", "bytesTotal": 1800, "path": "hf/acme/tiny-llama/abc"})}})
    done = cmc.sync_model_cache(kube, "serving", spec(source))
    assert done.ready and done.reason == "ModelCached"
    assert done.status == {"phase": "Ready", "source": "hf://acme/tiny-llama", "claimName": "llmbackend-model-cache",
                           "resolvedRevision": "abc", "bytesTotal": 1800, "bytesDone": 1800, "path": "hf/acme/tiny-llama/abc"}


def test_s3_architecture_comes_from_the_job_report() -> None:
    kube = FakeKube()
    source = {"uri": "s3://models/llama", "secretRef": {"name": "s3"}}
    waiting = cmc.sync_model_cache(kube, "serving", spec(source))
    assert not waiting.has_architecture and not waiting.permanent and "config.json" in waiting.message
    name = mc.download_job_name(spec(source).model.source)
    kube.objects[("Job", "serving", name)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    arch = {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "numKeyValueHeads": 8, "headDim": 128,
            "vocabSize": 128256, "parameterCount": 8030261248, "weightBytes": 16060522496}
    job_pod(kube, name, {"terminated": {"exitCode": 0, "message": json.dumps({"phase": "Ready", "architecture": arch})}})
    done = cmc.sync_model_cache(kube, "serving", spec(source))
    assert done.ready and done.spec.model.architecture.weight_bytes == 16060522496


def test_bad_sources_become_reasons() -> None:
    kube = FakeKube()
    source = {"uri": "s3://models/llama", "secretRef": {"name": "missing"}}
    cmc.sync_model_cache(kube, "serving", spec(source))
    name = mc.download_job_name(spec(source).model.source)
    job_pod(kube, name, {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "missing" not found'}})
    result = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (result.reason, result.permanent) == ("SecretNotFound", True)
    assert "create Secret missing" in result.message
    kube.objects[("Job", "serving", name)]["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    job_pod(kube, name, {"terminated": {"exitCode": 14, "message": json.dumps(
        {"phase": "Failed", "reason": "CheckpointLargerThanCache", "message": "raise source.cache.size"})}})
    result = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (result.reason, result.status["phase"]) == ("CheckpointLargerThanCache", "Failed")


def test_gated_model_without_token_is_a_permanent_reason(hub) -> None:
    result = cmc.sync_model_cache(FakeKube(), "serving", spec({"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "endpoint": hub.endpoint}))
    assert (result.reason, result.permanent, result.has_architecture) == ("SourceUnauthorized", True, False)
    assert "secretRef" in result.message
