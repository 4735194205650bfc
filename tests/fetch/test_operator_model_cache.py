"""The operator's model-cache step (controller/modelcache.py) on a fake API server and the Hub-shaped server:
create-if-missing of the shared claim and Job, status.model, ModelReady, architecture from the checkpoint
(the real download program's progress line); a Secret only for endpoints the admin allowed; the operator
itself never calls the endpoint. For pvc sources, the inspector Job whose report is the real inspector
program's termination message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import checkpoint_files, run_fetch

from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller import egress
from llmbackend.controller import modelcache as cmc
from llmbackend.controller.fakekube import FakeKube
from llmbackend.render import modelcache as mc
from llmbackend.render.names import BackendRef, labels_for


def spec(source: dict, **model) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({"model": {"source": source, **model}})


def job_pod(kube: FakeKube, job: str, state: dict, name: str = "fetch-1") -> None:
    # A Job's pods carry its template's labels (the managed-by label the operator's pod watch selects on).
    # Its controller ownerReference names the Job's uid: the operator reads reports only from such pods.
    job_obj = kube.objects[("Job", "serving", job)]
    template_labels = job_obj["spec"]["template"]["metadata"]["labels"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_obj["metadata"]["uid"], "controller": True}
    kube.objects[("Pod", "serving", name)] = {
        "metadata": {"name": name, "labels": {**template_labels, "job-name": job}, "ownerReferences": [owner],
                     "creationTimestamp": "2026-12-03T00:00:00Z"},
        "status": {"containerStatuses": [{"name": "fetch", "state": state}]},
    }


def job_env(job: dict, secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The environment the kubelet gives the Job's container: each secretKeyRef looked up in `secrets` (name ->
    data), as it would in the namespace's Secrets (an optional key that is missing is left out)."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {}
    for item in container.get("env") or []:
        ref = (item.get("valueFrom") or {}).get("secretKeyRef")
        if ref is None:
            env[item["name"]] = item.get("value", "")
        elif ref["key"] in secrets.get(ref["name"], {}):
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def run_download_job(job: dict, root: Path, env: dict | None = None, expect: int = 0) -> list[dict]:
    """Run the download Job's own command line (the real program) with the claim at `root`; its stdout lines
    (the progress lines the operator reads from the running pod's log)."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    mount = container["volumeMounts"][0]["mountPath"]
    args = [a.replace(mount, str(root)) if a.startswith(mount) else a for a in container["args"]]
    done = run_fetch(*args, "--termination-log", str(root.parent / "termination"), env=env)
    assert done.returncode == expect, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def finish_download(kube: FakeKube, job: dict, root: Path, exit_code: int) -> None:
    """The Job's result as the Job controller and kubelet leave it: Complete or Failed, and its pod's termination
    message the program wrote."""
    name = job["metadata"]["name"]
    kube.objects[("Job", "serving", name)]["status"] = {
        "conditions": [{"type": "Complete" if exit_code == 0 else "Failed", "status": "True"}]}
    # The kubelet keeps at most 4096 bytes of the file (a longer report is cut: not JSON any more).
    message = (root.parent / "termination").read_bytes()[:4096].decode(errors="replace")
    job_pod(kube, name, {"terminated": {"exitCode": exit_code, "message": message}}, name=f"{name}-pod")


def test_one_claim_and_one_job_for_two_backends_of_one_model(hub, tmp_path) -> None:
    kube = FakeKube()
    # No preset: only source.cache.size says how large a claim to create (the operator never reads the source).
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint, "cache": {"size": "20Gi"}}
    first = cmc.sync_model_cache(kube, "serving", spec(source))
    second = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert [o["kind"] for o in kube.created] == ["PersistentVolumeClaim", "Job"]
    assert all("ownerReferences" not in o["metadata"] for o in kube.created)
    assert not hub.log, "the operator process never calls the source's endpoint"
    assert not first.has_architecture and not first.permanent and "config.json" in first.message
    assert second.spec.model.architecture is None and second.spec.model.preset == "llama-3.1-8b"
    assert (first.ready, first.reason, first.status["phase"]) == (False, "Downloading", "Downloading")
    assert kube.created[0]["spec"]["resources"]["requests"]["storage"] == "20Gi"
    # The architecture comes from the Job's progress line: config.json and the index are fetched first.
    lines = run_download_job(kube.created[1], tmp_path / "claim")
    early = next(line for line in lines if "architecture" in line)
    assert early["phase"] == "Downloading" and early["bytesDone"] < early["bytesTotal"]
    job_pod(kube, kube.created[1]["metadata"]["name"], {"running": {}})
    kube.logs["fetch-1"] = json.dumps(early)
    planned = cmc.sync_model_cache(kube, "serving", spec(source))
    arch = planned.spec.model.architecture
    assert arch.num_layers == 32 and arch.weight_bytes == 1_800_000


def test_progress_from_the_running_pod_then_ready(hub) -> None:
    kube = FakeKube()
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}
    cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    name = mc.download_job_name(spec(source).model.source)
    job_pod(kube, name, {"running": {}})
    kube.logs["fetch-1"] = json.dumps({"phase": "Downloading", "bytesDone": 700, "bytesTotal": 1800, "resolvedRevision": "abc"})
    running = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (running.status["bytesDone"], running.status["bytesTotal"], running.status["resolvedRevision"]) == (700, 1800, "abc")
    kube.objects[("Job", "serving", name)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    job_pod(kube, name, {"terminated": {"exitCode": 0, "message": json.dumps(
        {"phase": "Ready", "resolvedRevision": "abc", "bytesTotal": 1800, "path": "hf/acme/tiny-llama/abc"})}})
    done = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert done.ready and done.reason == "ModelCached"
    assert done.status == {"phase": "Ready", "source": "hf://acme/tiny-llama", "claimName": "llmbackend-model-cache",
                           "resolvedRevision": "abc", "bytesTotal": 1800, "bytesDone": 1800, "path": "hf/acme/tiny-llama/abc"}


def test_s3_architecture_comes_from_the_job_report() -> None:
    kube = FakeKube()
    source = {"uri": "s3://models/llama", "secretRef": {"name": "s3"}, "cache": {"size": "40Gi"}}
    waiting = cmc.sync_model_cache(kube, "serving", spec(source))
    assert not waiting.has_architecture and not waiting.permanent and "config.json" in waiting.message
    name = mc.download_job_name(spec(source).model.source)
    kube.objects[("Job", "serving", name)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    arch = {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "numKeyValueHeads": 8, "headDim": 128,
            "vocabSize": 128256, "parameterCount": 8030261248, "weightBytes": 16060522496}
    job_pod(kube, name, {"terminated": {"exitCode": 0, "message": json.dumps({"phase": "Ready", "architecture": arch})}})
    done = cmc.sync_model_cache(kube, "serving", spec(source))
    assert done.ready and done.spec.model.architecture.weight_bytes == 16060522496


def test_a_serving_pod_with_the_download_job_s_labels_is_not_its_report() -> None:
    """Issue 42: a tenant's serving pod labelled job-name=<another backend's download Job> had its log line read as
    that download's report, and an 8B source was planned as a 405B model. Only pods the Job controls (by uid) count."""
    kube = FakeKube()
    source = {"uri": "s3://models/llama", "cache": {"size": "40Gi"}}
    cmc.sync_model_cache(kube, "serving", spec(source))
    name = mc.download_job_name(spec(source).model.source)
    job = kube.objects[("Job", "serving", name)]
    huge = {"numLayers": 126, "hiddenSize": 16384, "numAttentionHeads": 128, "numKeyValueHeads": 8, "headDim": 128,
            "vocabSize": 128256, "parameterCount": 405_000_000_000}
    forged_labels = {**labels_for(BackendRef("evil", "serving", "u")), "job-name": name, "controller-uid": job["metadata"]["uid"],
                     "batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
    kube.objects[("Pod", "serving", "evil-5d8f-abcde")] = {
        "metadata": {"name": "evil-5d8f-abcde", "labels": forged_labels, "creationTimestamp": "2026-12-03T00:00:01Z",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "evil-5d8f", "uid": "rs",
                                          "controller": True}]},
        "status": {"containerStatuses": [{"name": "triton", "state": {"running": {}}}]}}
    kube.logs["evil-5d8f-abcde"] = json.dumps({"phase": "Downloading", "architecture": huge})
    alone = cmc.sync_model_cache(kube, "serving", spec(source))
    assert not alone.has_architecture and "bytesDone" not in alone.status, "the forged pod's line was read"
    small = {**huge, "numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "parameterCount": 8_030_261_248}
    job_pod(kube, name, {"running": {}})
    kube.logs["fetch-1"] = json.dumps({"phase": "Downloading", "architecture": small})
    planned = cmc.sync_model_cache(kube, "serving", spec(source))
    assert planned.spec.model.architecture.parameter_count == 8_030_261_248


def test_bad_sources_become_reasons() -> None:
    kube = FakeKube()
    source = {"uri": "s3://models/llama", "secretRef": {"name": "missing"}, "cache": {"size": "40Gi"}}
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


UNBOUND = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"  # v1.36


def pending_job_pod(kube: FakeKube, job: str, name: str) -> None:
    job_obj = kube.objects[("Job", "serving", job)]
    template_labels = job_obj["spec"]["template"]["metadata"]["labels"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_obj["metadata"]["uid"], "controller": True}
    kube.objects[("Pod", "serving", name)] = {
        "metadata": {"name": name, "labels": {**template_labels, "job-name": job}, "ownerReferences": [owner],
                     "creationTimestamp": "2026-12-03T00:00:01Z"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                        "message": UNBOUND, "lastTransitionTime": "2026-12-03T00:00:01Z"}]},
    }


def test_a_secret_ref_is_named_while_storage_holds_the_download_and_a_missing_one_comes_first() -> None:
    """The operator may not read Secrets: a misspelt secretRef shows only when the kubelet starts the pod. While the
    claim waits for a volume the wait names the Secret to check; once a pod says it is missing, that comes first."""
    kube = FakeKube()
    source = {"uri": "s3://models/llama", "secretRef": {"name": "s3-credentals"}, "cache": {"size": "40Gi"}}
    cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    name = mc.download_job_name(spec(source).model.source)
    pending_job_pod(kube, name, "fetch-1")
    waiting = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (waiting.reason, waiting.stuck) == ("NoStorageClass", True)
    assert "Secret s3-credentals (spec.model.source.secretRef)" in waiting.message
    assert "kubectl get secret s3-credentals -n serving" in waiting.message

    job_pod(kube, name, {"waiting": {"reason": "CreateContainerConfigError",
                                     "message": 'secret "s3-credentals" not found'}}, name="fetch-0")
    missing = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (missing.reason, missing.permanent, missing.stuck) == ("SecretNotFound", True, False)
    assert "spec.model.source.secretRef" in missing.message and "s3-credentals" in missing.message


def test_a_hostile_progress_line_is_a_reason_not_a_crash(hub) -> None:
    kube = FakeKube()
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint, "cache": {"size": "20Gi"}}
    cmc.sync_model_cache(kube, "serving", spec(source))
    job_pod(kube, mc.download_job_name(spec(source).model.source), {"running": {}})
    kube.logs["fetch-1"] = json.dumps({"phase": "Downloading", "architecture": {"numLayers": -1}})
    result = cmc.sync_model_cache(kube, "serving", spec(source))
    assert (result.reason, result.permanent) == ("InvalidCheckpointConfig", True)


# ---- credentials: only to endpoints the admin allowed ----

@pytest.fixture
def allowed_endpoints():
    saved = egress.settings.model_endpoints
    yield lambda *urls: egress.settings.configure(model_endpoints=urls)
    egress.settings.configure(model_endpoints=saved)


def test_a_secret_is_never_sent_to_an_endpoint_the_admin_did_not_allow(hub, tmp_path, allowed_endpoints) -> None:
    # The probe: anyone who may create LLMBackends named a Secret of the namespace and their own endpoint, and
    # the download sent its HF_TOKEN there as a Bearer token.
    allowed_endpoints()
    kube = FakeKube()
    source = {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "endpoint": hub.endpoint, "secretRef": {"name": "hf-token"}}
    refused = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (refused.reason, refused.permanent, refused.ready) == ("EndpointNotAllowed", True, False)
    assert hub.endpoint in refused.message and "--model-endpoint" in refused.message
    assert kube.created == [], "no Job: nothing could read the Secret"
    assert not hub.log
    # The admin allows the endpoint: the Job gets the Secret, and the real program sends it there.
    allowed_endpoints(hub.endpoint + "/")
    started = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert started.reason == "Downloading"
    job = next(o for o in kube.created if o["kind"] == "Job")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN", "optional": False}}}]
    run_download_job(job, tmp_path / "claim", env={"HF_TOKEN": "hf_good"})
    assert {h.get("Authorization") for _, _, h in hub.requests_for("/api/models/")} == {"Bearer hf_good"}


@pytest.mark.parametrize("endpoint,allowed", [
    (None, True),                                    # the default (Hub, AWS)
    ("https://huggingface.co", True), ("https://huggingface.co:443/", True),
    ("https://huggingface.co.evil.example", False), ("http://huggingface.co", False),
    ("http://minio.storage:9000", False), ("http://127.0.0.1:8080", False),
])
def test_which_endpoints_get_credentials_by_default(endpoint, allowed, allowed_endpoints) -> None:
    allowed_endpoints()
    assert egress.settings.credentials_may_go_to(endpoint) == allowed
    allowed_endpoints("http://minio.storage:9000")
    assert egress.settings.credentials_may_go_to("http://MINIO.storage:9000/bucket") is True
    assert egress.settings.credentials_may_go_to("http://minio.storage:9001") is False


# ---- pvc sources: the inspector Job ----

OWNER = BackendRef("llama", "serving", "uid-1")


def claim(kube: FakeKube, name: str = "models") -> None:
    kube.objects[("PersistentVolumeClaim", "serving", name)] = {"metadata": {"name": name}}


def run_inspector(job: dict, root: Path) -> dict:
    """Run the Job's own command line (the real inspector program) with the claim at `root`; its termination message."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    mount = container["volumeMounts"][0]["mountPath"]
    args = [a.replace(mount, str(root)) if a.startswith(mount) else a for a in container["args"]]
    termination = root.parent / "termination"
    args[args.index("--termination-log") + 1] = str(termination)
    run_fetch(*args)
    return json.loads(termination.read_text())


def finish(kube: FakeKube, job_name: str, report: dict, exit_code: int) -> None:
    kube.objects[("Job", "serving", job_name)]["status"] = {
        "conditions": [{"type": "Complete" if exit_code == 0 else "Failed", "status": "True"}]}
    job_pod(kube, job_name, {"terminated": {"exitCode": exit_code, "message": json.dumps(report)}}, name="inspect-1")


def test_pvc_without_architecture_is_planned_from_the_inspector_report(tmp_path) -> None:
    kube = FakeKube()
    claim(kube)
    root = tmp_path / "claim"
    for name, data in checkpoint_files().items():
        (root / "llama-3.1-8b" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "llama-3.1-8b" / name).write_bytes(data)
    s = spec({"pvc": {"claimName": "models", "path": "/llama-3.1-8b"}})
    waiting = cmc.sync_model_cache(kube, "serving", s, owner=OWNER)
    (job,) = kube.created
    # Owned by the backend, labelled as its child (its pod's events wake the backend), claim read-only.
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert job["spec"]["template"]["metadata"]["labels"]["llmbackend.dev/backend"] == "llama"
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert (waiting.ready, waiting.reason, waiting.permanent, waiting.has_architecture) == (False, "InspectingCheckpoint", False, False)
    assert waiting.status["phase"] == "Inspecting" and waiting.status["source"] == "pvc://models/llama-3.1-8b"

    finish(kube, job["metadata"]["name"], run_inspector(job, root), 0)
    done = cmc.sync_model_cache(kube, "serving", s, owner=OWNER)
    assert done.ready and done.reason == "CheckpointInspected" and done.status["phase"] == "Ready"
    arch = done.spec.model.architecture
    assert (arch.num_layers, arch.num_key_value_heads, arch.weight_bytes) == (32, 8, 1_800_000)
    assert len(kube.created) == 1  # read once; the report stays on the finished Job's pod


@pytest.mark.parametrize("damage,reason", [
    (lambda d: (d / "config.json").unlink(), "CheckpointConfigMissing"),
    (lambda d: (d / "config.json").write_text(json.dumps({"model_type": "rwkv7", "num_hidden_layers": 2})), "UnsupportedModelType"),
])
def test_a_bad_pvc_checkpoint_is_a_reason_with_what_to_do(tmp_path, damage, reason) -> None:
    kube = FakeKube()
    claim(kube)
    root = tmp_path / "claim"
    for name, data in checkpoint_files().items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    damage(root)
    s = spec({"pvc": {"claimName": "models"}})
    cmc.sync_model_cache(kube, "serving", s, owner=OWNER)
    (job,) = kube.created
    report = run_inspector(job, root)
    finish(kube, job["metadata"]["name"], report, 13 if reason == "CheckpointConfigMissing" else 18)
    result = cmc.sync_model_cache(kube, "serving", s, owner=OWNER)
    assert (result.reason, result.permanent, result.has_architecture, result.status["phase"]) == (reason, True, False, "Failed")
    assert "spec.model.architecture" in result.message or "source.pvc.path" in result.message


def test_pvc_inspection_missing_claim_changed_source_and_lost_report(tmp_path) -> None:
    kube = FakeKube()
    s = spec({"pvc": {"claimName": "models", "path": "/a"}})
    missing = cmc.sync_model_cache(kube, "serving", s, owner=OWNER)
    assert (missing.reason, missing.permanent) == ("ClaimNotFound", False) and "create it" in missing.message
    assert not kube.created
    claim(kube)
    cmc.sync_model_cache(kube, "serving", s, owner=OWNER)
    first = kube.created[-1]["metadata"]["name"]
    # Another path: a new inspector; the previous source's one is deleted.
    cmc.sync_model_cache(kube, "serving", spec({"pvc": {"claimName": "models", "path": "/b"}}), owner=OWNER)
    second = kube.created[-1]["metadata"]["name"]
    assert second != first and ("Job", first) in kube.deleted
    # Finished, but its pod (and report) was garbage-collected: run it again.
    s_b = spec({"pvc": {"claimName": "models", "path": "/b"}})
    kube.objects[("Job", "serving", second)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    again = cmc.sync_model_cache(kube, "serving", s_b, owner=OWNER)
    assert ("Job", second) in kube.deleted and again.reason == "InspectingCheckpoint" and not again.permanent
    # A pod without a report (an image without the inspector): a reason, not a loop.
    cmc.sync_model_cache(kube, "serving", s_b, owner=OWNER)
    kube.objects[("Job", "serving", second)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    job_pod(kube, second, {"terminated": {"exitCode": 0}}, name="inspect-2")
    silent = cmc.sync_model_cache(kube, "serving", s_b, owner=OWNER)
    assert (silent.reason, silent.permanent) == ("CheckpointArchitectureUnknown", True) and f"delete Job {second}" in silent.message
    # With a preset there is nothing to inspect.
    assert cmc.sync_model_cache(FakeKube(), "serving", spec({"pvc": {"claimName": "models"}}, preset="llama-3.1-8b"),
                                owner=OWNER) is None


# ---- cleanup of copies no backend uses ----

def backend_obj(kube: FakeKube, name: str, source: dict) -> None:
    kube.objects[("LLMBackend", "serving", name)] = {"metadata": {"name": name},
                                                    "spec": {"model": {"preset": "llama-3.1-8b", "source": source}}}


def complete(kube: FakeKube, kind_name: str) -> None:
    kube.objects[("Job", "serving", kind_name)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}


def two_revisions_downloaded() -> tuple[FakeKube, dict, dict]:
    """Backend "a" on revision v1 and "b" on v2 of one model, both downloads complete."""
    kube = FakeKube()
    v1, v2 = {"uri": "s3://models/llama-v1"}, {"uri": "s3://models/llama-v2"}
    backend_obj(kube, "a", v1)
    backend_obj(kube, "b", v2)
    for source in (v1, v2):
        cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
        complete(kube, mc.download_job_name(spec(source).model.source))
    return kube, v1, v2


def test_a_dropped_revision_is_cleaned_up_and_downloads_wait_for_the_cleanup() -> None:
    kube, v1, v2 = two_revisions_downloaded()
    job_v1 = mc.download_job_name(spec(v1).model.source)

    # "a" moves to v2: its old source is named by no backend any more.
    backend_obj(kube, "a", v2)
    cmc.sync_model_cache(kube, "serving", spec(v2, preset="llama-3.1-8b"), previous_source=v1["uri"])
    (cleanup,) = [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    args = cleanup["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--keep") + 1] == "s3/models/llama-v2/refs/latest" and args.count("--keep") == 1
    assert ("Job", job_v1) in kube.deleted

    # A backend that wants v1 again while the cleanup runs waits; afterwards it downloads afresh.
    backend_obj(kube, "c", v1)
    waiting = cmc.sync_model_cache(kube, "serving", spec(v1, preset="llama-3.1-8b"))
    assert (waiting.reason, waiting.ready, waiting.permanent) == ("WaitingForCacheCleanup", False, False)
    assert kube.get("Job", "serving", job_v1) is None
    complete(kube, cleanup["metadata"]["name"])
    again = cmc.sync_model_cache(kube, "serving", spec(v1, preset="llama-3.1-8b"))
    assert again.reason == "DownloadPending" or again.reason == "Downloading"
    assert kube.get("Job", "serving", job_v1) is not None


def test_deleting_one_of_two_backends_of_a_source_cleans_nothing() -> None:
    kube = FakeKube()
    source = {"uri": "s3://models/shared"}
    backend_obj(kube, "a", source)
    backend_obj(kube, "b", source)
    cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    complete(kube, mc.download_job_name(spec(source).model.source))
    del kube.objects[("LLMBackend", "serving", "a")]
    assert cmc.cleanup_model_caches(kube, "serving") is False
    assert not kube.deleted and not [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    # The last one goes: the source's Job goes and a cleanup that keeps nothing starts.
    del kube.objects[("LLMBackend", "serving", "b")]
    assert cmc.cleanup_model_caches(kube, "serving") is False
    (cleanup,) = [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    assert "--keep" not in cleanup["spec"]["template"]["spec"]["containers"][0]["args"]


def test_a_failing_cleanup_does_not_fail_the_reconcile_and_stays_owed() -> None:
    from llmbackend.controller.kube import ApiError

    class Forbidden(FakeKube):
        def list(self, kind, namespace=None, label_selector=None, field_selector=None):
            raise ApiError(403, "Forbidden", "jobs is forbidden")

    assert cmc.cleanup_model_caches_safely(Forbidden(), "locked") is False
    assert "locked" in cmc._cleanup_owed


def test_a_claim_and_job_created_meanwhile_by_another_reconcile_are_taken_as_they_are(hub) -> None:
    """Two workers reconcile two backends of one source at once: the second create answers 409."""
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}
    first = FakeKube()
    cmc.sync_model_cache(first, "serving", spec(source))
    racing = FakeKube()
    racing.objects = first.objects  # what the other worker created...
    racing.get = lambda kind, namespace, name, _get=racing.get: (  # ...is not yet seen by this one's first reads
        None if racing.calls["POST"] == 0 else _get(kind, namespace, name))
    result = cmc.sync_model_cache(racing, "serving", spec(source))
    assert racing.created == [], "nothing created twice"
    assert result.status["claimName"] == mc.cache_claim(spec(source).model.source) and not result.permanent


def test_an_inspector_job_the_backend_does_not_own_is_neither_read_nor_deleted(tmp_path) -> None:
    """Issue 42: reports only from the backend's own Job (by uid). A Job with the inspector's name or labels that
    another made is left alone, and the backend says so."""
    kube = FakeKube()
    claim(kube)
    s = spec({"pvc": {"claimName": "models", "path": "/a"}})
    name = mc.inspect_job_name("llama", s.model.source.pvc)
    theirs = mc.render_inspect_job("serving", "llama", s.model.source.pvc, "img", 1000, labels_for(OWNER, "model-inspect"),
                                   {**OWNER.owner_reference(), "uid": "someone-else"})
    kube.objects[("Job", "serving", name)] = {**theirs, "metadata": {**theirs["metadata"], "uid": "job-uid"}}
    finish(kube, name, {"phase": "Ready", "architecture": {"numLayers": 126}}, 0)
    result = cmc.sync_model_cache(kube, "serving", s, owner=OWNER)
    assert (result.reason, result.has_architecture, result.status["phase"]) == ("ResourceExists", False, "Failed")
    assert f"Job {name} exists and this backend does not own it" in result.message
    # Another source: the operator's own inspector; the foreign Job with this backend's labels is not deleted.
    cmc.sync_model_cache(kube, "serving", spec({"pvc": {"claimName": "models", "path": "/b"}}), owner=OWNER)
    assert ("Job", name) not in kube.deleted and kube.created[-1]["metadata"]["name"] != name


def test_a_tampered_copy_is_named_in_model_ready(hub, tmp_path) -> None:
    # The real program finds a same-size edit of a cached config.json on reuse; the operator reads that from the
    # running pod's progress line and then the termination message: ModelReady says CacheTampered and what happened.
    kube = FakeKube()
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}
    cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    job = kube.created[-1]
    claim = tmp_path / "claim"
    run_download_job(job, claim)
    config = next(claim.rglob("config.json"))
    config.write_bytes(config.read_bytes().replace(b"LlamaForCausalLM", b"EvilForCausalLM!"))
    lines = run_download_job(job, claim)
    name = job["metadata"]["name"]
    job_pod(kube, name, {"running": {}})
    kube.logs["fetch-1"] = json.dumps(next(line for line in lines if line["phase"] == "Downloading"))
    running = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (running.ready, running.reason) == (False, "CacheTampered")
    assert "config.json" in running.message and "fetched again" in running.message
    kube.objects[("Job", "serving", name)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    job_pod(kube, name, {"terminated": {"exitCode": 0, "message": (tmp_path / "termination").read_text()}})
    done = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert (done.ready, done.reason, done.status["phase"]) == (True, "CacheTampered", "Ready")
    assert "complete in the model cache again" in done.message and "config.json" in done.message
    assert b"EvilForCausalLM" not in config.read_bytes()


# ---- the download Job's Secret is the Job's identity (a tenant may only edit LLMBackends) ----

GATED = "hf://meta-llama/Llama-3.1-8B-Instruct"  # gated on the Hub-shaped server: 401 without a token
SECRETS = {"victim-hf": {"HF_TOKEN": "hf_good"}}  # the admin's; the tenant may not read it


def download_jobs(kube: FakeKube) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in kube.objects.values()
            if o.get("kind") == "Job" and o["metadata"]["labels"].get("app.kubernetes.io/component") == mc.DOWNLOAD_COMPONENT}


def test_a_tenant_backend_without_a_secret_cannot_squat_the_download_of_an_admin_s(hub, tmp_path, allowed_endpoints) -> None:
    """Order 2: the tenant's `squat` (no Secret) comes first, the admin's `victim2` (secretRef victim-hf) names the
    same gated URI. Before, both shared one Job without a token: it failed at once with 401 (exit 10, a permanent
    code), victim2 stayed SourceUnauthorized for good, and its status said the Job reads Secret victim-hf."""
    allowed_endpoints(hub.endpoint)
    kube = FakeKube()
    squat = spec({"uri": GATED, "endpoint": hub.endpoint}, preset="llama-3.1-8b")
    victim2 = spec({"uri": GATED, "endpoint": hub.endpoint, "secretRef": {"name": "victim-hf"}}, preset="llama-3.1-8b")
    for name, backend in (("squat", squat), ("victim2", victim2)):
        backend_obj(kube, name, backend.model.source.model_dump(by_alias=True, exclude_none=True))
    root = tmp_path / "claim"
    cmc.sync_model_cache(kube, "serving", squat)
    (squat_job,) = download_jobs(kube).values()
    run_download_job(squat_job, root, env=job_env(squat_job, SECRETS), expect=10)
    finish_download(kube, squat_job, root, 10)
    assert cmc.sync_model_cache(kube, "serving", squat).reason == "SourceUnauthorized"

    pending = cmc.sync_model_cache(kube, "serving", victim2)
    jobs = download_jobs(kube)
    assert len(jobs) == 2, "victim2 has a download Job of its own"
    victim_job = jobs[mc.download_job_name(victim2.model.source)]
    assert mc.job_secrets(victim_job) == ["victim-hf"] and mc.job_secrets(squat_job) == []
    assert (pending.reason, pending.permanent) == ("Downloading", False)
    lines = run_download_job(victim_job, root, env=job_env(victim_job, SECRETS))
    assert lines[-1]["phase"] == "Ready"
    finish_download(kube, victim_job, root, 0)
    done = cmc.sync_model_cache(kube, "serving", victim2)
    assert (done.ready, done.reason, done.status["phase"]) == (True, "ModelCached", "Ready")
    # The squatter's own Job stays what it was: it never had the token.
    assert cmc.sync_model_cache(kube, "serving", squat).reason == "SourceUnauthorized"
    assert {h.get("Authorization") for _, _, h in hub.requests_for("/api/models/")} == {None, "Bearer hf_good"}


def test_a_tenant_backend_without_a_secret_never_downloads_with_an_admin_s_token(hub, tmp_path, allowed_endpoints) -> None:
    """Order 1: the admin's `victim` (secretRef victim-hf) comes first, the tenant's `thief` names the same gated URI
    and no Secret. Before, thief shared victim's Job and got the gated model downloaded with victim-hf's token
    (ModelReady True). Now thief's own Job has no token and fails with 401, even with victim's copy in the cache."""
    allowed_endpoints(hub.endpoint)
    kube = FakeKube()
    victim = spec({"uri": GATED, "endpoint": hub.endpoint, "secretRef": {"name": "victim-hf"}}, preset="llama-3.1-8b")
    thief = spec({"uri": GATED, "endpoint": hub.endpoint}, preset="llama-3.1-8b")
    for name, backend in (("victim", victim), ("thief", thief)):
        backend_obj(kube, name, backend.model.source.model_dump(by_alias=True, exclude_none=True))
    root = tmp_path / "claim"
    cmc.sync_model_cache(kube, "serving", victim)
    cmc.sync_model_cache(kube, "serving", thief)
    jobs = download_jobs(kube)
    assert len(jobs) == 2
    victim_job, thief_job = jobs[mc.download_job_name(victim.model.source)], jobs[mc.download_job_name(thief.model.source)]
    assert mc.job_secrets(thief_job) == [] and not thief_job["spec"]["template"]["spec"]["containers"][0].get("env")
    run_download_job(victim_job, root, env=job_env(victim_job, SECRETS))
    finish_download(kube, victim_job, root, 0)
    assert cmc.sync_model_cache(kube, "serving", victim).ready
    before = len(hub.requests_for("/api/models/"))
    run_download_job(thief_job, root, env=job_env(thief_job, SECRETS), expect=10)
    finish_download(kube, thief_job, root, 10)
    refused = cmc.sync_model_cache(kube, "serving", thief)
    assert (refused.ready, refused.reason, refused.permanent) == (False, "SourceUnauthorized", True)
    assert [h.get("Authorization") for _, _, h in hub.requests_for("/api/models/")[before:]] == [None]


def test_an_older_operator_s_job_with_another_backend_s_secret_is_replaced(hub, allowed_endpoints) -> None:
    """After an upgrade: the Job an older operator made for victim (victim-hf's token) has the name a backend without
    a Secret names now. It is not shared with that backend: it is deleted and a Job without a Secret replaces it."""
    allowed_endpoints(hub.endpoint)
    kube = FakeKube()
    victim = spec({"uri": GATED, "endpoint": hub.endpoint, "secretRef": {"name": "victim-hf"}}, preset="llama-3.1-8b")
    thief = spec({"uri": GATED, "endpoint": hub.endpoint}, preset="llama-3.1-8b")
    name = mc.download_job_name(thief.model.source)
    old = mc.render_download_job("serving", victim.model.source, "img", 1000)
    old["metadata"] = {**old["metadata"], "name": name, "uid": "old-uid"}
    del old["metadata"]["annotations"][mc.SECRET_ANNOTATION]  # older operators did not say
    kube.objects[("Job", "serving", name)] = old
    replaced = cmc.sync_model_cache(kube, "serving", thief)
    assert ("Job", name) in kube.deleted and (replaced.reason, replaced.ready) == ("DownloadPending", False)
    assert "Bearer" not in json.dumps(replaced.status)
    again = cmc.sync_model_cache(kube, "serving", thief)
    assert again.reason == "Downloading" and mc.job_secrets(kube.objects[("Job", "serving", name)]) == []


def test_the_job_of_a_dropped_secret_goes_and_the_copy_stays_for_the_other_backend() -> None:
    """Two Jobs of one source (a Secret and none): deleting the backend with the Secret makes its Job stale and the
    cleanup keeps the copy the other backend still names."""
    kube = FakeKube()
    with_secret, without = {"uri": "s3://models/shared", "secretRef": {"name": "s3"}}, {"uri": "s3://models/shared"}
    backend_obj(kube, "admin", with_secret)
    backend_obj(kube, "tenant", without)
    for source in (with_secret, without):
        cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
        complete(kube, mc.download_job_name(spec(source).model.source))
    assert len(download_jobs(kube)) == 2
    del kube.objects[("LLMBackend", "serving", "admin")]
    assert cmc.cleanup_model_caches(kube, "serving") is False
    assert ("Job", mc.download_job_name(spec(with_secret).model.source)) in kube.deleted
    assert ("Job", mc.download_job_name(spec(without).model.source)) not in kube.deleted
    (cleanup,) = [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    args = cleanup["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--keep"] == ["s3/models/shared/refs/latest"]


def test_the_last_log_line_is_read_with_a_byte_limit(hub) -> None:
    """The running pod's last log line is read with limitBytes: a line far longer than any progress line (not the
    program's) is cut by the API server and ignored, never read whole into the operator."""
    kube = FakeKube()
    source = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}
    cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    job_pod(kube, mc.download_job_name(spec(source).model.source), {"running": {}})
    kube.logs["fetch-1"] = json.dumps({"phase": "Downloading", "bytesDone": 700, "bytesTotal": 1800, "pad": "x" * 20_000})
    huge = cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    assert "bytesDone" not in huge.status
    kube.logs["fetch-1"] = json.dumps({"phase": "Downloading", "bytesDone": 700, "bytesTotal": 1800, "message": "m" * 9000})
    assert len(kube.logs["fetch-1"]) < cmc.LOG_LINE_LIMIT_BYTES
    assert cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b")).status["bytesDone"] == 700


def test_a_changed_secret_ref_cancels_and_cleans_up_the_previous_secret_s_job() -> None:
    """Only the secretRef changes (the URI stays): the Job of the previous Secret is named by no backend any more. It
    is cancelled while it runs and deleted once the new one finishes; the copy stays (the spec names the source)."""
    kube = FakeKube()
    cmc._cleanup_seen.add("serving")  # a namespace the operator looked at before
    cmc._cleanup_owed.discard("serving")
    old, new = {"uri": "s3://models/rotated", "secretRef": {"name": "s3-old"}}, {"uri": "s3://models/rotated", "secretRef": {"name": "s3-new"}}
    backend_obj(kube, "a", old)
    cmc.sync_model_cache(kube, "serving", spec(old, preset="llama-3.1-8b"), previous_source=old["uri"])
    old_job, new_job = (mc.download_job_name(spec(s).model.source) for s in (old, new))
    backend_obj(kube, "a", new)
    cmc.sync_model_cache(kube, "serving", spec(new, preset="llama-3.1-8b"), previous_source=old["uri"])
    cmc.sync_model_cache(kube, "serving", spec(new, preset="llama-3.1-8b"), previous_source=old["uri"])
    assert kube.objects[("Job", "serving", old_job)]["spec"].get("suspend") is True, "the previous Secret's download goes on"
    complete(kube, new_job)
    cmc.sync_model_cache(kube, "serving", spec(new, preset="llama-3.1-8b"), previous_source=new["uri"])
    assert ("Job", old_job) in kube.deleted and ("Job", new_job) not in kube.deleted
    (cleanup,) = [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    args = cleanup["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--keep"] == ["s3/models/rotated/refs/latest"]


def test_a_dropped_source_whose_claim_never_bound_needs_no_cleanup_job() -> None:
    """Issue 49: with no StorageClass the cache claim stays Pending; dropping the source left a cleanup Job Pending
    for as long (it needs the claim mounted), and nothing said why. Nothing was ever written there: no cleanup Job,
    and one an older operator left is deleted."""
    kube = FakeKube()
    source = {"uri": "s3://models/never-bound"}
    backend_obj(kube, "a", source)
    cmc.sync_model_cache(kube, "serving", spec(source, preset="llama-3.1-8b"))
    claim_name = mc.cache_claim(spec(source).model.source)
    kube.objects[("PersistentVolumeClaim", "serving", claim_name)]["status"] = {"phase": "Pending"}
    job = mc.download_job_name(spec(source).model.source)
    leftover = mc.render_cleanup_job("serving", mc.CacheCleanup(claim_name, ("older",), ()), "img", 1000)
    kube.objects[("Job", "serving", leftover["metadata"]["name"])] = leftover
    del kube.objects[("LLMBackend", "serving", "a")]
    assert cmc.cleanup_model_caches(kube, "serving") is False
    assert ("Job", job) in kube.deleted and ("Job", leftover["metadata"]["name"]) in kube.deleted
    assert not [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]


# ---- LoRA adapters (controller/adapters.py): the same download machinery, the report checked against the base ----

def _lora_files(base: str, rank: int = 16) -> dict[str, bytes]:
    config = {"peft_type": "LORA", "base_model_name_or_path": base, "r": rank, "lora_alpha": 32,
              "target_modules": ["q_proj", "v_proj"], "bias": "none"}
    return {"adapter_config.json": json.dumps(config).encode(), "adapter_model.safetensors": b"\0" * 4096}


def test_adapters_are_downloaded_once_checked_against_the_base_and_cleaned_up_when_dropped(hub, tmp_path) -> None:
    from hubserver import Repo

    from llmbackend.api import adapters as api_adapters
    from llmbackend.controller import adapters as ca

    hub.repos["acme/tiny-sql-lora"] = Repo(files=_lora_files("acme/tiny-llama"), sha="1" * 40)
    hub.repos["acme/qwen-sql-lora"] = Repo(files=_lora_files("Qwen/Qwen3-32B"), sha="2" * 40)
    kube = FakeKube()
    base = {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}
    adapters = [{"name": "sql", "source": {"uri": "hf://acme/tiny-sql-lora", "endpoint": hub.endpoint}},
                {"name": "qwen-sql", "source": {"uri": "hf://acme/qwen-sql-lora", "endpoint": hub.endpoint}}]
    doc = {"model": {"preset": "llama-3.1-8b", "source": base}, "adapters": adapters}
    s = LLMBackendSpec.model_validate(doc)
    kube.objects[("LLMBackend", "serving", "llama")] = {"metadata": {"name": "llama"}, "spec": doc}
    cmc._cleanup_seen.add("serving")

    first = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b")
    assert [a["phase"] for a in first or []] == ["Downloading", "Downloading"]
    jobs = [kube.objects[("Job", "serving", mc.download_job_name(a.source, adapter=True))] for a in s.adapters or []]
    assert kube.get("PersistentVolumeClaim", "serving", mc.DEFAULT_CACHE_CLAIM) is not None
    assert ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") is not None
    assert len([o for o in kube.created if o["kind"] == "Job"]) == 2  # once per adapter source

    root = tmp_path / "cache"
    for job in jobs:  # the Jobs' own command lines, run by the real download program
        run_download_job(job, root)
        finish_download(kube, job, root, 0)
    done = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") or []
    by_name = {a["name"]: a for a in done}
    assert (by_name["sql"]["phase"], by_name["sql"]["rank"]) == ("Ready", 16)
    assert by_name["sql"]["path"].endswith(mc.ref_path(s.adapters[0].source))  # type: ignore[index]
    wrong = by_name["qwen-sql"]
    assert (wrong["phase"], wrong["reason"]) == ("Incompatible", api_adapters.ADAPTER_BASE_MISMATCH)
    assert "Qwen/Qwen3-32B" in wrong["message"] and "acme/tiny-llama" in wrong["message"]
    assert ca.ready_adapters(done) == {"sql"}
    assert ca.adapters_problem(done)[0] == api_adapters.ADAPTER_BASE_MISMATCH  # type: ignore[index]
    assert (root / mc.ref_path(s.adapters[0].source) / "adapter_config.json").is_file()  # type: ignore[index]

    # qwen-sql is dropped from the spec: its Job goes and a cleanup keeps the base's and sql's copies only.
    doc["adapters"] = adapters[:1]
    kube.objects[("LLMBackend", "serving", "llama")]["spec"] = doc
    kept = ca.sync_adapters(kube, "serving", LLMBackendSpec.model_validate(doc), previous=done,
                              served_model="llama-3.1-8b")
    assert [a["name"] for a in kept or []] == ["sql"]
    assert ("Job", jobs[1]["metadata"]["name"]) in kube.deleted
    (cleanup,) = [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    args = cleanup["spec"]["template"]["spec"]["containers"][0]["args"]
    keep = {args[i + 1] for i, a in enumerate(args) if a == "--keep"}
    assert keep == {mc.ref_path(s.model.source), mc.ref_path(s.adapters[0].source)}  # type: ignore[arg-type,index]


def test_an_adapter_s_secret_is_never_sent_to_an_endpoint_the_admin_did_not_allow(hub, tmp_path, allowed_endpoints) -> None:
    """docs/security.md's row for adapters.source.endpoint: as for the base model, no Job (nothing reads the Secret)
    and no request until the admin allows the endpoint; then the real program sends the token there."""
    from hubserver import Repo

    from llmbackend.controller import adapters as ca

    hub.repos["acme/sql-lora"] = Repo(files=_lora_files("meta-llama/Llama-3.1-8B-Instruct"), sha="3" * 40)
    allowed_endpoints()
    kube = FakeKube()
    mine = {"uri": "hf://acme/sql-lora", "endpoint": hub.endpoint, "secretRef": {"name": "hf-token"}}
    doc = {"model": {"preset": "llama-3.1-8b", "source": {"uri": GATED}}, "adapters": [{"name": "sql", "source": mine}]}
    s = LLMBackendSpec.model_validate(doc)
    (refused,) = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") or []
    assert (refused["phase"], refused["reason"]) == ("Failed", "EndpointNotAllowed")
    assert hub.endpoint in refused["message"] and "hf-token" in refused["message"]
    assert kube.created == [] and not hub.log
    allowed_endpoints(hub.endpoint)
    (started,) = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") or []
    assert started["phase"] == "Downloading"
    job = kube.objects[("Job", "serving", mc.download_job_name(s.adapters[0].source, adapter=True))]  # type: ignore[index]
    assert mc.job_secrets(job) == ["hf-token"]
    run_download_job(job, tmp_path / "claim", env={"HF_TOKEN": "hf_good"})
    assert {h.get("Authorization") for _, _, h in hub.requests_for("/api/models/")} == {"Bearer hf_good"}


def test_an_adapter_job_that_reads_another_secret_is_replaced_not_trusted(hub, allowed_endpoints) -> None:
    """Issue 46 F5: the adapter's download Job had no credentials check (the base model's has credentials_match). A
    finished Job of the adapter Job's name that read another Secret (an older operator's, or one made by hand with
    the operator's labels) was trusted: its report decided the adapter Ready. Now it is deleted and replaced by the
    adapter's own Job, as the base model's is."""
    from llmbackend.controller import adapters as ca

    allowed_endpoints(hub.endpoint)
    kube = FakeKube()
    mine = {"uri": "hf://acme/sql-lora", "endpoint": hub.endpoint}
    doc = {"model": {"preset": "llama-3.1-8b", "source": {"uri": GATED}}, "adapters": [{"name": "sql", "source": mine}]}
    s = LLMBackendSpec.model_validate(doc)
    name = mc.download_job_name(s.adapters[0].source, adapter=True)  # type: ignore[index]
    other = spec({**mine, "secretRef": {"name": "victim-hf"}}).model.source
    old = mc.render_download_job("serving", other, "img", 1000, adapter=True)
    old["metadata"] = {**old["metadata"], "name": name, "uid": "old-uid"}
    kube.objects[("Job", "serving", name)] = old
    finished = {"phase": "Ready", "adapterConfig": {"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"],
                                                    "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}}
    kube.objects[("Job", "serving", name)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    job_pod(kube, name, {"terminated": {"exitCode": 0, "message": json.dumps(finished)}})
    (replaced,) = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") or []
    assert ("Job", name) in kube.deleted and (replaced["phase"], replaced["reason"]) == ("Pending", "DownloadPending")
    # Until the API server has it gone (its pods first), the deleting Job's report is not read either.
    kube.objects[("Job", "serving", name)] = {**old, "metadata": {**old["metadata"], "deletionTimestamp": "now"}}
    (deleting,) = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") or []
    assert (deleting["phase"], deleting["reason"]) == ("Pending", "DownloadPending") and "being deleted" in deleting["message"]
    del kube.objects[("Job", "serving", name)]
    (again,) = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") or []
    assert again["phase"] == "Downloading" and mc.job_secrets(kube.objects[("Job", "serving", name)]) == []


def test_a_bloated_adapter_config_is_invalid_not_served_unchecked(hub, tmp_path) -> None:
    """Issue 46 F2: adapter_config.json with use_dora as a 3,000-item list made a report over the kubelet's 4 KiB, so
    the operator could not parse it and served the adapter as AdapterNotChecked, its base model never compared (here
    another base). Now the real program reports an invalid config that names the field, and the adapter is not
    served."""
    from hubserver import Repo

    from llmbackend.api import adapters as api_adapters
    from llmbackend.controller import adapters as ca

    config = {"peft_type": "LORA", "base_model_name_or_path": "Qwen/Qwen3-32B", "r": 8, "target_modules": ["q_proj"],
              "use_dora": list(range(3000))}
    hub.repos["acme/bloated-lora"] = Repo(files={"adapter_config.json": json.dumps(config).encode(),
                                                 "adapter_model.safetensors": b"\0" * 4096}, sha="3" * 40)
    kube = FakeKube()
    doc = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://acme/tiny-llama", "endpoint": hub.endpoint}},
           "adapters": [{"name": "sql", "source": {"uri": "hf://acme/bloated-lora", "endpoint": hub.endpoint}}]}
    s = LLMBackendSpec.model_validate(doc)
    ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b")
    job = kube.objects[("Job", "serving", mc.download_job_name(s.adapters[0].source, adapter=True))]  # type: ignore[index]
    root = tmp_path / "cache"
    run_download_job(job, root)
    finish_download(kube, job, root, 0)
    (got,) = ca.sync_adapters(kube, "serving", s, served_model="llama-3.1-8b") or []
    assert (got["phase"], got["reason"]) == ("Incompatible", api_adapters.ADAPTER_CONFIG_INVALID), got
    assert "use_dora" in got["message"] and ca.ready_adapters([got]) == set()


def test_a_download_waiting_for_a_cleanup_whose_pod_cannot_start_says_why_and_becomes_stuck() -> None:
    """A cleanup Job of a bound claim whose pod never starts (an image the nodes cannot pull after an upgrade, no
    node) held the download of every backend on that claim at WaitingForCacheCleanup, Progressing with no deadline
    and no word of the cleanup pod's trouble. The wait now names it, and the progress deadline applies."""
    kube, v1, v2 = two_revisions_downloaded()
    backend_obj(kube, "a", v2)
    cmc.sync_model_cache(kube, "serving", spec(v2, preset="llama-3.1-8b"), previous_source=v1["uri"])
    (cleanup,) = [o for o in kube.created if o["metadata"]["name"].startswith("llmb-cleanup-")]
    name = cleanup["metadata"]["name"]
    backend_obj(kube, "c", v1)

    job_pod(kube, name, {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
            name="cleanup-1")
    pulled = cmc.sync_model_cache(kube, "serving", spec(v1, preset="llama-3.1-8b"))
    assert (pulled.reason, pulled.stuck, pulled.stuck_since) == ("DownloaderImagePullFailed", True, None), pulled
    assert f"Job {name}" in pulled.message and "cache cleanup pod cleanup-1" in pulled.message, pulled.message

    del kube.objects[("Pod", "serving", "cleanup-1")]
    job_pod(kube, name, {"waiting": {"reason": "ContainerCreating"}}, name="cleanup-2")
    kube.objects[("Pod", "serving", "cleanup-2")]["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-12-03T00:00:05Z",
         "message": "0/4 nodes are available: 4 Insufficient cpu."}]
    unscheduled = cmc.sync_model_cache(kube, "serving", spec(v1, preset="llama-3.1-8b"))
    assert (unscheduled.reason, unscheduled.stuck, unscheduled.stuck_since) == (
        "FetchPodUnschedulable", True, "2026-12-03T00:00:05Z"), unscheduled
    assert "the download starts when it finishes" in unscheduled.message

    del kube.objects[("Pod", "serving", "cleanup-2")]
    job_pod(kube, name, {"running": {}}, name="cleanup-3")
    running = cmc.sync_model_cache(kube, "serving", spec(v1, preset="llama-3.1-8b"))
    assert (running.reason, running.stuck) == ("WaitingForCacheCleanup", False), "a running cleanup is progress"
