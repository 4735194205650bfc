"""Model sources on the real control plane: the shared cache claim and download Job, ModelReady and
status.model, serving pods that mount the cache read-only, and the API server's validation of sources.

kwok completes Job pods without running them, so the Job's result here is "Complete" with no report;
the download program itself is tested as a process in tests/fetch.
"""

from __future__ import annotations

import pytest
import yaml
from conftest import apply_manifest, available, backend_manifest, condition, wait_for

from llmbackend.api.v1alpha1 import ModelSource
from llmbackend.render import modelcache as mc

URI = "hf://meta-llama/Llama-3.1-8B-Instruct@0e9e39f249a16976918f6564b8830bc894c89659"


def test_two_backends_share_one_download_and_deleting_one_keeps_it(cluster, operator, namespace):
    source = {"uri": URI, "secretRef": {"name": "hf-token"}}
    cluster.kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=HF_TOKEN=hf_test")
    for name in ("first", "second"):
        apply_manifest(cluster, backend_manifest(name, namespace, model={"preset": "llama-3.1-8b", "source": source}))
    for name in ("first", "second"):
        wait_for(lambda name=name: available(cluster, namespace, name), timeout=90, what=f"{name} Available=True")
        wait_for(lambda name=name: condition(cluster.kube.get("LLMBackend", namespace, name), "ModelReady"), timeout=60,
                 what="ModelReady")
    job_name = mc.download_job_name(ModelSource.model_validate(source))
    jobs = cluster.kube.list("Job", namespace)
    assert [j["metadata"]["name"] for j in jobs] == [job_name]
    assert "ownerReferences" not in jobs[0]["metadata"]
    claim = cluster.kube.get("PersistentVolumeClaim", namespace, "llmbackend-model-cache")
    assert claim is not None and "ownerReferences" not in claim["metadata"]

    # kwok "completes" the Job's pod: the model is then Ready in both backends' status.
    def model_ready(name):
        obj = cluster.kube.get("LLMBackend", namespace, name)
        cond = condition(obj, "ModelReady")
        return obj if cond and cond["status"] == "True" else None
    for name in ("first", "second"):
        obj = wait_for(lambda name=name: model_ready(name), timeout=90, what=f"{name} ModelReady=True")
        assert obj["status"]["model"]["phase"] == "Ready" and obj["status"]["model"]["claimName"] == "llmbackend-model-cache"

    pod = cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend=first")[0]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "llmbackend-model-cache", "readOnly": True}} in pod["spec"]["volumes"]
    assert pod["spec"]["initContainers"][-1]["name"] == "wait-model"

    cluster.kubectl("delete", "llmb", "first", "-n", namespace, "--wait=true")
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "first") is None, timeout=60, what="first's Deployment gone")
    assert cluster.kube.get("Job", namespace, job_name) is not None
    assert cluster.kube.get("PersistentVolumeClaim", namespace, "llmbackend-model-cache") is not None
    assert available(cluster, namespace, "second")


@pytest.mark.parametrize("model,message", [
    ({"source": {"uri": "gs://bucket/model"}, "preset": "llama-3.1-8b"}, "spec.model.source.uri"),
    ({"source": {"uri": "s3://bucket/../etc"}, "preset": "llama-3.1-8b"}, "segments"),
    ({"source": {"pvc": {"claimName": "m"}, "endpoint": "http://x"}, "preset": "llama-3.1-8b"}, "uri sources only"),
    ({"source": {"uri": "hf://a/b", "region": "eu-west-1"}, "preset": "llama-3.1-8b"}, "region applies to s3"),
    ({"source": {"pvc": {"claimName": "m"}}}, "read from the checkpoint"),
])
def test_api_server_rejects_bad_sources(cluster, namespace, model, message):
    proc = cluster.kubectl("apply", "-f", "-", check=False, input=yaml.safe_dump(
        backend_manifest("bad", namespace, model=model)))
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_uri_without_architecture_waits_for_the_checkpoint(cluster, operator, namespace):
    # An S3 source without a preset: the plan waits for the download Job's report of config.json.
    apply_manifest(cluster, backend_manifest("nosize", namespace, model={"source": {"uri": "s3://models/x"}}))
    obj = wait_for(lambda: condition(cluster.kube.get("LLMBackend", namespace, "nosize"), "Planned"), timeout=60, what="Planned")
    assert obj["status"] == "False" and obj["reason"] in ("WaitingForCheckpoint", "CheckpointArchitectureUnknown")
    assert cluster.kube.get("Deployment", namespace, "nosize") is None
