"""Pure rendering of the model cache: claim, download Job, serving pods, outcome -> status."""

from __future__ import annotations

import hashlib
import json

import pytest

from llmbackend import model_fetch as mf
from llmbackend.api.v1alpha1 import LLMBackendSpec, ModelSource, PlanStatus
from llmbackend.render import modelcache as mc
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects

GIB = 1024**3


def src(**fields) -> ModelSource:
    return ModelSource.model_validate(fields)


def test_backends_of_one_source_share_one_job_and_one_copy() -> None:
    a = src(uri="hf://Qwen/Qwen3-32B@main", secretRef={"name": "hf"})
    b = src(uri="hf://Qwen/Qwen3-32B@main", secretRef={"name": "hf"}, cache={"size": "100Gi"})
    assert mc.download_job_name(a) == mc.download_job_name(b)
    assert mc.model_path(a) == mc.model_path(b) == "/model-cache/hf/Qwen/Qwen3-32B/refs/main"
    assert mc.download_job_name(src(uri="hf://Qwen/Qwen3-32B@v2")) != mc.download_job_name(a)
    assert mc.download_job_name(src(uri="hf://Qwen/Qwen3-32B@main", cache={"claimName": "shared"})) != mc.download_job_name(a)


@pytest.mark.parametrize("fields,checkpoint_bytes,size", [
    ({"uri": "s3://m/x"}, None, "10Gi"),
    ({"uri": "s3://m/x"}, 65 * 10**9, f"{-(-int(65e9 * 1.1) // GIB)}Gi"),
    ({"uri": "s3://m/x", "cache": {"size": "2Ti"}}, 65 * 10**9, "2Ti"),
])
def test_cache_claim_sized_from_the_checkpoint_and_not_owned(fields, checkpoint_bytes, size) -> None:
    pvc = mc.render_cache_claim("serving", src(**fields), checkpoint_bytes)
    assert pvc["spec"]["resources"]["requests"]["storage"] == size
    assert "ownerReferences" not in pvc["metadata"]  # deleting a backend never deletes the cache
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["metadata"]["name"] == "llmbackend-model-cache"


def test_the_secret_is_part_of_the_download_job_s_identity() -> None:
    """A tenant's backend without a Secret and an admin's with one, same URI: two Jobs, each reading only its own
    backend's Secret (before, one Job with the Secret of whichever backend came first). One copy for all."""
    uri = "hf://meta-llama/Llama-3.3-70B-Instruct"
    none, victim, other = src(uri=uri), src(uri=uri, secretRef={"name": "victim-hf"}), src(uri=uri, secretRef={"name": "b"})
    assert len({mc.download_job_name(s) for s in (none, victim, other)}) == 3
    assert mc.model_path(none) == mc.model_path(victim) == mc.model_path(other)
    # Without a Secret the name is the one older operators gave (their Jobs of public sources stay in use).
    assert mc.download_job_name(none) == "llmb-fetch-" + hashlib.sha256(
        "\n".join(["llmbackend-model-cache", uri, "", ""]).encode()).hexdigest()[:16]
    jobs = {name: mc.render_download_job("serving", s, "img", 1000) for name, s in
            (("none", none), ("victim", victim), ("other", other))}
    assert [mc.job_secrets(jobs[n]) for n in ("none", "victim", "other")] == [[], ["victim-hf"], ["b"]]
    assert [jobs[n]["metadata"]["annotations"][mc.SECRET_ANNOTATION] for n in ("none", "victim")] == ["", "victim-hf"]
    assert "env" not in jobs["none"]["spec"]["template"]["spec"]["containers"][0] or not \
        jobs["none"]["spec"]["template"]["spec"]["containers"][0]["env"]
    # Each Job stages apart (the program's --staging-name): concurrent writers of one copy never share a file.
    for job in jobs.values():
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--staging-name") + 1] == job["metadata"]["name"]
    assert mc.credentials_match(jobs["victim"], victim) and not mc.credentials_match(jobs["victim"], none)
    assert not mc.credentials_match(jobs["none"], victim) and not mc.credentials_match(jobs["other"], victim)
    assert all(mc.is_download_job(jobs[n], none) for n in jobs)  # the source's Job; which Secret is checked apart


def test_download_job() -> None:
    s = src(uri="s3://models/llama", secretRef={"name": "s3"}, endpoint="http://minio.storage:9000", region="eu-west-1",
            cache={"claimName": "shared", "storageClassName": "nfs"})
    job = mc.render_download_job("serving", s, "ghcr.io/llmbackend/operator:0.1.0", 1000)
    assert "ownerReferences" not in job["metadata"]
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["python", "-m", "llmbackend.model_fetch"]
    assert c["args"][:5] == ["download", "--source", "s3://models/llama", "--cache", mc.CACHE_MOUNT]
    assert c["args"][-4:] == ["--endpoint", "http://minio.storage:9000", "--region", "eu-west-1"]
    assert {e["name"]: e["valueFrom"]["secretKeyRef"]["optional"] for e in c["env"]} == {
        "AWS_ACCESS_KEY_ID": False, "AWS_SECRET_ACCESS_KEY": False, "AWS_SESSION_TOKEN": True}
    assert pod["volumes"][0] == {"name": "cache", "persistentVolumeClaim": {"claimName": "shared"}}
    assert pod["restartPolicy"] == "Never" and c["securityContext"]["runAsNonRoot"] is True
    # Exit codes no retry can fix fail the Job at once; a dropped network (17) or bad bytes (16) retry.
    rule = job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]
    assert set(rule["values"]) == {mf.EXIT_USAGE, mf.EXIT_UNAUTHORIZED, mf.EXIT_FORBIDDEN, mf.EXIT_NOT_FOUND,
                                   mf.EXIT_NO_CONFIG, mf.EXIT_TOO_LARGE, mf.EXIT_NO_CREDENTIALS}
    hf = mc.render_download_job("serving", src(uri="hf://meta-llama/Llama-3.1-8B-Instruct", secretRef={"name": "hf"}), "img", 1000)
    assert [e["name"] for e in hf["spec"]["template"]["spec"]["containers"][0]["env"]] == ["HF_TOKEN"]
    json.dumps(job)


def test_serving_pods_mount_only_their_own_copy_read_only_and_wait_for_the_marker() -> None:
    spec = LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}},
                                          "engine": {"backend": "vllm"}})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1, memory_per_gpu_bytes=1)
    objects = desired_objects(BackendRef("llama", "serving", "uid"), spec, plan, 1, RolloutStrategy("RollingUpdate", 1, 0))
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "llmbackend-model-cache", "readOnly": True}} in pod["volumes"]
    triton = next(c for c in pod["containers"] if c["name"] == "triton")
    # only the backend's own copy: the ref, which the kubelet resolves to the copy's folder, at the path the ref has
    own = {"name": "model-cache", "mountPath": "/model-cache/hf/meta-llama/Llama-3.1-8B-Instruct/refs/main",
           "subPath": "hf/meta-llama/Llama-3.1-8B-Instruct/refs/main", "readOnly": True}
    assert [m for m in triton["volumeMounts"] if m["name"] == "model-cache"] == [own]
    wait = pod["initContainers"][-1]
    assert wait["name"] == "wait-model" and wait["volumeMounts"] == [own]
    assert wait["env"] == [{"name": "MARKER", "value": f"/model-cache/hf/meta-llama/Llama-3.1-8B-Instruct/refs/main/{mf.MARKER}"}]
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    model_json = json.loads(next(v for k, v in config["data"].items() if k.endswith("model.json")))
    assert model_json["model"] == "/model-cache/hf/meta-llama/Llama-3.1-8B-Instruct/refs/main"


def _pod_templates(backend: str, preset: str, plan: PlanStatus, **serving) -> list[dict]:
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": preset, "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}},
        "engine": {"backend": backend}, "serving": serving})
    objects = desired_objects(BackendRef("llama", "serving", "uid"), spec, plan, 2, RolloutStrategy("RollingUpdate", 1, 0))
    workload = next(o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet"))
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]["spec"]]
    lwt = workload["spec"]["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]


ONE_GPU = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1, memory_per_gpu_bytes=1)
TWO_NODES = PlanStatus(tensor_parallel=8, pipeline_parallel=2, gpus_per_replica=16, nodes_per_replica=2, memory_per_gpu_bytes=1)


@pytest.mark.parametrize("backend,preset,plan,serving", [
    ("vllm", "llama-3.1-8b", ONE_GPU, {}),
    ("tensorrtllm", "llama-3.1-8b", ONE_GPU, {"openai": True}),
    ("tensorrtllm", "llama-3.1-405b", TWO_NODES, {}),
    ("vllm", "llama-3.1-405b", TWO_NODES, {"openai": False}),
], ids=["vllm", "tensorrtllm-openai", "tensorrtllm-mpi", "vllm-ray"])
def test_no_serving_container_can_write_to_the_cache(backend, preset, plan, serving) -> None:
    # Every pod shape: the claim is a read-only volume (the kubelet then mounts it read-only for every mount),
    # each mount of it says so too, and every container that loads from it runs with huggingface_hub offline.
    for pod in _pod_templates(backend, preset, plan, **serving):
        cache_volumes = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert cache_volumes and all(v["persistentVolumeClaim"]["readOnly"] is True for v in cache_volumes)
        names = {v["name"] for v in cache_volumes}
        for c in pod["containers"] + pod.get("initContainers", []):
            mounts = [m for m in c.get("volumeMounts", []) if m["name"] in names]
            assert all(m.get("readOnly") is True for m in mounts), c["name"]
            if mounts and c in pod["containers"]:
                assert {"name": "HF_HUB_OFFLINE", "value": "1"} in c["env"], c["name"]


@pytest.mark.parametrize("job,term,phase,reason", [
    (None, None, "Resolving", "DownloadPending"),
    ({"status": {"active": 1}}, None, "Downloading", "Downloading"),
    ({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, {"resolvedRevision": "abc", "bytesTotal": 5},
     "Ready", "ModelCached"),
    ({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]}},
     {"reason": "SourceUnauthorized", "message": "put a token in HF_TOKEN"}, "Failed", "SourceUnauthorized"),
    ({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}]}},
     None, "Failed", "BackoffLimitExceeded"),
])
def test_job_outcome(job, term, phase, reason) -> None:
    out = mc.job_outcome(job, term)
    assert (out["phase"], out["reason"]) == (phase, reason)
    if term and "resolvedRevision" in term:
        assert out["resolvedRevision"] == "abc" and out["bytesTotal"] == 5


# ---- pvc sources: the inspector Job ----

def test_inspect_job_reads_the_claim_read_only_and_is_owned() -> None:
    pvc = src(pvc={"claimName": "weights", "path": "/llama/8b/"}).pvc
    owner = BackendRef("llama", "serving", "u1").owner_reference()
    job = mc.render_inspect_job("serving", "llama", pvc, "img:1", 1000, {"llmbackend.dev/backend": "llama"}, owner)
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["inspect", "--dir", f"{mc.INSPECT_MOUNT}/llama/8b", "--termination-log", "/dev/termination-log"]
    assert c["volumeMounts"][0]["readOnly"] is True and c["securityContext"]["readOnlyRootFilesystem"] is True
    assert job["metadata"]["ownerReferences"] == [owner]
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "model-inspect"
    assert set(job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"]) == {mf.EXIT_NO_CONFIG, mf.EXIT_BAD_CONFIG}
    # One Job per (backend, claim, path): another path or backend is another Job.
    names = {mc.inspect_job_name(b, src(pvc={"claimName": "weights", "path": p}).pvc)
             for b, p in [("llama", "/a"), ("llama", "/b"), ("other", "/a")]}
    assert len(names) == 3 and all(len(n) <= 63 for n in names)


ARCH = {"numLayers": 2, "hiddenSize": 64, "numAttentionHeads": 2, "numKeyValueHeads": 1, "headDim": 32,
        "vocabSize": 100, "parameterCount": 1000}
RUNNING = {"metadata": {"name": "j"}, "status": {}}
COMPLETE = {"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
FAILED = {"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}}


@pytest.mark.parametrize("job,report,pods,phase,reason", [
    (None, None, 0, "Inspecting", "InspectingCheckpoint"),
    (RUNNING, None, 1, "Inspecting", "InspectingCheckpoint"),
    (COMPLETE, {"phase": "Ready", "architecture": ARCH}, 1, "Ready", "CheckpointInspected"),
    (RUNNING, {"phase": "Ready", "architecture": ARCH}, 1, "Ready", "CheckpointInspected"),  # its last log line
    (FAILED, {"phase": "Failed", "reason": "UnsupportedModelType", "message": "m"}, 1, "Failed", "UnsupportedModelType"),
    (COMPLETE, None, 0, "Rerun", "InspectingCheckpoint"),
    (COMPLETE, {"phase": "Ready"}, 1, "Failed", "CheckpointArchitectureUnknown"),
    (FAILED, None, 1, "Failed", "CheckpointArchitectureUnknown"),
])
def test_inspect_outcome(job, report, pods, phase, reason) -> None:
    out = mc.inspect_outcome(job, report, pods)
    assert (out["phase"], out["reason"]) == (phase, reason)
    assert ("architecture" in out) == (phase == "Ready")


# ---- cleanup of copies no backend uses (pure decision) ----

V1, V2, OTHER = "hf://acme/m@v1", "hf://acme/m@v2", "s3://bucket/other"


def backend(uri: str | None, deleting: bool = False, **source) -> dict:
    meta = {"name": "b", "deletionTimestamp": "2026-12-03T00:00:00Z"} if deleting else {"name": "b"}
    src_ = {"uri": uri, **source} if uri else {"pvc": {"claimName": "w"}}
    return {"metadata": meta, "spec": {"model": {"preset": "llama-3.1-8b", "source": src_}}}


def download(uri: str, state: str = "Complete", **source) -> dict:
    job = mc.render_download_job("ns", src(uri=uri, **source), "img", 1000)
    job["metadata"]["uid"] = f"uid-{job['metadata']['name']}"  # as the API server sets
    if state:
        job["status"] = {"conditions": [{"type": state, "status": "True"}]}
    return job


def cleanup_job(claim: str = mc.DEFAULT_CACHE_CLAIM, state: str | None = None) -> dict:
    job = mc.render_cleanup_job("ns", mc.CacheCleanup(claim, ("x",), ()), "img", 1000)
    if state:
        job["status"] = {"conditions": [{"type": state, "status": "True"}]}
    return job


def serving_pod(uri: str, phase: str = "Running") -> dict:
    s = src(uri=uri)
    volume, _ = mc.serving_volume(s)
    return {"metadata": {"name": "p"}, "status": {"phase": phase},
            "spec": {"volumes": [volume], "initContainers": [mc.wait_init_container(s, "img", {})]}}


BAD_REVISION = {"metadata": {"name": "dots"}, "spec": {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://org/name@.."}}}}
OLD_POD_OF_BAD_REVISION = {  # what an older operator rendered for it
    "metadata": {"name": "p"}, "status": {"phase": "Running"},
    "spec": {"volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": mc.DEFAULT_CACHE_CLAIM}}],
             "initContainers": [{"name": "wait-model", "env": [
                 {"name": "MARKER", "value": f"{mc.CACHE_MOUNT}/hf/org/name/refs/../{mc.MARKER}"}]}]}}


def ref(uri: str) -> str:
    return mc.ref_path(src(uri=uri))


@pytest.mark.parametrize("case,backends,jobs,pods,want", [
    ("both sources used", [backend(V1), backend(V2)], [download(V1), download(V2)], [], []),
    ("v1 dropped: clean, keep v2", [backend(V2)], [download(V1), download(V2)], [],
     [(("v1",), (ref(V2),), None)]),
    ("last backend deleted: keep nothing", [], [download(V1)], [], [(("v1",), (), None)]),
    ("a backend being deleted does not hold its source", [backend(V1, deleting=True)], [download(V1)], [],
     [(("v1",), (), None)]),
    ("same URI, other endpoint: another copy (the endpoint is in the key)", [backend(V1, endpoint="http://mirror:8080")],
     [download(V1)], [], [(("v1",), (mc.ref_path(src(uri=V1, endpoint="http://mirror:8080")),), None)]),
    ("pvc backends hold nothing", [backend(None)], [download(V1)], [], [(("v1",), (), None)]),
    ("pods still load the dropped copy: wait", [backend(V2)], [download(V1), download(V2)], [serving_pod(V1)],
     [(("v1",), tuple(sorted([ref(V1), ref(V2)])), "serving pods still load")]),
    ("finished pods do not count", [backend(V2)], [download(V1), download(V2)], [serving_pod(V1, "Succeeded")],
     [(("v1",), (ref(V2),), None)]),
    ("a download still running on the claim: wait", [backend(V2)], [download(V1), download(V2, state="")], [],
     [(("v1",), (ref(V2),), "still running")]),
    ("a cleanup still running: wait", [], [download(V1), cleanup_job()], [], [(("v1",), (), "still running")]),
    ("a finished cleanup does not block", [], [download(V1), cleanup_job(state="Complete")], [], [(("v1",), (), None)]),
    ("another claim is another cleanup", [backend(V1)], [download(V1), download(V1, cache={"claimName": "big"})], [],
     [(("v1",), (), None)]),
    ("a source that is not valid names no copy", [{"metadata": {"name": "x"}, "spec": {"model": {"source": {"uri": "gs://x"}}}}],
     [download(V1)], [], [(("v1",), (), None)]),
    # The probe: `@..` (stored before the API rejected it) made the keep list one the cleanup program refuses,
    # which blocked every cleanup of the namespace.
    ("an @.. backend and its old pod do not block the cleanup", [BAD_REVISION], [download(V1)], [OLD_POD_OF_BAD_REVISION],
     [(("v1",), (), None)]),
])
def test_cache_cleanups(case, backends, jobs, pods, want) -> None:
    names = {mc.download_job_name(src(uri=u, **kw)): label for u, kw, label in [
        (V1, {}, "v1"), (V2, {}, "v2"), (OTHER, {}, "other"), (V1, {"cache": {"claimName": "big"}}, "v1")]}
    got = [(tuple(names[j] for j in c.stale_jobs), c.keep, c.wait) for c in mc.cache_cleanups(backends, jobs, pods)]
    assert [(stale, keep) for stale, keep, _ in got] == [(stale, keep) for stale, keep, _ in want], case
    for (_, _, wait), (_, _, want_wait) in zip(got, want):
        assert (wait is None) == (want_wait is None) and (want_wait is None or want_wait in wait), (case, wait)


def test_cleanup_job_keeps_what_the_decision_keeps() -> None:
    cleanup = mc.CacheCleanup("big", ("llmb-fetch-a",), ("hf/acme/m/refs/v2", "s3/b/x/refs/latest"))
    job = mc.render_cleanup_job("ns", cleanup, "img:1", 1000)
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["prune", "--cache", mc.CACHE_MOUNT, "--termination-log", "/dev/termination-log",
                         "--keep", "hf/acme/m/refs/v2", "--keep", "s3/b/x/refs/latest"]
    assert job["spec"]["template"]["spec"]["volumes"] == [{"name": "cache", "persistentVolumeClaim": {"claimName": "big"}}]
    assert "ownerReferences" not in job["metadata"] and job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["metadata"]["labels"][mc.CACHE_LABEL] == "big"
    assert mc.cleanup_job_name("big", ("a",)) != mc.cleanup_job_name("big", ("b",))
    assert mc.pod_cache_ref({"spec": {}}) is None


def _fetch_pod(job: dict, phase: str = "Running") -> dict:
    """A pod as the Job controller creates it: the Job's labels and its controller ownerReference."""
    return {"metadata": {"name": f"{job['metadata']['name']}-x", "labels": {"job-name": job["metadata"]["name"]},
                         "ownerReferences": [_job_owner(job)]},
            "status": {"phase": phase}}


def _job_owner(job: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def test_a_job_s_pods_are_those_it_controls_by_uid_not_those_with_its_labels() -> None:
    """Issue 42: a serving pod labelled job-name=<download Job> had its log read as the download's report."""
    job = download(V1, state="")
    own = _fetch_pod(job)
    forged = {"metadata": {"name": "llama-5d8f-abcde", "labels": {
        **job["spec"]["template"]["metadata"]["labels"], "job-name": job["metadata"]["name"],
        "controller-uid": job["metadata"]["uid"], "batch.kubernetes.io/job-name": job["metadata"]["name"],
        "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llama-5d8f", "uid": "rs",
                             "controller": True}]}, "status": {"phase": "Running"}}
    not_controller = {**forged, "metadata": {**forged["metadata"], "ownerReferences": [
        {**_job_owner(job), "controller": False}]}}
    other_job = {**forged, "metadata": {**forged["metadata"], "ownerReferences": [{**_job_owner(job), "uid": "another"}]}}
    assert mc.job_pods(job, [forged, own, not_controller, other_job]) == [own]
    assert mc.job_pods(None, [own]) == [] and mc.job_pods({"metadata": {"name": "x"}}, [own]) == []
    # A forged pod that runs holds no cleanup back either (it is no pod of the stale download).
    (cleanup,) = mc.cache_cleanups([], [download(V1)], [forged])
    assert cleanup.wait is None


def test_a_download_job_is_the_operator_s_only_as_rendered_for_its_source() -> None:
    source = src(uri=V1)
    job = download(V1, state="")
    assert mc.is_download_job(job, source)
    assert not mc.is_download_job(download(V2, state=""), source)
    relabelled = {**job, "metadata": {**job["metadata"], "labels": {"app": "mine"}}}
    owned = {**job, "metadata": {**job["metadata"], "ownerReferences": [{"kind": "CronJob", "uid": "u", "controller": True}]}}
    assert not mc.is_download_job(relabelled, source) and not mc.is_download_job(owned, source)


def test_a_stale_download_still_running_is_cancelled_not_waited_for() -> None:
    running = download(V1, state="")
    (cleanup,) = mc.cache_cleanups([], [running], [_fetch_pod(running)])
    assert cleanup.cancel == (running["metadata"]["name"],) and "being cancelled" in cleanup.wait
    running["spec"]["suspend"] = True  # cancelled: its pod terminates, still writing until it is gone
    (cleanup,) = mc.cache_cleanups([], [running], [_fetch_pod(running)])
    assert cleanup.cancel == () and "being cancelled" in cleanup.wait
    (cleanup,) = mc.cache_cleanups([], [running], [])
    assert cleanup.cancel == () and cleanup.wait is None, "its pod gone: the copy is cleaned up now"


def test_a_download_still_named_is_never_cancelled() -> None:
    running = download(V2, state="")
    cleanups = mc.cache_cleanups([backend(V2)], [download(V1), running], [_fetch_pod(running)])
    assert [c.cancel for c in cleanups] == [()] and "still running" in cleanups[0].wait
