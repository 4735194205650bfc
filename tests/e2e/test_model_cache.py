"""Model sources on the real control plane: the shared cache claim and download Job, ModelReady and
status.model, serving pods that mount the cache read-only, and the API server's validation of sources.

kwok completes Job pods without running them, so the Job's result here is "Complete" with no report;
the download program itself is tested as a process in tests/fetch. For the pvc inspector, the test runs the
inspector program on real files and writes its report into the completed pod's termination message, as the
kubelet would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    ({"source": {"uri": "hf://org/name@.."}, "preset": "llama-3.1-8b"}, "spec.model.source.uri"),
    ({"source": {"uri": "hf://org/name@main.lock"}, "preset": "llama-3.1-8b"}, "ref-name rules"),
    ({"source": {"pvc": {"claimName": "m"}, "endpoint": "http://x"}, "preset": "llama-3.1-8b"}, "uri sources only"),
    ({"source": {"uri": "hf://a/b", "region": "eu-west-1"}, "preset": "llama-3.1-8b"}, "region applies to s3"),
    ({"name": "no-source"}, "set spec.model.source"),
    ({"preset": "llama-3.1-8b"}, "set spec.model.source"),
])
def test_api_server_rejects_bad_sources(cluster, namespace, model, message):
    proc = cluster.kubectl("apply", "-f", "-", check=False, input=yaml.safe_dump(
        backend_manifest("bad", namespace, model=model)))
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_uri_without_architecture_waits_for_the_checkpoint(cluster, operator, namespace):
    # An S3 source without a preset: the plan waits for the download Job's report of config.json.
    apply_manifest(cluster, backend_manifest("nosize", namespace, model={"source": {"uri": "s3://models/x",
                                                                                     "cache": {"size": "20Gi"}}}))
    obj = wait_for(lambda: condition(cluster.kube.get("LLMBackend", namespace, "nosize"), "Planned"), timeout=60, what="Planned")
    assert obj["status"] == "False" and obj["reason"] in ("WaitingForCheckpoint", "CheckpointArchitectureUnknown")
    assert cluster.kube.get("Deployment", namespace, "nosize") is None


def test_pvc_without_architecture_is_planned_from_the_inspector_report(cluster, operator, namespace, tmp_path):
    # The checkpoint on "the claim": real files, read by the real inspector program (what the Job's pod runs).
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "llama-3.1-8b"
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_bytes((fixtures / "config.json").read_bytes())
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16_060_522_496}, "weight_map": {}}))
    termination = tmp_path / "termination"
    subprocess.run([sys.executable, "-m", "llmbackend.model_fetch", "inspect", "--dir", str(model),
                    "--termination-log", str(termination)], check=True, capture_output=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(Path(mc.__file__).resolve().parents[2])})

    claim = "llmbackend-model-cache"  # the namespace's pre-bound volume
    cluster.kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
                         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                                  "resources": {"requests": {"storage": "10Gi"}}}})
    pvc = {"claimName": claim, "path": "/llama"}
    apply_manifest(cluster, backend_manifest("frompvc", namespace, model={"source": {"pvc": pvc}}))
    job_name = mc.inspect_job_name("frompvc", ModelSource.model_validate({"pvc": pvc}).pvc)
    job = wait_for(lambda: cluster.kube.get("Job", namespace, job_name), timeout=60, what="inspector Job")
    owner = cluster.kube.get("LLMBackend", namespace, "frompvc")
    assert [o["uid"] for o in job["metadata"]["ownerReferences"]] == [owner["metadata"]["uid"]]
    assert cluster.kube.get("Deployment", namespace, "frompvc") is None  # nothing to plan with yet

    # kwok "completes" the pod without running it; the kubelet would have put the report here.
    def finished_pod():
        pods = cluster.kube.list("Pod", namespace, label_selector=f"job-name={job_name}")
        return pods[0] if pods and pods[0]["status"].get("phase") == "Succeeded" else None
    pod = wait_for(finished_pod, timeout=60, what="inspector pod Succeeded")
    statuses = pod["status"]["containerStatuses"]
    statuses[0]["state"]["terminated"]["message"] = termination.read_text()
    cluster.kube.patch_status("Pod", namespace, pod["metadata"]["name"], {"containerStatuses": statuses})

    obj = wait_for(lambda: available(cluster, namespace, "frompvc"), timeout=90, what="frompvc Available=True")
    ready = condition(obj, "ModelReady")
    assert (ready["status"], ready["reason"]) == ("True", "CheckpointInspected")
    assert obj["status"]["model"]["phase"] == "Ready" and obj["status"]["model"]["source"] == f"pvc://{claim}/llama"
    # Planned from the checkpoint: 8B in bf16 (its exact 16.06 GB from the index) on one H100.
    assert obj["status"]["plan"]["tensorParallel"] == 1


TENANT = "tenant-mallory"


def grant_tenant(cluster, namespace: str) -> None:
    """TENANT may create and edit LLMBackends in `namespace` and do nothing else."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "editor", "namespace": namespace},
         "rules": [{"apiGroups": ["llmbackend.dev"], "resources": ["llmbackends"],
                    "verbs": ["get", "list", "create", "update", "patch", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "editor", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "editor"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}]}]))


def test_a_tampered_cache_copy_is_named_in_the_backends_status(cluster, operator, namespace, tmp_path):
    # The real download program, run twice on one cache (a backend's Job, then another ref's Job reusing the copy)
    # against the Hub-shaped server, with a same-size edit of the cached config.json in between (what a writable
    # mount of the claim allows: a tenant gets none, tests/e2e/test_tenant_admission.py). kwok completes the Job's pod
    # without running it: the test puts the second run's report where the kubelet would, and the real operator names
    # it on the tenant's backend.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fetch"))
    from hubserver import HubServer, Repo

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "llama-3.1-8b"
    files = {"config.json": (fixtures / "config.json").read_bytes(), "tokenizer.json": b'{"version": "1.0"}' * 100}
    cache, termination = tmp_path / "cache", tmp_path / "termination"
    env = {**os.environ, "PYTHONPATH": str(Path(mc.__file__).resolve().parents[2])}
    with HubServer() as hub:
        hub.repos["acme/tiny-llama"] = Repo(files=files)
        argv = [sys.executable, "-m", "llmbackend.model_fetch", "download", "--source", "hf://acme/tiny-llama",
                "--cache", str(cache), "--endpoint", hub.endpoint, "--termination-log", str(termination)]
        subprocess.run(argv, check=True, capture_output=True, timeout=60, env=env)
        config = next(cache.rglob("config.json"))
        config.write_bytes(config.read_bytes().replace(b"LlamaForCausalLM", b"EvilForCausalLM!"))
        subprocess.run(argv, check=True, capture_output=True, timeout=60, env=env)
    assert json.loads(termination.read_text())["reason"] == "CacheTampered"

    source = {"uri": "hf://acme/tiny-llama"}
    grant_tenant(cluster, namespace)  # the backend is a tenant's, who may only edit LLMBackends
    cluster.kubectl("apply", "--as", TENANT, "-f", "-", input=yaml.safe_dump(
        backend_manifest("tampered", namespace, model={"preset": "llama-3.1-8b", "source": source})))
    job_name = mc.download_job_name(ModelSource.model_validate(source))

    def finished_pod():
        pods = cluster.kube.list("Pod", namespace, label_selector=f"job-name={job_name}")
        return pods[0] if pods and pods[0]["status"].get("phase") == "Succeeded" else None
    pod = wait_for(finished_pod, timeout=90, what="download pod Succeeded")
    statuses = pod["status"]["containerStatuses"]
    statuses[0]["state"]["terminated"]["message"] = termination.read_text()
    cluster.kube.patch_status("Pod", namespace, pod["metadata"]["name"], {"containerStatuses": statuses})

    def named():  # False while the Job is not yet Complete (the report is read already), then True
        ready = condition(cluster.kube.get("LLMBackend", namespace, "tampered"), "ModelReady")
        return ready if ready and (ready["status"], ready["reason"]) == ("True", "CacheTampered") else None
    ready = wait_for(named, timeout=90, what="ModelReady True, reason CacheTampered")
    assert "config.json: git blob id differs" in ready["message"] and "fetched again" in ready["message"]


def test_deleting_the_last_backend_of_a_source_cleans_its_copy_and_keeps_the_others(cluster, operator, namespace):
    kept, dropped = {"uri": "s3://models/kept"}, {"uri": "s3://models/dropped"}
    for name, source in (("keeper", kept), ("leaver", dropped)):
        apply_manifest(cluster, backend_manifest(name, namespace, model={"preset": "llama-3.1-8b", "source": source}))
    for name in ("keeper", "leaver"):
        wait_for(lambda name=name: available(cluster, namespace, name), timeout=90, what=f"{name} Available=True")
    kept_job = mc.download_job_name(ModelSource.model_validate(kept))
    dropped_job = mc.download_job_name(ModelSource.model_validate(dropped))
    assert cluster.kube.get("Job", namespace, dropped_job) is not None

    cluster.kubectl("delete", "llmb", "leaver", "-n", namespace, "--wait=true")

    def cleanup_job():
        jobs = [j for j in cluster.kube.list("Job", namespace)
                if j["metadata"]["labels"].get("app.kubernetes.io/component") == mc.CLEANUP_COMPONENT]
        return jobs[0] if jobs else None
    # After leaver's serving pods are gone (the operator waits for them), a cleanup that keeps keeper's copy.
    job = wait_for(cleanup_job, timeout=120, what="cleanup Job")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--keep"] == ["s3/models/kept/refs/latest"]
    assert "ownerReferences" not in job["metadata"]
    wait_for(lambda: cluster.kube.get("Job", namespace, dropped_job) is None, timeout=30, what="dropped source's Job gone")
    assert cluster.kube.get("Job", namespace, kept_job) is not None
    assert available(cluster, namespace, "keeper")

    # The dropped source wanted again: downloaded afresh (after the cleanup finished), not served from a deleted copy.
    apply_manifest(cluster, backend_manifest("returner", namespace, model={"preset": "llama-3.1-8b", "source": dropped}))
    wait_for(lambda: cluster.kube.get("Job", namespace, dropped_job), timeout=90, what="a new download Job")
    finished = cluster.kube.get("Job", namespace, job["metadata"]["name"])
    assert finished is None or any(c["type"] == "Complete" for c in finished["status"].get("conditions", []))


@pytest.mark.parametrize("tenant_first", [True, False], ids=["tenant-squats-first", "tenant-borrows-after"])
def test_a_tenant_s_backend_without_a_secret_gets_its_own_download_job(cluster, operator, namespace, tenant_first):
    """A tenant who may only edit LLMBackends names an admin's gated source without a Secret. Before, one Job per
    source: first (squat) its Job had no token and the admin's backend inherited its 401; after (thief) it shared the
    admin's Job, whose pod read Secret victim-hf. Now each backend's download reads the Secret it names, or none."""
    grant_tenant(cluster, namespace)
    cluster.kubectl("create", "secret", "generic", "victim-hf", "-n", namespace, "--from-literal=HF_TOKEN=hf_admin")
    uri = "hf://meta-llama/Llama-3.1-8B-Instruct"
    admin = {"uri": uri, "secretRef": {"name": "victim-hf"}}
    tenant = {"uri": uri}

    def create(name, source, as_tenant):
        manifest = yaml.safe_dump(backend_manifest(name, namespace, model={"preset": "llama-3.1-8b", "source": source}))
        cluster.kubectl("apply", *(["--as", TENANT] if as_tenant else []), "-f", "-", input=manifest)
        job = mc.download_job_name(ModelSource.model_validate(source))
        return wait_for(lambda: cluster.kube.get("Job", namespace, job), timeout=60, what=f"{name}'s download Job")

    order = [("squat", tenant, True), ("victim", admin, False)]
    jobs = {name: create(name, source, as_tenant) for name, source, as_tenant in (order if tenant_first else order[::-1])}
    assert jobs["squat"]["metadata"]["name"] != jobs["victim"]["metadata"]["name"]
    assert mc.job_secrets(jobs["victim"]) == ["victim-hf"] and mc.job_secrets(jobs["squat"]) == []
    assert jobs["victim"]["metadata"]["annotations"][mc.SECRET_ANNOTATION] == "victim-hf"
    # The pods the Job controller made from them: only the admin's reads the Secret.
    for name, secrets in (("squat", []), ("victim", ["victim-hf"])):
        job = jobs[name]
        pods = wait_for(lambda job=job: mc.job_pods(job, cluster.kube.list(
            "Pod", namespace, label_selector=f"job-name={job['metadata']['name']}")), timeout=60, what=f"{name}'s Job pod")
        assert mc.job_secrets({"spec": {"template": {"spec": pods[0]["spec"]}}}) == secrets
    # kwok completes the pods: each backend's model is Ready from its own Job.
    for name in ("squat", "victim"):
        ready = wait_for(lambda name=name: (c := condition(cluster.kube.get("LLMBackend", namespace, name), "ModelReady"))
                         and c["status"] == "True" and c, timeout=90, what=f"{name} ModelReady=True")
        assert ready["reason"] == "ModelCached"
