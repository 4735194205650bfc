"""Why serving pods wait, as status says it: kube-scheduler's own messages of every supported Kubernetes version
(scheduler_messages.py) mapped to a reason and the fix that names the field the user wrote, and only the pods of
the current spec looked at."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
import scheduler_messages as scheduler
from test_decide import NODES, backend, conditions, first_pass, served
from test_progress_rule import T0, pending_pod

from llmbackend.api import conditions as cond
from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller.decide import Observed, decide
from llmbackend.controller.modelcache import ModelCacheResult
from llmbackend.controller.pods import ModelClaim, unschedulable_problem
from llmbackend.controller.workloadstatus import TEMPLATE_HASH_ANNOTATION, current_pods

HF_SPEC = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}}}
PVC_SPEC = {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "llm-models", "path": "llama"}}}}
CACHE = ModelClaim("llmbackend-model-cache", cache=True)
CACHE_WITHOUT_CLASS = ModelClaim("llmbackend-model-cache", cache=True, no_storage_class=True)
PVC = ModelClaim("llm-models", cache=False)


def as_decide_reads(message: str) -> str:
    return message.strip().rstrip(".")  # _pod_problem trims the scheduler's final period


@pytest.mark.parametrize("version", scheduler.VERSIONS)
def test_an_unbound_cache_claim_without_storage_class_is_no_storage_class_naming_the_cache_fields(version):
    problem = unschedulable_problem("llama-0", as_decide_reads(scheduler.UNBOUND_IMMEDIATE[version]), "t",
                                    CACHE_WITHOUT_CLASS)
    assert (problem.reason, problem.waiting_reason) == (cond.NO_STORAGE_CLASS, cond.NO_STORAGE_CLASS)
    assert "spec.model.source.cache.storageClassName" in problem.message
    assert "pvc.claimName" not in problem.message and problem.since == "t"


@pytest.mark.parametrize("version", scheduler.VERSIONS)
@pytest.mark.parametrize("claim, field", [(CACHE, "spec.model.source.cache.storageClassName"),
                                          (PVC, "spec.model.source.pvc.claimName"),
                                          (None, "kubectl describe pvc")])
def test_an_unbound_claim_is_claim_not_bound_naming_the_field_of_its_source(version, claim, field):
    problem = unschedulable_problem("llama-0", as_decide_reads(scheduler.UNBOUND_IMMEDIATE[version]), "t", claim)
    assert (problem.reason, problem.waiting_reason) == (cond.SERVING_CLAIM_NOT_BOUND, cond.SERVING_CLAIM_NOT_BOUND)
    assert field in problem.message
    wrong = {CACHE: "pvc.claimName", PVC: "source.cache"}.get(claim)
    assert wrong is None or wrong not in problem.message


@pytest.mark.parametrize("version", scheduler.VERSIONS)
def test_a_missing_claim_is_claim_not_found_naming_it_and_its_field(version):
    problem = unschedulable_problem("llama-0", as_decide_reads(scheduler.CLAIM_NOT_FOUND[version]), "t", PVC)
    assert problem.reason == cond.SERVING_CLAIM_NOT_FOUND
    assert "create PersistentVolumeClaim llm-models" in problem.message
    assert "spec.model.source.pvc.claimName" in problem.message
    other = unschedulable_problem("llama-0", as_decide_reads(scheduler.CLAIM_NOT_FOUND[version]), "t", CACHE)
    assert other.reason == cond.SERVING_CLAIM_NOT_FOUND and "spec.serving.podTemplate" in other.message, \
        "a claim the source does not name is a podTemplate volume"


def test_the_quick_start_sample_without_a_default_storage_class_says_no_storage_class_through_decide():
    """The README's hf:// sample on a cluster without a default StorageClass, seen by the v1.36 scheduler."""
    stuck = ModelCacheResult(LLMBackendSpec.model_validate(HF_SPEC), False, cond.NO_STORAGE_CLASS,
                             "claim llmbackend-model-cache has no StorageClass; set spec.model.source.cache.storageClassName",
                             {"phase": "Downloading"},
                             stuck=True, stuck_since="2026-12-01T10:00:00Z")
    live = served(first_pass(HF_SPEC, model_cache=stuck), ready=0)
    pod = pending_pod(scheduler.UNBOUND_IMMEDIATE["1.36"])
    for seconds, want in ((30, "Progressing"), (601, "Degraded")):
        decision = decide(Observed(backend(HF_SPEC), NODES, children=live, model_cache=stuck, pods=[pod],
                                   now=T0 + timedelta(seconds=seconds), free_gpus={n.name: 8 for n in NODES}))
        got = conditions(decision)
        assert got[want] == ("True", cond.NO_STORAGE_CLASS), got
        message = decision.conditions.get(want)["message"]
        assert "storageClassName" in message and "pvc.claimName" not in message, message


def template_hash(spec: dict[str, Any]) -> str:
    deployment = next(c for c in first_pass(spec).apply if c["kind"] == "Deployment")
    return deployment["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]


def of_template(pod: dict[str, Any], template: str, name: str) -> dict[str, Any]:
    pod["metadata"] = {**pod["metadata"], "name": name, "annotations": {TEMPLATE_HASH_ANNOTATION: template}}
    return pod


def test_the_template_hash_changes_with_the_pod_template_only():
    assert template_hash(HF_SPEC) == template_hash(HF_SPEC)
    assert template_hash(HF_SPEC) != template_hash(PVC_SPEC)
    assert template_hash(PVC_SPEC) == template_hash({**PVC_SPEC, "replicas": 3}), "scaling rolls nothing"


def test_current_pods_keeps_the_current_templates_and_pods_from_before_the_annotation():
    old, new, unstamped = ({"metadata": {"name": "a", "annotations": {TEMPLATE_HASH_ANNOTATION: "h1"}}},
                           {"metadata": {"name": "b", "annotations": {TEMPLATE_HASH_ANNOTATION: "h2"}}},
                           {"metadata": {"name": "c"}})
    assert current_pods([old, new, unstamped], {"h2"}) == [new, unstamped]


def test_after_a_spec_change_status_describes_the_new_pod_not_the_previous_specs():
    """hf:// replaced by a pvc source whose claim does not exist: the old pod (unbound cache claim) still waits,
    the new one waits for a claim that is not there; status names the new one's problem."""
    live = served(first_pass(HF_SPEC), ready=0)  # the Deployment of the hf:// spec, not rolled out
    old = of_template(pending_pod(scheduler.UNBOUND_IMMEDIATE["1.36"]), template_hash(HF_SPEC), "llama-old")
    new = of_template(pending_pod(scheduler.CLAIM_NOT_FOUND["1.36"]), template_hash(PVC_SPEC), "llama-new")
    decision = decide(Observed(backend(PVC_SPEC), NODES, children=live, pods=[old, new],
                               now=T0 + timedelta(seconds=30), free_gpus={n.name: 8 for n in NODES}))
    progressing = decision.conditions.get("Progressing")
    assert progressing["reason"] == cond.SERVING_CLAIM_NOT_FOUND, progressing
    assert "pod llama-new" in progressing["message"] and "llm-models" in progressing["message"]
    assert "llama-old" not in progressing["message"]


QUICK_START_SPEC = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
                                                                    "secretRef": {"name": "hf-tokn"}}}}


@pytest.mark.parametrize("version", scheduler.VERSIONS)
@pytest.mark.parametrize("claim", [CACHE_WITHOUT_CLASS, CACHE])
def test_a_serving_pod_waiting_for_the_cache_claim_names_the_secret_the_download_reads(version, claim):
    """Issue 49 item 3: the operator may not read Secrets, so a misspelt secretRef shows only once the download pod
    starts; while storage holds it, the wait kubectl get llmb prints names the Secret to check."""
    with_secret = dataclasses.replace(claim, secret="hf-tokn")
    problem = unschedulable_problem("llama-0", as_decide_reads(scheduler.UNBOUND_IMMEDIATE[version]), "t", with_secret)
    assert "Secret hf-tokn (spec.model.source.secretRef)" in problem.message
    assert "kubectl get secret hf-tokn" in problem.message
    without = unschedulable_problem("llama-0", as_decide_reads(scheduler.UNBOUND_IMMEDIATE[version]), "t", claim)
    assert "Secret" not in without.message, "no secretRef, no Secret to name"


def test_the_quick_start_with_a_misspelt_secret_ref_names_it_in_progressing_through_decide():
    """The README's Quick start (a preset) with secretRef hf-tokn on a cluster without a default StorageClass:
    Progressing, what kubectl get llmb and kubectl llmb get print, names the Secret, not only ModelReady. The serving
    pods come after the backend's own download (issue 42, attack 3), so what waits is the download pod, whose wait
    controller/modelcache.sync_model_cache words with the Secret it will read."""
    stuck = ModelCacheResult(LLMBackendSpec.model_validate(QUICK_START_SPEC), False, cond.NO_STORAGE_CLASS,
                             "claim llmbackend-model-cache has no StorageClass; set spec.model.source.cache.storageClassName. "
                             "Once it starts it reads Secret hf-tokn (spec.model.source.secretRef), which the operator "
                             "cannot look at: check it exists with `kubectl get secret hf-tokn -n serving`",
                             {"phase": "Downloading"}, stuck=True, stuck_since="2026-12-01T10:00:00Z")
    decision = first_pass(QUICK_START_SPEC, model_cache=stuck, now=T0 + timedelta(seconds=30))
    assert not [o for o in decision.apply if o["kind"] == "Deployment"]
    progressing = decision.conditions.get("Progressing")
    assert progressing["reason"] == cond.NO_STORAGE_CLASS, progressing
    assert "Secret hf-tokn (spec.model.source.secretRef)" in progressing["message"], progressing["message"]


@pytest.mark.parametrize("waiting_pod", ["llama-0", "llama-0-1"])
def test_a_multi_node_group_waiting_for_its_claim_says_the_claim_not_waiting_for_nodes(waiting_pod):
    """A LeaderWorkerSet group whose leader or worker waits for the model's claim: the same reason and fix as a
    single-node pod's (ClaimNotFound naming the claim and source.pvc.claimName), not WaitingForNodes/PartialGroup,
    which tell the user to add nodes."""
    from llmbackend.render.multinode import GROUP_INDEX_LABEL

    spec = {"model": {"preset": "llama-3.1-405b", "source": {"pvc": {"claimName": "llm-models", "path": "llama"}}},
            "serving": {"progressDeadlineSeconds": 300}}
    apis = frozenset({"LeaderWorkerSet"})
    live = served(first_pass(spec, apis=apis), ready=0)
    pending = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                   "message": scheduler.CLAIM_NOT_FOUND["1.36"],
                                                   "lastTransitionTime": "2026-12-01T10:00:00Z"}]}
    scheduled = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    leader = {"metadata": {"name": "llama-0", "creationTimestamp": "2026-12-01T10:00:00Z",
                           "labels": {"llmbackend.dev/backend": "llama", GROUP_INDEX_LABEL: "0",
                                      "app.kubernetes.io/component": "server"}},
              "status": pending if waiting_pod == "llama-0" else scheduled}
    worker = {"metadata": {"name": "llama-0-1", "creationTimestamp": "2026-12-01T10:00:00Z",
                           "labels": {"llmbackend.dev/backend": "llama", GROUP_INDEX_LABEL: "0"}},
              "status": pending if waiting_pod == "llama-0-1" else scheduled}
    for seconds, want in ((30, "Progressing"), (301, "Degraded")):
        decision = decide(Observed(backend(spec), NODES, children=live, apis=apis, pods=[leader, worker],
                                   now=T0 + timedelta(seconds=seconds), free_gpus={n.name: 0 for n in NODES}))
        got = decision.conditions.get(want)
        assert (got["status"], got["reason"]) == ("True", cond.SERVING_CLAIM_NOT_FOUND), got
        assert f"pod {waiting_pod}:" in got["message"] and "spec.model.source.pvc.claimName" in got["message"], got
