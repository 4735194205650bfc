"""The progress-vs-failure rule (api/conditions.py, controller/conditions.py) through decide(): waiting on work in
flight is Progressing with Normal events until spec.serving.progressDeadlineSeconds; past it, or when a person
must act, Degraded with a Warning that names the fix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_decide import MODEL, NODES, backend, conditions, first_pass, served

from llmbackend.api import conditions as cond
from llmbackend.api.v1alpha1 import SOURCE_REQUIRED_MESSAGE, LLMBackendSpec
from llmbackend.controller.conditions import summarize
from llmbackend.controller.decide import Observed, condition_events, decide, finish_status
from llmbackend.controller.modelcache import ModelCacheResult
from llmbackend.render.names import BACKEND_LABEL

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
STAMP = "2026-12-01T10:00:00Z"
URI_SPEC = {"model": {"source": {"uri": "hf://acme/tiny"}}, "serving": {"progressDeadlineSeconds": 120}}


def pending_pod(message: str, since: str = STAMP) -> dict[str, Any]:
    return {"metadata": {"name": "llama-abc", "labels": {BACKEND_LABEL: "llama", "app.kubernetes.io/component": "server"},
                         "creationTimestamp": since},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                 "lastTransitionTime": since}]}}


def pass_at(spec: dict[str, Any], now: datetime, free_gpus: dict | None = None, **observed: Any):
    live = served(first_pass(spec), ready=0)
    free = free_gpus if free_gpus is not None else {node.name: 0 for node in NODES}
    return decide(Observed(backend(spec), NODES, children=live, now=now, free_gpus=free, **observed))


GPUS_BUSY = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_pods_waiting_for_nodes_are_progressing_until_the_deadline_then_degraded():
    spec = {"model": MODEL, "serving": {"progressDeadlineSeconds": 300}}
    within = pass_at(spec, T0 + timedelta(seconds=200), pods=[pending_pod(GPUS_BUSY)])
    got = conditions(within)
    assert got["Progressing"] == ("True", cond.WAITING_FOR_NODES) and got["Degraded"][0] == "False"
    assert "2026-12-01T10:05:00Z" in within.conditions.get("Progressing")["message"]
    assert within.requeue_after is not None and within.requeue_after <= 101, "looked at again by the deadline"
    assert all(t == "Normal" for t, _, _ in condition_events(within.conditions))
    assert summarize(within.conditions.to_list()).phase == "Progressing"

    past = pass_at(spec, T0 + timedelta(seconds=301), pods=[pending_pod(GPUS_BUSY)])
    degraded = past.conditions.get("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", cond.UNSCHEDULABLE)
    assert "Insufficient nvidia.com/gpu" in degraded["message"] and "progressDeadlineSeconds" in degraded["message"]
    assert ("Warning", cond.UNSCHEDULABLE) in [(t, r) for t, r, _ in condition_events(past.conditions)]


def test_the_default_deadline_is_a_deployments():
    assert LLMBackendSpec.model_validate({"model": MODEL}).serving.progress_deadline_seconds == 600
    decision = pass_at({"model": MODEL}, T0 + timedelta(seconds=25), pods=[pending_pod(GPUS_BUSY)])
    assert conditions(decision)["Degraded"][0] == "False", "a node scale-up takes minutes, not 25 s"


def test_a_missing_claim_is_named_as_such_not_unschedulable():
    message = 'persistentvolumeclaim "models" not found'
    within = pass_at({"model": MODEL}, T0 + timedelta(seconds=5), pods=[pending_pod(message)])
    assert conditions(within)["Progressing"] == ("True", cond.SERVING_CLAIM_NOT_FOUND), "it may be created a moment later"
    decision = pass_at({"model": MODEL}, T0 + timedelta(seconds=601), pods=[pending_pod(message)])
    degraded = decision.conditions.get("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", cond.SERVING_CLAIM_NOT_FOUND)
    assert "create PersistentVolumeClaim models" in degraded["message"] and "spec.scheduling" not in degraded["message"]


def test_an_unbound_claim_waits_then_names_the_storage_fix():
    message = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    within = pass_at({"model": MODEL}, T0 + timedelta(seconds=5), pods=[pending_pod(message)])
    assert conditions(within)["Progressing"] == ("True", cond.SERVING_CLAIM_NOT_BOUND)
    past = pass_at({"model": MODEL}, T0 + timedelta(seconds=601), pods=[pending_pod(message)])
    degraded = past.conditions.get("Degraded")
    assert degraded["reason"] == cond.SERVING_CLAIM_NOT_BOUND and "StorageClass" in degraded["message"]
    assert "..." not in degraded["message"] and ".;" not in degraded["message"]


def downloading(bytes_done: int | None, spec: dict[str, Any] = URI_SPEC) -> ModelCacheResult:
    return ModelCacheResult(LLMBackendSpec.model_validate(spec), False, "Downloading", "the download Job is running",
                            {"phase": "Downloading", "source": "hf://acme/tiny", "bytesDone": bytes_done,
                             "bytesTotal": 1800})


def test_a_download_is_progressing_with_normal_events_and_progressing_in_argo_cd_terms():
    decision = decide(Observed(backend(URI_SPEC), NODES, model_cache=downloading(700), now=T0))
    got = conditions(decision)
    assert got["Planned"] == ("False", "WaitingForCheckpoint") and got["Progressing"][0] == "True"
    assert got["Degraded"] == ("False", cond.AS_EXPECTED)
    assert [t for t, _, _ in condition_events(decision.conditions)] and all(
        t == "Normal" for t, _, _ in condition_events(decision.conditions))
    status = finish_status(decision)
    assert status["model"]["lastProgressTime"] == STAMP
    assert summarize(status["conditions"]).phase == "Progressing"
    assert all(c["message"] for c in status["conditions"]), "no empty messages"


def test_a_download_without_new_bytes_past_the_deadline_is_degraded_as_stalled():
    before = {"model": {"phase": "Downloading", "source": "hf://acme/tiny", "bytesDone": 700, "lastProgressTime": STAMP}}
    moving = decide(Observed(backend(URI_SPEC, before), NODES, model_cache=downloading(900), now=T0 + timedelta(seconds=500)))
    assert conditions(moving)["Degraded"][0] == "False"
    assert moving.status.model.last_progress_time == "2026-12-01T10:08:20Z", "new bytes restart the clock"

    still = decide(Observed(backend(URI_SPEC, before), NODES, model_cache=downloading(700), now=T0 + timedelta(seconds=60)))
    assert conditions(still)["Degraded"][0] == "False" and still.status.model.last_progress_time == STAMP
    stalled = decide(Observed(backend(URI_SPEC, before), NODES, model_cache=downloading(700), now=T0 + timedelta(seconds=121)))
    got = conditions(stalled)
    assert got["Degraded"] == ("True", cond.DOWNLOAD_STALLED) and got["ModelReady"] == ("False", cond.DOWNLOAD_STALLED)
    assert "700 of 1800 bytes" in stalled.conditions.get("Degraded")["message"]


@pytest.mark.parametrize("since, seconds, degraded", [(STAMP, 60, False), (STAMP, 121, True), (None, 0, True)])
def test_a_stuck_fetch_pod_names_its_cause_and_turns_degraded_at_the_deadline(since, seconds, degraded):
    stuck = ModelCacheResult(LLMBackendSpec.model_validate(URI_SPEC), False, cond.NO_STORAGE_CLASS,
                             "claim llmbackend-model-cache has no StorageClass; set source.cache.storageClassName",
                             {"phase": "Downloading", "source": "hf://acme/tiny"}, stuck=True, stuck_since=since)
    decision = decide(Observed(backend(URI_SPEC), NODES, model_cache=stuck, now=T0 + timedelta(seconds=seconds)))
    got = conditions(decision)
    assert got["ModelReady"] == ("False", cond.NO_STORAGE_CLASS)
    assert got["Degraded"][0] == ("True" if degraded else "False")
    if degraded:
        assert got["Degraded"][1] == cond.NO_STORAGE_CLASS and got["Planned"] == ("False", cond.NO_STORAGE_CLASS)
        assert decision.requeue_after is not None, "a claim bound later sends no event: looked at again"
    else:
        assert got["Progressing"] == ("True", cond.NO_STORAGE_CLASS)
        assert summarize(decision.conditions.to_list()).phase == "Progressing"


def test_a_backend_without_a_source_is_not_served_and_says_how_to_give_one():
    decision = decide(Observed(backend({"model": {"preset": "llama-3.1-8b"}}), NODES))
    got = conditions(decision)
    assert got["Planned"] == ("False", cond.SOURCE_REQUIRED) and got["Degraded"] == ("True", cond.SOURCE_REQUIRED)
    assert decision.apply == [] and decision.look_up == []
    assert "source.pvc" in decision.conditions.get("Degraded")["message"]
    assert "source.uri" in decision.conditions.get("Degraded")["message"]


def test_the_crd_requires_a_source():
    from llmbackend.api import crdgen

    model = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["model"]
    assert {"rule": "has(self.source)", "message": SOURCE_REQUIRED_MESSAGE} in model["x-kubernetes-validations"]


def test_the_status_columns_say_whether_it_serves_and_why_not():
    spec = {"model": MODEL, "replicas": 2}
    rolling = finish_status(pass_at(spec, T0, pods=[pending_pod(GPUS_BUSY)]))
    assert (rolling["ready"], rolling["phase"], rolling["reason"]) == ("0/2", "Progressing", cond.WAITING_FOR_NODES)
    assert rolling["parallelism"] == "2x1"
    stuck = finish_status(pass_at(spec, T0 + timedelta(seconds=601), pods=[pending_pod(GPUS_BUSY)]))
    assert (stuck["phase"], stuck["reason"]) == ("Degraded", cond.UNSCHEDULABLE)
    missing = finish_status(decide(Observed(backend({"model": {"preset": "nope", "source": MODEL["source"]}}), NODES)))
    assert (missing["phase"], missing["reason"]) == ("Degraded", cond.UNKNOWN_PRESET)


def test_condition_messages_are_one_line_without_doubled_punctuation():
    huge = {"architecture": {"numLayers": 200, "hiddenSize": 32768, "numAttentionHeads": 256, "numKeyValueHeads": 16,
                             "headDim": 128, "vocabSize": 256000, "parameterCount": 9_000_000_000_000},
            "source": MODEL["source"]}
    for decision in (decide(Observed(backend({"model": huge}), NODES)), first_pass({"model": MODEL})):
        for c in finish_status(decision)["conditions"]:
            assert c["message"] and "\n" not in c["message"], c
            assert not any(p in c["message"] for p in (".;", ";;", "..", " ;", ";.")), c
    planned = first_pass({"model": MODEL}).conditions.get("Planned")["message"]
    assert planned.startswith("Plan: TP2 x PP1") and "status.plan.explanation" in planned


# ---- plans and free capacity ----

BIG = {"preset": "llama-3.1-70b", "source": MODEL["source"]}


def six_free_per_node() -> dict[str, int]:
    return {node.name: 6 for node in NODES}


def pending_on_busy_nodes(placement: str | None, free: dict[str, int] | None):
    spec: dict[str, Any] = {"model": BIG}
    if placement:
        spec["planning"] = {"placement": placement}
    first = first_pass(spec)
    assert first.status.plan.tensor_parallel == 8, "the best plan for the hardware: TP8 on one DGX node"
    live = served(first, ready=0)
    obj = backend(spec, finish_status(first))
    return decide(Observed(obj, NODES, children=live, pods=[pending_pod(GPUS_BUSY)], now=T0, free_gpus=free))


def test_pods_waiting_for_gpus_ask_what_is_free_first():
    assert pending_on_busy_nodes(None, None).look_up_free_gpus


def test_status_says_when_a_runner_up_could_run_on_the_gpus_free_now():
    decision = pending_on_busy_nodes(None, six_free_per_node())
    planned = decision.conditions.get("Planned")
    assert (planned["status"], planned["reason"]) == ("True", cond.RUNNER_UP_RUNNABLE)
    assert "TP8 x PP1" in planned["message"] and "TP4 x PP1" in planned["message"] and "preferRunnable" in planned["message"]
    assert decision.status.plan.tensor_parallel == 8, "the default keeps the best plan"
    assert "TP4 x PP1" in decision.conditions.get("Progressing")["message"]
    assert ("Normal", cond.RUNNER_UP_RUNNABLE) in [(t, r) for t, r, _ in condition_events(decision.conditions)]


def test_prefer_runnable_takes_the_runner_up():
    decision = pending_on_busy_nodes("preferRunnable", six_free_per_node())
    assert decision.status.plan.tensor_parallel == 4
    assert decision.conditions.get("Planned")["reason"] == cond.RUNNABLE_PLAN_CHOSEN
    (deployment,) = [c for c in decision.apply if c["kind"] == "Deployment"]
    limits = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "4", "the workload is rendered for the runner-up in the same pass"


def test_no_advice_when_the_gpus_are_free_or_nothing_smaller_fits():
    all_free = pending_on_busy_nodes("preferRunnable", {node.name: 8 for node in NODES})
    assert all_free.status.plan.tensor_parallel == 8 and all_free.conditions.get("Planned")["reason"] == cond.FITS
    none_free = pending_on_busy_nodes("preferRunnable", {node.name: 1 for node in NODES})
    assert none_free.status.plan.tensor_parallel == 8 and none_free.conditions.get("Planned")["reason"] == cond.FITS


def test_gpus_free_counts_what_scheduled_pods_hold():
    from llmbackend.controller.decide import gpus_free

    def pod(node, gpus, phase="Running", init=0):
        spec = {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
        if init:
            spec["initContainers"] = [{"resources": {"requests": {"nvidia.com/gpu": str(init)}}}]
        return {"spec": spec, "status": {"phase": phase}}
    name = NODES[0].name
    free = gpus_free([pod(name, 2), pod(name, 1, init=3), pod(name, 8, phase="Succeeded"), pod(None, 8)], NODES)
    assert free[name] == 3 and free[NODES[1].name] == 8


def test_a_multi_node_group_waiting_for_nodes_is_progressing_until_the_deadline_then_degraded():
    """A worker of a LeaderWorkerSet group that the scheduler cannot place yet (nodes being added) is a wait like a
    single-node pod's; a crash-looping worker needs a person at once."""
    from llmbackend.render.multinode import GROUP_INDEX_LABEL

    spec = {"model": {**MODEL, "preset": "llama-3.1-405b"}, "serving": {"progressDeadlineSeconds": 300}}
    apis = frozenset({"LeaderWorkerSet"})
    live = served(first_pass(spec, apis=apis), ready=0)

    def group(worker_status: dict[str, Any]) -> list[dict[str, Any]]:
        leader = {"metadata": {"name": "llama-0", "labels": {BACKEND_LABEL: "llama", GROUP_INDEX_LABEL: "0",
                                                            "app.kubernetes.io/component": "server"}},
                  "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}
        worker = {"metadata": {"name": "llama-0-1", "labels": {BACKEND_LABEL: "llama", GROUP_INDEX_LABEL: "0"},
                               "creationTimestamp": STAMP}, "status": worker_status}
        return [leader, worker]

    waiting = group({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable", "message": GPUS_BUSY,
                                                         "lastTransitionTime": STAMP}]})

    def at(seconds: int, pods: list[dict[str, Any]]):
        return decide(Observed(backend(spec), NODES, children=live, apis=apis, pods=pods,
                               now=T0 + timedelta(seconds=seconds), free_gpus={n.name: 0 for n in NODES}))

    within = at(200, waiting)
    got = conditions(within)
    assert got["Progressing"] == ("True", cond.WAITING_FOR_NODES) and got["Degraded"][0] == "False", got
    assert "llama-0-1" in within.conditions.get("Progressing")["message"]
    assert summarize(within.conditions.to_list()).phase == "Progressing"

    past = at(301, waiting)
    degraded = past.conditions.get("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PartialGroup")
    assert "progressDeadlineSeconds" in degraded["message"]

    crashing = at(10, group({"phase": "Running", "containerStatuses": [
        {"name": "triton", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]}))
    assert (crashing.conditions.get("Degraded")["status"], crashing.conditions.get("Degraded")["reason"]) == \
        ("True", "PartialGroup")
