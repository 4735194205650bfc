"""decide(): one reconcile pass as a pure function of what was observed, table-driven, no client at all."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from devcluster.cli import topology_nodes
from llmbackend.api import conditions as cond
from llmbackend.api.v1alpha1 import LLMBackendSpec, LLMBackendStatus
from llmbackend.controller.decide import Decision, Observed, ScaleDecision, condition_events, decide, finish_status
from llmbackend.controller.modelcache import ModelCacheResult
from llmbackend.planning.inventory import Inventory
from llmbackend.render.names import BACKEND_LABEL, BackendRef, launcher_account_name, serving_account_name


def _nodes() -> list:
    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    return inventory.nodes()


NODES = _nodes()
MODEL = {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "llama"}}}


def backend(spec: dict[str, Any], status: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
            "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 3, "resourceVersion": "9"},
            "spec": spec, "status": status or {}}


def conditions(decision: Decision) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in decision.conditions.to_list()}


def first_pass(spec: dict[str, Any], **observed: Any) -> Decision:
    """A backend with no children yet: the API server said none exists under any wanted name."""
    asked = decide(Observed(backend(spec), NODES, **observed))
    absent = {key: None for key in asked.look_up}
    return decide(Observed(backend(spec), NODES, children=absent, **observed))


def settle(spec: dict[str, Any], live: dict, **observed: Any) -> Decision:
    """decide(), then again with what it asked for answered from `live` (as reconcile does with the API server)."""
    decision = decide(Observed(backend(spec), NODES, children=live, **observed))
    if decision.look_up:
        known = {**{key: None for key in decision.look_up}, **live}
        decision = decide(Observed(backend(spec), NODES, children=known, **observed))
    return decision


def served(decision: Decision, ready: int) -> dict[tuple[str, str], dict[str, Any]]:
    """The children as the API server holds them after `decision` was applied, the workload with `ready` pods."""
    live = {}
    for child in copy.deepcopy(decision.apply):
        child["metadata"].update(uid=f"uid-{child['kind']}", generation=1)
        if child["kind"] == "Deployment" and child["metadata"]["name"] == "llama":
            want = child["spec"]["replicas"]
            child["status"] = {"observedGeneration": 1, "replicas": want, "updatedReplicas": want, "readyReplicas": ready}
        live[(child["kind"], child["metadata"]["name"])] = child
    return live


def test_a_new_backend_asks_for_its_children_then_creates_them():
    asked = decide(Observed(backend({"model": MODEL}), NODES))
    assert ("Deployment", "llama") in asked.look_up and ("Service", "llama") in asked.look_up
    assert asked.apply == [], "nothing is applied before the API server said what exists"
    created = first_pass({"model": MODEL})
    assert created.look_up == []
    assert {c["kind"] for c in created.apply} >= {"ConfigMap", "Deployment", "Service"}
    assert conditions(created)["Planned"] == ("True", cond.FITS)
    assert conditions(created)["Progressing"] == ("True", cond.ROLLING_OUT)
    assert created.requeue_after is not None, "a rollout is watched"


def test_every_child_carries_the_backend_label_that_observe_lists_by():
    spec = {"model": MODEL, "replicas": 2, "autoscaling": {"enabled": True, "mode": "hpa", "maxReplicas": 4}}
    decision = first_pass(spec, apis=frozenset({"PrometheusRule", "InferencePool"}))
    assert len(decision.apply) >= 5
    for child in decision.apply:
        assert child["metadata"]["labels"][BACKEND_LABEL] == "llama", child["kind"]


@pytest.mark.parametrize("ready, available, progressing, requeue", [
    (1, ("True", cond.REPLICAS_READY), ("False", cond.ROLLOUT_COMPLETE), None),
    (0, ("False", cond.REPLICAS_NOT_READY), ("True", cond.ROLLING_OUT), 30.0),
])
def test_a_steady_backend_applies_nothing(ready, available, progressing, requeue):
    live = served(first_pass({"model": MODEL}), ready)
    again = decide(Observed(backend({"model": MODEL}), NODES, children=live))
    assert (again.apply, again.prune, again.look_up, again.look_up_hpas) == ([], [], [], False)
    got = conditions(again)
    assert (got["Available"], got["Progressing"], got["Degraded"][0]) == (available, progressing, "False")
    assert again.requeue_after == requeue


def test_a_changed_spec_is_rolling_out_even_if_the_old_workload_was_ready():
    live = served(first_pass({"model": MODEL}), ready=1)
    changed = decide(Observed(backend({"model": MODEL, "engine": {"maxBatchSize": 32}}), NODES, children=live))
    assert "Deployment" in {c["kind"] for c in changed.apply}
    assert conditions(changed)["Progressing"] == ("True", cond.ROLLING_OUT)
    assert conditions(changed)["Available"][0] == "False"


def test_an_owned_child_no_longer_desired_is_pruned_and_a_foreign_one_is_not():
    live = served(first_pass({"model": MODEL, "replicas": 2}), ready=2)
    assert ("PodDisruptionBudget", "llama") in live
    live[("ConfigMap", "someone-elses")] = {"kind": "ConfigMap", "metadata": {"name": "someone-elses", "uid": "x",
                                                                              "labels": {BACKEND_LABEL: "llama"}}}
    scaled_in = decide(Observed(backend({"model": MODEL, "replicas": 1}), NODES, children=live, hpas=[]))
    assert scaled_in.prune == [("PodDisruptionBudget", "llama", "uid-PodDisruptionBudget")]


def _legacy(kind: str, name: str, owner_uid: str = "u-1") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "uid": f"old-{kind}-{name}", "labels": {BACKEND_LABEL: "llama"},
                                       "ownerReferences": [{"kind": "LLMBackend", "name": "llama", "uid": owner_uid,
                                                            "controller": True}]}}


def test_the_accounts_and_launcher_binding_named_before_the_uid_tag_are_pruned_binding_first():
    """Issue 42: the accounts were <backend>-serving and <backend>-launcher (and the launcher's before that,
    <backend>); they carry a tag of the backend's uid now. The old ones, owned by the backend, go on upgrade, the
    RoleBinding of the launcher role before the accounts (the prune list is in that order): no binding is left naming
    an account that no longer exists. Objects of those names the backend does not control are left alone."""
    multi_node = {"model": {**MODEL, "preset": "llama-3.1-405b"}}
    apis = frozenset({"LeaderWorkerSet"})
    live = served(first_pass(multi_node, apis=apis), ready=1)
    ref = BackendRef("llama", "serving", "u-1")
    new = {("ServiceAccount", launcher_account_name(ref)), ("RoleBinding", launcher_account_name(ref)),
           ("ServiceAccount", serving_account_name(ref))}
    assert new <= set(live)
    old = [("RoleBinding", "llama-launcher"), ("ServiceAccount", "llama"), ("ServiceAccount", "llama-launcher"),
           ("ServiceAccount", "llama-serving")]
    for kind, name in old:
        live[(kind, name)] = _legacy(kind, name)
    live[("RoleBinding", "llama-serving")] = _legacy("RoleBinding", "llama-serving", owner_uid="someone-else")
    upgraded = decide(Observed(backend(multi_node), NODES, children=live, apis=apis))
    assert upgraded.prune == [(kind, name, f"old-{kind}-{name}") for kind, name in old]
    assert not any(c["metadata"]["name"] in {n for _, n in old} for c in upgraded.apply)


@pytest.mark.parametrize("kind, name", [("Service", "llama"), ("Deployment", "llama"), ("ConfigMap", "llama-model-repo")])
def test_an_object_it_does_not_control_stops_the_pass_and_is_named(kind, name):
    theirs = {"kind": kind, "metadata": {"name": name, "uid": "theirs", "labels": {"team": "search"}}}
    asked = decide(Observed(backend({"model": MODEL}), NODES))
    children = {key: (theirs if key == (kind, name) else None) for key in asked.look_up}
    decision = decide(Observed(backend({"model": MODEL}), NODES, children=children))
    assert decision.apply == [] and decision.prune == []
    assert conditions(decision)["Degraded"] == ("True", cond.RESOURCE_EXISTS)
    assert f"{kind} serving/{name}" in decision.conditions.get("Degraded")["message"]


def test_replicas_changed_behind_its_back_asks_for_the_hpas_then_yields_to_a_foreign_one():
    live = served(first_pass({"model": MODEL, "replicas": 2}), ready=2)
    live[("Deployment", "llama")]["spec"]["replicas"] = 5  # someone else scaled it
    asked = decide(Observed(backend({"model": MODEL, "replicas": 2}), NODES, children=live))
    assert asked.look_up_hpas and asked.apply == []
    theirs = {"metadata": {"name": "their-hpa"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "llama"}}}
    decision = decide(Observed(backend({"model": MODEL, "replicas": 2}), NODES, children=live, hpas=[theirs]))
    assert conditions(decision)["Degraded"] == ("True", cond.CONFLICTING_HPA)
    workload = next(c for c in decision.apply if c["kind"] == "Deployment")
    assert "replicas" not in workload["spec"], "one writer for replicas"
    alone = decide(Observed(backend({"model": MODEL, "replicas": 2}), NODES, children=live, hpas=[]))
    assert next(c for c in alone.apply if c["kind"] == "Deployment")["spec"]["replicas"] == 2, "scale reverted"


def test_the_autoscalers_decision_sets_replicas_target_and_an_event():
    spec = {"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}}
    live = served(first_pass(spec), ready=1)
    scale = ScaleDecision(3, "ScaleUp", "engine queue grows", "2.100", "2026-12-03T00:00:00Z", {"signal": "engine"})
    decision = settle(spec, live, scale_decision=scale, hpas=[])
    assert next(c for c in decision.apply if c["kind"] == "Deployment")["spec"]["replicas"] == 3
    assert "PodDisruptionBudget" in {c["kind"] for c in decision.apply}, "more than one replica: a PDB"
    assert decision.autoscale_target is not None and decision.autoscale_target.current_replicas == 3
    assert decision.status.autoscaling.signal == "engine" and decision.status.autoscaling.desired_replicas == 3
    assert [(t, r) for t, r, _ in decision.events] == [("Normal", "ScaledUp")]
    fixed = decide(Observed(backend({"model": MODEL}), NODES, children=live))
    assert fixed.autoscale_target is None, "not the operator's to scale"


def test_a_shared_gpu_pool_hands_the_autoscaler_its_pool_and_priority_and_status_says_who_preempted():
    spec = {"model": MODEL, "scheduling": {"priorityClassName": "batch"},
            "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4, "priority": 5}}
    live = served(first_pass(spec), ready=1)
    scale = ScaleDecision(1, cond.PREEMPTED_BY, "capped", None, None,
                          {"preemptedBy": "team/chat (priority 10): 2 replica(s)", "waitingForCapacity": None})
    decision = settle(spec, live, scale_decision=scale, hpas=[])
    target = decision.autoscale_target
    assert target is not None and target.priority == 5 and target.priority_class == "batch"
    assert target.pool.startswith("NVIDIA-H100-80GB-HBM3/") and target.pool_gpus == sum(n.gpu_count for n in NODES)
    assert decision.status.autoscaling.preempted_by == "team/chat (priority 10): 2 replica(s)"
    assert ("Normal", cond.PREEMPTED_BY, "replicas given up to: team/chat (priority 10): 2 replica(s)") in decision.events
    # said once, when it begins
    again = decide(Observed(backend(spec, {"autoscaling": {"preemptedBy": "team/chat (priority 10): 2 replica(s)"}}),
                            NODES, children=live, scale_decision=scale, hpas=[]))
    assert not [e for e in again.events if e[1] == cond.PREEMPTED_BY]


@pytest.mark.parametrize("resources, why", [
    (None, None),
    ({"memory": "1Ti"}, None),
    # the dgx-h100 nodes have 2Ti of memory and 224 CPUs allocatable
    ({"memory": "100Ti"}, "0/4 nodes are available: 4 Insufficient memory; it requests memory 100Ti, the most a node "
                          "of the pool has is 2Ti"),
    # the pod's request: the serving container's and the operator's other containers' (here 250m more)
    ({"cpu": "1000"}, "it requests cpu 1000.25, the most a node of the pool has is 224"),
])
def test_the_autoscaler_learns_when_no_node_of_the_pool_could_hold_the_rendered_pod(resources, why):
    spec = {"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4},
            **({"scheduling": {"resources": resources}} if resources else {})}
    target = first_pass(spec).autoscale_target
    assert target is not None and target.pool
    if why is None:
        assert target.unplaceable is None
    else:
        assert target.unplaceable is not None and target.unplaceable.endswith(why), target.unplaceable
        assert target.unplaceable.startswith("no node of the pool can hold a serving pod")


def test_a_demand_not_claimed_is_a_warning_once_and_a_wait_for_gpus_a_normal_event():
    spec = {"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}}
    live = served(first_pass(spec), ready=1)
    not_claimed = "3 replica(s) not claimed from the GPU pool: no node of the pool can hold a serving pod: ..."
    scale = ScaleDecision(1, cond.WAITING_FOR_CAPACITY, "capped", None, None,
                          {"preemptedBy": None, "waitingForCapacity": not_claimed})
    decision = settle(spec, live, scale_decision=scale, hpas=[])
    assert ("Warning", cond.WAITING_FOR_CAPACITY, not_claimed) in decision.events
    again = decide(Observed(backend(spec, {"autoscaling": {"waitingForCapacity": not_claimed}}),
                            NODES, children=live, scale_decision=scale, hpas=[]))
    assert not [e for e in again.events if e[1] == cond.WAITING_FOR_CAPACITY]
    waiting = "3 replica(s), 3 GPU(s), of a pool of 32; held by 1 backend(s) of other namespaces: 32 GPU(s)"
    scale = dataclasses.replace(scale, extra={"preemptedBy": None, "waitingForCapacity": waiting})
    decision = settle(spec, live, scale_decision=scale, hpas=[])
    assert ("Normal", cond.WAITING_FOR_CAPACITY, f"waiting for {waiting}") in decision.events


MEMORY = {"watchingSince": "2026-12-03T00:00:00Z", "lastSeen": "2026-12-03T01:00:00Z",
          "bursts": [{"start": "2026-12-03T00:55:00Z", "headroom": 1.4}]}


@pytest.mark.parametrize("memory, kept", [
    (MEMORY, True),
    # the CR's status is not only ours to write: what the API does not read is dropped, never a failed pass
    ({"watchingSince": "2026-12-03T00:00:00Z"}, False),
    ({**MEMORY, "bursts": [{"start": "2026-12-03T00:55:00Z", "headroom": 1.4}] * 17}, False),
    ("a string", False),
])
def test_the_learned_memory_waits_in_status_for_the_scaler_that_resumes_it(memory, kept):
    # after an operator restart the first passes have no decision yet: status.autoscaling.memory stays for the new
    # scaler (handed over in the autoscale target), until that scaler's first decision writes its own
    spec = {"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}}
    live = served(first_pass(spec), ready=1)
    decision = decide(Observed(backend(spec, {"autoscaling": {"memory": memory}}), NODES, children=live, hpas=[]))
    assert decision.status.autoscaling.reason == "AwaitingMetrics"
    carried = decision.status.autoscaling.memory
    assert (carried.model_dump(by_alias=True, exclude_none=True) if carried else None) == (memory if kept else None)
    assert decision.autoscale_target is not None
    assert decision.autoscale_target.memory == (memory if isinstance(memory, dict) else None)
    # the scaler's decision carries the memory it resumed and extended
    # the scaler's decision carries the memory it resumed and extended, and the recent loads are written with it
    recent = {"loads": "3590:12.5 3600:13", "rates": "3600:2", "forecasts": "3600:2.2", "fit": [1, 2, 3, 4, 5, 3600]}
    scale = ScaleDecision(1, "WithinTolerance", "steady", "0.100", None, {"signal": "engine", "memory": MEMORY},
                          recent=recent)
    after = decide(Observed(backend(spec, {"autoscaling": {"memory": memory}}), NODES, children=live,
                            scale_decision=scale, hpas=[]))
    assert after.status.autoscaling.memory is not None
    assert after.status.autoscaling.memory.model_dump(by_alias=True, exclude_none=True) == {**MEMORY, **recent}
    # ... but they alone are no reason to write the status (they change at every decision)
    assert scale == ScaleDecision(1, "WithinTolerance", "steady", "0.100", None, {"signal": "engine", "memory": MEMORY})


def test_a_model_that_fits_nowhere_waits_for_capacity():
    huge = {"architecture": {"numLayers": 200, "hiddenSize": 32768, "numAttentionHeads": 256, "numKeyValueHeads": 16,
                             "headDim": 128, "vocabSize": 256000, "parameterCount": 9_000_000_000_000},
            "source": MODEL["source"]}
    decision = decide(Observed(backend({"model": huge}), NODES))
    assert decision.waiting_for_capacity and decision.apply == [] and decision.look_up == []
    assert conditions(decision)["Planned"][0] == "False" and conditions(decision)["Degraded"][0] == "True"


@pytest.mark.parametrize("container_state, reason", [
    ({"waiting": {"reason": "ImagePullBackOff", "message": "manifest unknown"}}, cond.IMAGE_PULL_FAILED),
    ({"waiting": {"reason": "CrashLoopBackOff"}}, cond.CRASH_LOOP_BACK_OFF),
])
def test_a_pod_that_cannot_start_is_degraded_with_the_kubelets_words(container_state, reason):
    live = served(first_pass({"model": MODEL}), ready=0)
    pod = {"metadata": {"name": "llama-abc", "labels": {BACKEND_LABEL: "llama", "app.kubernetes.io/component": "server"}},
           "status": {"containerStatuses": [{"name": "triton", "state": container_state}]}}
    decision = decide(Observed(backend({"model": MODEL}), NODES, children=live, pods=[pod]))
    assert conditions(decision)["Degraded"] == ("True", reason)
    assert "llama-abc" in decision.conditions.get("Degraded")["message"]


def test_a_pod_whose_engine_died_is_degraded_with_the_engines_words():
    live = served(first_pass({"model": MODEL}), ready=0)
    died = {"terminated": {"exitCode": 0, "reason": "Completed",
                           "message": "EngineFailed: EngineDeadError: EngineCore encountered an issue."}}
    pod = {"metadata": {"name": "llama-abc", "labels": {BACKEND_LABEL: "llama", "app.kubernetes.io/component": "server"}},
           "status": {"containerStatuses": [{"name": "triton", "ready": False, "restartCount": 1, "lastState": died,
                                             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    decision = decide(Observed(backend({"model": MODEL}), NODES, children=live, pods=[pod]))
    assert conditions(decision)["Degraded"] == ("True", cond.ENGINE_FAILED)
    message = decision.conditions.get("Degraded")["message"]
    assert "llama-abc" in message and "EngineDeadError: EngineCore encountered an issue." in message
    assert ("Warning", cond.ENGINE_FAILED) in [(t, r) for t, r, _ in condition_events(decision.conditions)]
    # back up and ready: the old termination message no longer makes it degraded
    pod["status"]["containerStatuses"][0].update(ready=True, state={"running": {}})
    assert conditions(decide(Observed(backend({"model": MODEL}), NODES, children=live, pods=[pod])))["Degraded"] != (
        "True", cond.ENGINE_FAILED)


def test_a_checkpoint_on_its_way_is_progressing_not_degraded():
    spec = {"model": {"source": {"uri": "hf://acme/tiny"}}}
    downloading = ModelCacheResult(LLMBackendSpec.model_validate(spec), False, "Downloading", "700/1800 bytes",
                                   {"phase": "Downloading", "bytesDone": 700, "bytesTotal": 1800})
    decision = decide(Observed(backend(spec), NODES, model_cache=downloading))
    got = conditions(decision)
    assert got["ModelReady"] == ("False", "Downloading") and got["Progressing"][0] == "True"
    assert got["Degraded"][0] == "False" and decision.apply == [] and decision.requeue_after == 15
    assert decision.status.model.bytes_done == 700


GATED = {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}}


def _own_download(phase: str, reason: str, permanent: bool = False) -> ModelCacheResult:
    return ModelCacheResult(LLMBackendSpec.model_validate({"model": GATED}), phase == "Ready", reason, f"{reason}: ...",
                            {"phase": phase, "source": GATED["source"]["uri"]}, permanent=permanent)


@pytest.mark.parametrize("phase,reason", [("Resolving", "DownloadPending"), ("Downloading", "Downloading"),
                                          ("Downloading", "Verifying")])
def test_a_uri_source_is_served_only_once_the_backend_s_own_download_finished(phase, reason):
    """Issue 42 (attack 3): the copy in the cache is the source's, not the credential's: another backend's download
    (its own Secret) may have put it there before this backend's own Job ran. With a preset the plan is known, but
    nothing that would mount the copy is applied until this backend's own download Job is Complete."""
    waiting = first_pass({"model": GATED}, model_cache=_own_download(phase, reason))
    got = conditions(waiting)
    assert waiting.apply == [] and waiting.look_up == []
    assert got["Available"] == ("False", cond.WAITING_FOR_OWN_DOWNLOAD) and got["Progressing"] == ("True", reason)
    assert got["Degraded"][0] == "False" and got["Planned"][0] == "True" and waiting.status.plan is not None
    assert waiting.requeue_after == 15
    ready = first_pass({"model": GATED}, model_cache=_own_download("Ready", "ModelCached"))
    assert "Deployment" in {o["kind"] for o in ready.apply}


def test_a_misconfiguration_is_degraded_while_the_own_download_runs():
    """What a person must fix (mode keda without KEDA's CRD) is said at once, not after the download it waits on."""
    spec = {"model": GATED, "autoscaling": {"enabled": True, "mode": "keda",
                                            "prometheus": {"url": "http://prometheus.monitoring:9090"}}}
    downloading = ModelCacheResult(LLMBackendSpec.model_validate(spec), False, "Downloading", "Downloading: ...",
                                   {"phase": "Downloading", "source": GATED["source"]["uri"]})
    waiting = first_pass(spec, model_cache=downloading)
    got = conditions(waiting)
    assert got["Available"] == ("False", cond.WAITING_FOR_OWN_DOWNLOAD) and waiting.apply == []
    assert got["Degraded"] == ("True", cond.KEDA_NOT_INSTALLED)


def test_a_refused_own_download_keeps_an_earlier_spec_s_replicas_and_applies_nothing():
    """The backend served another source before (an earlier spec); its new source's own download was refused (401):
    Degraded with the download's reason, nothing of the new spec applied, nothing pruned (as not_served says)."""
    before = served(first_pass({"model": MODEL}), ready=1)
    refused = _own_download("Failed", "SourceUnauthorized", permanent=True)
    decision = settle({"model": GATED}, before, model_cache=refused)
    got = conditions(decision)
    assert decision.apply == [] and decision.prune == []
    assert got["Degraded"] == ("True", "SourceUnauthorized") and got["Available"][0] == "False"
    assert "earlier spec" in decision.conditions.get("Available")["message"]


def test_a_source_the_downloader_refuses_stops_the_pass_with_its_reason():
    """A URI the API admits but the download program refuses (here a prefix named like its completion marker; or an
    object stored before the API checked a rule): with a preset the plan is known, and the pass used to raise while
    rendering the pods' model path. It stops with the program's reason and renders nothing."""
    from llmbackend.model_fetch import FetchError, parse_uri
    spec = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://bucket/.llmbackend-complete.json"}}}
    with pytest.raises(FetchError) as refused:
        parse_uri(spec["model"]["source"]["uri"])
    # what controller/modelcache.sync_model_cache reports for it
    failed = ModelCacheResult(LLMBackendSpec.model_validate(spec), False, refused.value.reason,
                              f"spec.model.source.uri: {refused.value}; fix the source",
                              {"phase": "Failed", "source": spec["model"]["source"]["uri"]}, permanent=True)
    decision = decide(Observed(backend(spec), NODES, model_cache=failed))
    got = conditions(decision)
    assert got["Degraded"] == ("True", "InvalidSource") and got["Available"][0] == "False"
    assert "fix the source" in decision.conditions.get("Degraded")["message"]
    assert not [o for o in decision.apply if o["kind"] in ("Deployment", "ConfigMap", "Service")]


def test_the_status_is_typed_a_misspelt_field_cannot_be_written():
    decision = first_pass({"model": MODEL})
    wire = finish_status(decision)
    assert wire["observedGeneration"] == 3 and wire["plan"]["tensorParallel"] >= 1
    assert [c["type"] for c in wire["conditions"]][:4] == list(cond.TYPES)
    with pytest.raises(ValueError):
        decision.status.readyReplica = 1  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        LLMBackendStatus.model_validate({"readyReplica": 1})


# ---- never adopt: every kind the operator may own ----

def _gb200_nodes() -> list:
    inventory = Inventory()
    for node in topology_nodes("gb200-nvl-clique"):
        inventory.upsert(node)
    return inventory.nodes()


PROMETHEUS = {"url": "http://prometheus.monitoring:9090"}
# (nodes, spec, served optional APIs): together they render every kind of MANAGED_KINDS.
SCENARIOS = {
    "single-node-hpa": (NODES, {"model": MODEL, "replicas": 2, "autoscaling": {"enabled": True, "mode": "hpa", "maxReplicas": 4}},
                        {"PrometheusRule", "InferencePool"}),
    "keda": (NODES, {"model": MODEL, "autoscaling": {"enabled": True, "mode": "keda", "prometheus": PROMETHEUS}},
             {"ScaledObject", "PrometheusRule"}),
    "replicas-2": (NODES, {"model": MODEL, "replicas": 2}, {"PodMonitor"}),
    "scale-to-zero": (NODES, {"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 0}}, set()),
    "gb200-clique": (_gb200_nodes(), {"model": {"preset": "llama-3.1-405b", "source": MODEL["source"]}},
                     {"LeaderWorkerSet", "ComputeDomain"}),
}


def _wanted(scenario: str) -> list[tuple[str, str]]:
    """The children asked for (not the names of new LeaderWorkerSet groups, anyone's: test_group_names.py)."""
    from llmbackend.render.names import MANAGED_KINDS

    return [key for key in _asked(scenario) if key[0] in MANAGED_KINDS]


def _asked(scenario: str) -> list[tuple[str, str]]:
    nodes, spec, apis = SCENARIOS[scenario]
    return decide(Observed(backend(spec), nodes, apis=frozenset(apis))).look_up


CHILDREN = sorted({(kind, name, scenario) for scenario in SCENARIOS for kind, name in _wanted(scenario)})


def test_the_scenarios_cover_every_kind_the_operator_may_own():
    from llmbackend.render.names import MANAGED_KINDS

    assert {kind for kind, _, _ in CHILDREN} == set(MANAGED_KINDS)


@pytest.mark.parametrize("kind, name, scenario", CHILDREN, ids=[f"{k}/{n}" for k, n, _ in CHILDREN])
def test_no_child_kind_is_ever_adopted(kind, name, scenario):
    nodes, spec, apis = SCENARIOS[scenario]
    theirs = {"kind": kind, "metadata": {"name": name, "uid": "theirs", "labels": {"team": "search"}}}
    children = {key: (theirs if key == (kind, name) else None) for key in _asked(scenario)}
    decision = decide(Observed(backend(spec), nodes, apis=frozenset(apis), children=children))
    assert decision.apply == [] and decision.prune == [], "nothing is applied, theirs is not touched"
    assert conditions(decision)["Degraded"] == ("True", cond.RESOURCE_EXISTS)
    assert f"{kind} serving/{name}" in decision.conditions.get("Degraded")["message"]


def test_configmaps_as_the_caches_keep_them_compare_by_digest():
    """The watch caches keep ConfigMap data as one digest (the model repository is ~50 KB per backend): a steady
    backend still applies nothing, and data someone changed by hand is still put back."""
    from llmbackend.controller.cache import Store
    from llmbackend.controller.digest import is_summarized

    live = served(first_pass({"model": MODEL}), ready=1)
    store = Store(summarize=True)
    for (kind, _), child in live.items():
        if kind == "ConfigMap":
            store.upsert({**copy.deepcopy(child), "metadata": {**child["metadata"], "resourceVersion": "5"}})
    [cached] = store.list(None, None)
    full = next(c for (k, _), c in live.items() if k == "ConfigMap")
    assert is_summarized(cached) and len(str(cached)) < len(str(full)) / 10
    from_cache = {**live, ("ConfigMap", cached["metadata"]["name"]): cached}
    steady = decide(Observed(backend({"model": MODEL}), NODES, children=from_cache))
    assert (steady.apply, steady.prune, steady.look_up) == ([], [], [])

    edited = copy.deepcopy(full)
    first_file = next(iter(edited["data"]))
    edited["data"][first_file] += "\n# edited by hand"
    store.upsert({**edited, "metadata": {**edited["metadata"], "resourceVersion": "6"}})
    [cached] = store.list(None, None)
    put_back = decide(Observed(backend({"model": MODEL}), NODES,
                               children={**live, ("ConfigMap", cached["metadata"]["name"]): cached}))
    assert [c["kind"] for c in put_back.apply] == ["ConfigMap"]
    assert put_back.apply[0]["data"] == full["data"], "what is applied is the full desired data, not the digest"

    added = copy.deepcopy(full)
    added["data"]["someone-elses-key"] = "theirs"  # issue 24: re-applied on every resync, a no-op resync wrote
    store.upsert({**added, "metadata": {**added["metadata"], "resourceVersion": "7"}})
    [cached] = store.list(None, None)
    ignored = decide(Observed(backend({"model": MODEL}), NODES,
                              children={**live, ("ConfigMap", cached["metadata"]["name"]): cached}))
    assert ignored.apply == [], "a key the operator does not write is not its business"
