"""Status that tells the truth while work is in flight or stuck, driven through the real operator on the local
control plane and read as Argo CD reads it (its own evaluator with the shipped health.lua, tests/argocd) and as
`kubectl get llmb` prints it: a download whose claim has no StorageClass, serving pods waiting for GPUs within
and past spec.serving.progressDeadlineSeconds, a backend deleted mid-download, and a serving container restarting
after its engine died.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
from conftest import apply_manifest, backend_manifest, condition, wait_for

from llmbackend.api.v1alpha1 import ModelSource
from llmbackend.render import modelcache as mc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "argocd"))
from argocd_health import ensure_binary, health  # noqa: E402

NO_VOLUME = "no-volume-cache"  # a cache claim no PersistentVolume is bound to, in a cluster without StorageClasses


@pytest.fixture(scope="module")
def argocd():
    return ensure_binary()


def current(cluster, namespace: str, name: str):
    obj = cluster.kube.get("LLMBackend", namespace, name)
    if not obj or (obj.get("status") or {}).get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    return obj


def argo_says(cluster, namespace: str, name: str, argocd, want: str, timeout: float = 60):
    """(backend, Argo CD's message) once Argo CD's evaluator says `want` for the current generation."""
    def check():
        obj = current(cluster, namespace, name)
        if obj is None:
            return None
        status, message = health(argocd, obj)
        return (obj, message) if status == want else None
    return wait_for(check, timeout=timeout, interval=1, what=f"Argo CD health {want}")


def kubectl_row(cluster, namespace: str, name: str) -> dict[str, str]:
    """`kubectl get llmb` (no flags) as {column: value}."""
    header, row = cluster.kubectl("get", "llmb", name, "-n", namespace).stdout.splitlines()[:2]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None]))
    return {header[a:b].strip(): row[a:b].strip() for a, b in bounds}


def events(cluster, namespace: str, name: str) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in
            cluster.kube.list("Event", namespace, field_selector=f"involvedObject.name={name}")]


def no_storage_class_source(uri: str) -> dict:
    return {"uri": uri, "cache": {"claimName": NO_VOLUME, "size": "20Gi"}}


def test_a_download_on_a_claim_without_storage_class_is_progressing_then_degraded_with_the_fix(
        cluster, operator, namespace, argocd):
    # No preset: the plan waits for the checkpoint, and the download cannot start (its claim never binds).
    manifest = backend_manifest("nosc", namespace, model={"source": no_storage_class_source("s3://models/nosc")},
                                serving={"progressDeadlineSeconds": 60})
    apply_manifest(cluster, manifest)
    obj, message = argo_says(cluster, namespace, "nosc", argocd, "Progressing", timeout=60)
    wait_for(lambda: (condition(current(cluster, namespace, "nosc"), "ModelReady") or {}).get("reason") == "NoStorageClass",
             timeout=60, interval=1, what="ModelReady NoStorageClass")
    obj, message = argo_says(cluster, namespace, "nosc", argocd, "Progressing", timeout=5)
    assert condition(obj, "Planned")["reason"] == "WaitingForCheckpoint" and condition(obj, "Degraded")["status"] == "False"
    assert message.startswith("NoStorageClass: ") and "storageClassName" in message, message
    row = kubectl_row(cluster, namespace, "nosc")
    assert (row["READY"], row["STATUS"], row["REASON"]) == ("0/1", "Progressing", "NoStorageClass"), row
    assert not [e for e in events(cluster, namespace, "nosc") if e[0] == "Warning"], "waiting is no warning"

    obj, message = argo_says(cluster, namespace, "nosc", argocd, "Degraded", timeout=90)
    assert message.startswith("NoStorageClass: ") and "progressDeadlineSeconds" in message, message
    row = kubectl_row(cluster, namespace, "nosc")
    assert (row["STATUS"], row["REASON"]) == ("Degraded", "NoStorageClass"), row
    wait_for(lambda: ("Warning", "NoStorageClass") in events(cluster, namespace, "nosc"), timeout=30,
             what="a Warning event naming the cause")


def hog_gpus(cluster, namespace: str) -> None:
    """Every GPU of the four DGX nodes taken by plain pods (as other workloads would)."""
    for i in range(4):
        cluster.kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"hog-{i}", "namespace": namespace},
                             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                      "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    wait_for(lambda: all((p.get("spec") or {}).get("nodeName") for p in cluster.kube.list("Pod", namespace)),
             timeout=60, what="the GPU hogs scheduled")


def test_pods_waiting_for_gpus_are_progressing_within_the_deadline_and_degraded_past_it(
        cluster, operator, namespace, argocd):
    hog_gpus(cluster, namespace)
    try:
        apply_manifest(cluster, backend_manifest("waits", namespace, serving={"progressDeadlineSeconds": 45}))
        def waiting():
            obj = current(cluster, namespace, "waits")
            return obj if (condition(obj, "Progressing") or {}).get("reason") == "WaitingForNodes" else None
        obj = wait_for(waiting, timeout=60, interval=1, what="Progressing WaitingForNodes")
        status, message = health(argocd, obj)
        assert status == "Progressing" and "Insufficient nvidia.com/gpu" in message, (status, message)
        assert condition(obj, "Degraded")["status"] == "False"
        row = kubectl_row(cluster, namespace, "waits")
        assert (row["READY"], row["STATUS"], row["REASON"], row["TPXPP"]) == ("0/1", "Progressing", "WaitingForNodes", "1x1"), row

        obj, message = argo_says(cluster, namespace, "waits", argocd, "Degraded", timeout=120)
        assert message.startswith("Unschedulable: ") and "progressDeadlineSeconds" in message, message
        row = kubectl_row(cluster, namespace, "waits")
        assert (row["STATUS"], row["REASON"]) == ("Degraded", "Unschedulable"), row

        # GPUs freed: the pod runs, and the backend is Healthy again without a change to it.
        for i in range(4):
            cluster.kube.delete("Pod", namespace, f"hog-{i}")
        obj, message = argo_says(cluster, namespace, "waits", argocd, "Healthy", timeout=120)
        assert kubectl_row(cluster, namespace, "waits")["STATUS"] == "Ready"
    finally:
        for i in range(4):
            cluster.kube.delete("Pod", namespace, f"hog-{i}")
        cluster.kubectl("delete", "llmb", "waits", "-n", namespace, "--wait=true", check=False)


def test_a_serving_container_restarting_after_its_engine_died_is_degraded_with_the_engines_words(
        cluster, operator, namespace, argocd):
    """The serving model writes `EngineFailed: <reason>` as the container's termination message before it stops
    tritonserver (render/models `exit_server`; tests/triton/test_engine_lifecycle_real_triton.py proves that part on a
    real server). The kubelet restarts the container and shows the message as lastState; here the test writes that
    status as the kubelet would (kwok runs no containers), and the operator must say it: Degraded EngineFailed with
    the engine's words, a Warning event, `kubectl get llmb`, Argo CD; then healthy again once the container is ready."""
    apply_manifest(cluster, backend_manifest("dies", namespace))
    wait_for(lambda: (o := current(cluster, namespace, "dies")) and (condition(o, "Available") or {}).get("status")
             == "True" and o, timeout=90, interval=1, what="dies Available")
    [pod] = cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend=dies")
    name, healthy = pod["metadata"]["name"], copy.deepcopy(pod["status"])
    reason = "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."
    statuses = copy.deepcopy(healthy["containerStatuses"])
    serving = statuses[0]  # the serving container (the pod's first)
    serving.update(ready=False, started=False, restartCount=1, lastState={"terminated": {
        "exitCode": 0, "reason": "Completed", "message": f"EngineFailed: {reason}",
        "startedAt": "2026-12-06T00:00:00Z", "finishedAt": "2026-12-06T00:10:00Z"}})
    not_ready = [{**c, "status": "False"} if c["type"] in ("Ready", "ContainersReady") else c
                 for c in healthy["conditions"]]
    cluster.kube.patch_status("Pod", namespace, name, {"containerStatuses": statuses, "conditions": not_ready})

    obj, message = argo_says(cluster, namespace, "dies", argocd, "Degraded", timeout=60)
    degraded = condition(obj, "Degraded")
    assert degraded["reason"] == "EngineFailed", degraded
    assert name in degraded["message"] and reason in degraded["message"], degraded["message"]
    assert "EngineFailed" in message and reason in message, message
    assert ("Warning", "EngineFailed") in events(cluster, namespace, "dies")
    row = kubectl_row(cluster, namespace, "dies")
    assert (row["STATUS"], row["REASON"]) == ("Degraded", "EngineFailed"), row

    # The restarted container loads the engine and is ready: the old termination message no longer counts.
    serving.update(ready=True, started=True)
    cluster.kube.patch_status("Pod", namespace, name, {"containerStatuses": statuses,
                                                       "conditions": healthy["conditions"]})
    obj, _ = argo_says(cluster, namespace, "dies", argocd, "Healthy", timeout=60)
    assert condition(obj, "Degraded")["status"] == "False"


def test_deleting_a_backend_mid_download_cancels_the_download_and_cleans_up(cluster, operator, namespace):
    source = no_storage_class_source("s3://models/abandoned")
    apply_manifest(cluster, backend_manifest("abandons", namespace,
                                             model={"preset": "llama-3.1-8b", "source": source}))
    job_name = mc.download_job_name(ModelSource.model_validate(source))
    pods = f"job-name={job_name}"
    wait_for(lambda: cluster.kube.list("Pod", namespace, label_selector=pods), timeout=60, what="the download pod")
    obj = wait_for(lambda: (o := current(cluster, namespace, "abandons"))
                   and (condition(o, "ModelReady") or {}).get("reason") == "NoStorageClass" and o,
                   timeout=60, interval=1, what="ModelReady NoStorageClass")
    assert obj["status"]["phase"] == "Progressing", " ".join(f"{c['type']}={c['status']}/{c['reason']}" for c in obj["status"]["conditions"])

    cluster.kubectl("delete", "llmb", "abandons", "-n", namespace, "--wait=true")
    # Within one sync period: the download is stopped (its Job suspended, its pod deleted) ...
    wait_for(lambda: not cluster.kube.list("Pod", namespace, label_selector=pods), timeout=30,
             what="the download pod gone")
    # ... and the stale download Job is deleted. Its claim never bound (no StorageClass), so nothing was written and no
    # cleanup Job is started: it would wait, Pending, for a volume as long as the claim (issue 49).
    wait_for(lambda: cluster.kube.get("Job", namespace, job_name) is None, timeout=60, what="the download Job gone")
    cleanups = [j for j in cluster.kube.list("Job", namespace)
                if j["metadata"]["labels"].get("app.kubernetes.io/component") == mc.CLEANUP_COMPONENT]
    assert cleanups == [], [j["metadata"]["name"] for j in cleanups]
    assert (cluster.kube.get("PersistentVolumeClaim", namespace, NO_VOLUME) or {}).get("status", {}).get("phase") == "Pending"


def scheduled_message(cluster, namespace: str, name: str, selector: str | None = None) -> str | None:
    for pod in cluster.kube.list("Pod", namespace, label_selector=selector or f"llmbackend.dev/backend={name}"):
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return c.get("message")
    return None


def test_the_quick_start_without_a_default_storage_class_then_a_pvc_source_names_each_specs_own_problem(
        cluster, operator, namespace):
    """The README's hf:// sample where no StorageClass provisions the cache claim: the real scheduler's message
    (the fixture of tests/unit/scheduler_messages.py for this version) is NoStorageClass naming the cache's field,
    not ClaimNotFound; after the source becomes a pvc whose claim does not exist, status names that claim."""
    import re

    from llmbackend.kubectl_plugin import summary

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
    import scheduler_messages

    hf = {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "cache": {"claimName": NO_VOLUME, "size": "20Gi"},
          "secretRef": {"name": "hf-tokn"}}  # misspelt: nothing can tell before the download pod starts
    apply_manifest(cluster, backend_manifest("quick", namespace, model={"preset": "llama-3.1-8b", "source": hf}))

    def progressing(reason: str):
        def check():
            obj = current(cluster, namespace, "quick")
            got = condition(obj, "Progressing") or {}
            return obj if got.get("status") == "True" and got.get("reason") == reason else None
        return check

    obj = wait_for(progressing("NoStorageClass"), timeout=90, interval=1, what="Progressing NoStorageClass")
    message = condition(obj, "Progressing")["message"]
    assert "spec.model.source.cache.storageClassName" in message and "pvc.claimName" not in message, message
    assert "Secret hf-tokn (spec.model.source.secretRef)" in message, message
    row = kubectl_row(cluster, namespace, "quick")
    assert (row["READY"], row["STATUS"], row["REASON"]) == ("0/1", "Progressing", "NoStorageClass"), row
    assert summary(obj)["READY"] == row["READY"], "kubectl llmb get and kubectl get llmb agree"

    def numbers_out(text: str) -> str:
        return re.sub(r"\b\d+\b", "N", text)
    # the download pod's: the serving pods come after the backend's own download (docs/security.md)
    live = scheduled_message(cluster, namespace, "quick", selector=f"llmbackend.dev/model-cache={NO_VOLUME}")
    version = cluster.kubectl("version", "-o", "json").stdout
    minor = re.search(r'"serverVersion":\s*{[^}]*"minor":\s*"(\d+)', version).group(1)
    assert numbers_out(live) == numbers_out(scheduler_messages.UNBOUND_IMMEDIATE[f"1.{minor}"]), live

    pvc = {"pvc": {"claimName": "llm-models", "path": "llama"}, "uri": None, "cache": None, "secretRef": None}
    cluster.kubectl("patch", "llmb", "quick", "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"model": {"source": pvc}}}))
    obj = wait_for(progressing("ClaimNotFound"), timeout=90, interval=1, what="Progressing ClaimNotFound")
    message = condition(obj, "Progressing")["message"]
    assert "llm-models" in message and "spec.model.source.pvc.claimName" in message, message
    assert condition(obj, "ModelReady") is None and obj["status"].get("model") is None, \
        "nothing is downloaded for a pvc source: the hf:// download's ModelReady and status.model go"
    new_pods = [p["metadata"]["name"] for p in cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend=quick")
                if "llm-models" in json.dumps(p["spec"].get("volumes"))]
    assert any(f"pod {name}:" in message for name in new_pods), (message, new_pods)
    cluster.kubectl("delete", "llmb", "quick", "-n", namespace, "--wait=true", check=False)
