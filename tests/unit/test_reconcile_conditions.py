"""The Reconciler on an in-memory API server: every pass, including those that stop early, writes the four
conditions for the current generation, and the shipped Argo CD check (in Lua 5.1) reads the result as
Degraded for what cannot be served and Healthy (saying so) for a backend at zero on purpose."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from devcluster.cli import topology_nodes
from llmbackend.api import conditions as cond
from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller.fakekube import FakeKube
from llmbackend.controller.kube import ApiError
from llmbackend.controller.modelcache import downloader_image
from llmbackend.controller.reconcile import Reconciler, SharedState
from llmbackend.render import modelcache as mc
from llmbackend.render.servingpod import SERVING_UID

lupa = pytest.importorskip("lupa", reason="pip install lupa (in the test extra)")

HEALTH_LUA = Path(__file__).resolve().parents[2] / "manifests/argocd/llmbackend.dev/LLMBackend/health.lua"
MODEL = {"preset": "llama-3.1-8b", "source": {"uri": "s3://models/llama-3.1-8b"}}
HUGE = {"architecture": {"numLayers": 200, "hiddenSize": 32768, "numAttentionHeads": 256, "numKeyValueHeads": 16,
                         "headDim": 128, "vocabSize": 256000, "parameterCount": 9_000_000_000_000},
        "source": {"uri": "s3://m/x"}}


def backend(spec: dict[str, Any], generation: int = 2, status: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": generation,
                         "resourceVersion": "7"},
            "spec": spec, "status": status or {}}


def finished_download(kube: FakeKube, spec: dict[str, Any]) -> None:
    """The backend's own download Job, Complete (as kwok leaves it): its pods are rendered only after it (issue 42,
    attack 3). Specs the model rejects, or without a URI source, get none."""
    try:
        source = LLMBackendSpec.model_validate(spec).model.source
    except ValidationError:
        return
    if source is None or source.uri is None:
        return
    job = mc.render_download_job("serving", source, downloader_image(), SERVING_UID)
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    kube.objects[("Job", "serving", job["metadata"]["name"])] = job


def reconcile(spec: dict[str, Any], kube: FakeKube | None = None, status: dict | None = None) -> tuple[dict, FakeKube]:
    kube = kube or FakeKube()
    finished_download(kube, spec)
    state = SharedState()
    for node in topology_nodes("dgx-h100-x4"):
        state.inventory.upsert(node)
    kube.objects[("LLMBackend", "serving", "llama")] = backend(spec, status=status)
    Reconciler(kube, state).reconcile(("serving", "llama"))
    return kube.objects[("LLMBackend", "serving", "llama")], kube


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def argocd_health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(copy.deepcopy(obj), recursive=True)
    hs = lua.execute(HEALTH_LUA.read_text())
    return hs["status"], hs["message"]


def assert_four_current(obj: dict[str, Any]) -> None:
    written = obj["status"]["conditions"]
    types = [c["type"] for c in written]
    # The four, then only what this pass itself wrote (ModelReady for a URI source).
    assert types[:4] == list(cond.TYPES) and set(types[4:]) <= {"ModelReady"}, types
    assert {c["observedGeneration"] for c in written} == {obj["metadata"]["generation"]}
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert all(c["reason"] != "NotEvaluated" for c in written), written


# An earlier pass served generation 1 well; the user then edits the spec (generation 2).
SERVED_BEFORE = {"observedGeneration": 1, "conditions": [
    {"type": t, "status": s, "reason": r, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
     "observedGeneration": 1}
    for t, s, r in (("Planned", "True", "Fits"), ("Available", "True", "ReplicasReady"),
                    ("Progressing", "False", "RolloutComplete"), ("Degraded", "False", "AsExpected"),
                    ("Ready", "True", "TypeOfAnOlderOperator"))]}


@pytest.mark.parametrize("spec, planned, degraded_reason", [
    ({"model": {"preset": "no-such-model", "source": {"uri": "s3://m/x"}}}, "False", cond.UNKNOWN_PRESET),
    ({"model": MODEL, "replicas": -1}, "False", cond.INVALID_SPEC),
    ({"model": HUGE}, "False", "InsufficientGPUMemory"),
    ({"model": {**MODEL, "preset": "llama-3.1-405b"}}, "True", cond.LEADER_WORKER_SET_NOT_INSTALLED),
], ids=["unknown-preset", "invalid-spec", "no-gpu-set-holds-it", "multi-node-without-lws"])
def test_a_pass_that_stops_early_writes_all_four_conditions_and_is_degraded(spec, planned, degraded_reason):
    obj, kube = reconcile(spec, status=copy.deepcopy(SERVED_BEFORE))
    assert_four_current(obj)
    got = conditions(obj)
    assert got["Planned"][0] == planned
    assert got["Degraded"] == ("True", degraded_reason)
    assert got["Available"][0] == "False" and got["Progressing"][0] == "False"
    assert not any(k == "Deployment" for k, _, _ in kube.objects)
    status, message = argocd_health(obj)
    assert status == "Degraded" and message.startswith(degraded_reason), message


@pytest.mark.parametrize("failing_kind, words", [
    ("Deployment", "applying Deployment llama"),  # act: a child's apply
    ("PersistentVolumeClaim", "exceeded quota"),  # observe: the model cache step, before any decision
])
def test_an_api_failure_is_a_condition_written_before_the_retry(failing_kind, words):
    quota = ApiError(403, "Forbidden", f'{failing_kind.lower()}s "llama" is forbidden: exceeded quota: gpus')
    kube = FakeKube(fail=quota, fail_kinds=(failing_kind,))
    with pytest.raises(ApiError):  # re-raised: the work queue retries with backoff
        reconcile({"model": MODEL}, kube=kube, status=copy.deepcopy(SERVED_BEFORE))
    obj = kube.objects[("LLMBackend", "serving", "llama")]
    assert_four_current(obj)
    degraded = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", cond.API_REQUEST_FAILED)
    assert words in degraded["message"] and "exceeded quota" in degraded["message"]
    assert argocd_health(obj)[0] == "Degraded"


@pytest.mark.parametrize("spec, reason, health", [
    ({"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 2}}, cond.SCALED_TO_ZERO, "Healthy"),
    ({"model": MODEL, "replicas": 0}, cond.ZERO_REPLICAS, "Healthy"),
], ids=["autoscaled-idle", "replicas-0"])
def test_zero_replicas_on_purpose_is_not_degraded(spec, reason, health):
    obj, kube = reconcile(spec, status=copy.deepcopy(SERVED_BEFORE))
    assert_four_current(obj)
    assert conditions(obj)["Available"] == ("True", reason)
    assert conditions(obj)["Degraded"] == ("False", cond.AS_EXPECTED)
    assert kube.objects[("Deployment", "serving", "llama")]["spec"]["replicas"] == 0
    status, message = argocd_health(obj)
    assert status == health and message.startswith(reason)


def test_a_served_backend_is_progressing_until_its_pods_are_ready():
    obj, _ = reconcile({"model": MODEL}, status=copy.deepcopy(SERVED_BEFORE))
    assert_four_current(obj)
    assert conditions(obj)["Progressing"] == ("True", cond.ROLLING_OUT)
    assert argocd_health(obj)[0] == "Progressing"


HPA = {"enabled": True, "mode": "hpa", "minReplicas": 1, "maxReplicas": 3}
ALL_APIS = {"leaderworkerset.x-k8s.io/v1/leaderworkersets", "monitoring.coreos.com/v1/prometheusrules"}


@pytest.mark.parametrize("kind, name, spec", [
    ("ConfigMap", "llama-model-repo", {"model": MODEL}),
    ("Deployment", "llama", {"model": MODEL}),
    ("Service", "llama", {"model": MODEL}),
    ("PodDisruptionBudget", "llama", {"model": MODEL, "replicas": 2}),
    ("HorizontalPodAutoscaler", "llama", {"model": MODEL, "autoscaling": HPA}),
    ("PrometheusRule", "llama", {"model": MODEL, "autoscaling": HPA}),
    ("LeaderWorkerSet", "llama", {"model": {**MODEL, "preset": "llama-3.1-405b"}}),
])
def test_an_object_the_backend_does_not_control_is_never_adopted(kind, name, spec):
    kube = FakeKube(apis=ALL_APIS)
    theirs = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "serving", "uid": "theirs",
                                                             "labels": {"team": "search"}}, "spec": {"x": 1}}
    kube.objects[(kind, "serving", name)] = copy.deepcopy(theirs)
    obj, kube = reconcile(spec, kube=kube)
    assert kube.objects[(kind, "serving", name)] == theirs, "nothing of it changes"
    assert_four_current(obj)
    degraded = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", cond.RESOURCE_EXISTS)
    assert f"{kind} serving/{name}" in degraded["message"]
    # Children are created without a read first, the workload last: a taken name stops the pass before anything
    # runs on GPUs. What was created before it is the backend's own (the garbage collector takes it with the backend).
    workload = "LeaderWorkerSet" if kind == "LeaderWorkerSet" else "Deployment"
    ours = [o for (k, _, n), o in kube.objects.items() if k not in ("LLMBackend", "PersistentVolumeClaim", "Job")
            and o is not kube.objects[(kind, "serving", name)]]
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"] for o in ours)
    assert not any(o["kind"] == workload for o in ours), "no workload of the backend runs"
    assert argocd_health(obj)[0] == "Degraded"


def test_an_object_owned_but_not_controlled_by_the_backend_is_not_adopted_either():
    kube = FakeKube()
    kube.objects[("Service", "serving", "llama")] = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "llama", "namespace": "serving", "uid": "s",
                     "ownerReferences": [{"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "name": "llama",
                                          "uid": "u-1"}]}}
    obj, _ = reconcile({"model": MODEL}, kube=kube)
    assert conditions(obj)["Degraded"] == ("True", cond.RESOURCE_EXISTS)


def test_an_adapter_named_as_the_backend_is_not_served_when_the_base_is_served_under_that_name():
    """Issue 46 F4, through the Reconciler: no spec.model.name or preset, so the base model is served as the backend's
    name (llama); an adapter named llama (stored before the CRD refused it) is Incompatible with its reason."""
    spec = {"model": {"architecture": {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32,
                                       "numKeyValueHeads": 8, "headDim": 128, "vocabSize": 128256,
                                       "parameterCount": 8_030_000_000}, "source": {"uri": "s3://m/tuned"}},
            "adapters": [{"name": "llama", "source": {"uri": "s3://m/llama-lora"}}]}
    obj, kube = reconcile(spec)
    (entry,) = obj["status"]["adapters"]
    assert (entry["phase"], entry["reason"]) == ("Incompatible", "AdapterNameIsBaseModel"), entry
    assert obj["status"]["modelName"] == "llama"
    assert not [o for o in kube.created if o["kind"] == "Job" and "llama-lora" in str(o)]  # nothing downloaded
