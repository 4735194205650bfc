"""What a backend's serving pods say about why they do not serve: the scheduler's words (a claim missing or unbound,
no nodes), a failed checkpoint check, an engine that died, a container that cannot start. Pure: decide() turns a
PodProblem into conditions with the progress deadline (api/conditions.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..api import conditions as cond
from ..api.v1alpha1 import LLMBackendSpec
from ..render.modelcache import cache_claim
from ..render.names import BackendRef, selector_for
from ..render.servingpod import CHECKPOINT_CHECK_CONTAINER
from .modelcache import ModelCacheResult

# Waiting container reasons that mean the pod will not start without a change.
FATAL_WAITING_REASONS = {
    "ErrImagePull": cond.IMAGE_PULL_FAILED, "ImagePullBackOff": cond.IMAGE_PULL_FAILED,
    "InvalidImageName": cond.IMAGE_PULL_FAILED, "CreateContainerConfigError": cond.CREATE_CONTAINER_CONFIG_ERROR,
    "CrashLoopBackOff": cond.CRASH_LOOP_BACK_OFF,
}


def checkpoint_check_failure(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when the pod's checkpoint check init container failed: its termination message names the
    path and the fix (the pod retries it with back-off; this turns the loop into a readable condition)."""
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if cs.get("name") != CHECKPOINT_CHECK_CONTAINER:
            continue
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            terminated = state.get("terminated") or {}
            if terminated and terminated.get("exitCode", 0) != 0:
                message = (terminated.get("message") or terminated.get("reason") or "").strip()
                return cond.CHECKPOINT_INVALID, f"pod {pod['metadata']['name']}: {message or 'the checkpoint check failed'}"
    return None


# The serving models' termination message when the engine died (render/models: `exit_server`).
ENGINE_FAILED_PREFIX = "EngineFailed:"


def engine_failure(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) while a serving container is down (restarting, or waiting to) after its engine died: the
    model wrote why to the termination message before it stopped the server."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("lastState") or {}).get("terminated") or {}
        message = (terminated.get("message") or "").strip()
        if cs.get("ready") or not message.startswith(ENGINE_FAILED_PREFIX):
            continue
        name = pod["metadata"]["name"]
        return cond.ENGINE_FAILED, (
            f"pod {name}: the engine failed ({message[len(ENGINE_FAILED_PREFIX):].strip()}); requests in flight got "
            f"an error and the container restarts (restart {cs.get('restartCount', 0)}); see `kubectl logs {name} "
            "--previous`")
    return None


@dataclass(frozen=True)
class PodProblem:
    reason: str
    message: str
    since: str | None = None  # a wait that may resolve by itself (the scheduler's), since then; None: needs a person
    waiting_reason: str = cond.WAITING_FOR_NODES


@dataclass(frozen=True)
class ModelClaim:
    """The claim the serving pods load the model from, and the field of the spec that names it: a fix for a claim
    names the field the user wrote (a pvc source's claim is theirs; an hf:// or s3:// source's cache claim is the
    operator's, shaped by spec.model.source.cache)."""

    name: str
    cache: bool  # the cache claim of a URI source (the operator creates it), else source.pvc.claimName
    no_storage_class: bool = False  # the model cache found the claim without a StorageClass (controller/modelcache.py)
    secret: str | None = None  # a URI source's secretRef: the download into the cache claim reads it


def model_claim(spec: LLMBackendSpec, cache: ModelCacheResult | None) -> ModelClaim | None:
    source = spec.model.source
    if source is None:
        return None
    if source.pvc is not None:
        return ModelClaim(source.pvc.claim_name, cache=False)
    if source.uri is not None:
        return ModelClaim(cache_claim(source), cache=True,
                          no_storage_class=cache is not None and cache.reason == cond.NO_STORAGE_CLASS,
                          secret=source.secret_ref.name if source.secret_ref is not None else None)
    return None


# The scheduler's words for volume trouble, as kube-scheduler writes them in v1.30-v1.36 (tests/unit/
# scheduler_messages.py keeps each version's whole message): volumebinding.VolumeBinding.PreFilter appends
# "pod has unbound immediate PersistentVolumeClaims", and its podHasPVCs returns the claim lister's error
# `persistentvolumeclaim "<name>" not found` (pkg/scheduler/framework/plugins/volumebinding/volume_binding.go).
# FitError.Error (pkg/scheduler/framework/types.go) adds the PostFilter plugins' words after them: from v1.34,
# with DynamicResources on by default, that is its cycle-state miss, a bare "not found", so "not found" alone
# says nothing about a claim.
UNBOUND_IMMEDIATE_CLAIMS = "pod has unbound immediate persistentvolumeclaims"


UNBOUND_DELAYED_CLAIMS = "didn't find available persistent volumes to bind"


CLAIM_NOT_FOUND = re.compile(r'persistentvolumeclaim "([^"]+)" not found', re.IGNORECASE)


def unschedulable_problem(pod_name: str, message: str, since: str | None, claim: ModelClaim | None = None) -> PodProblem:
    """The scheduler's words mapped to the fix. Each is a wait bounded by the progress deadline: a claim may be
    created a moment later (a GitOps sync, the scheduler's cache catching up), a volume bound, nodes added."""
    words = message.lower()
    if UNBOUND_IMMEDIATE_CLAIMS in words or UNBOUND_DELAYED_CLAIMS in words:
        reason, fix = cond.SERVING_CLAIM_NOT_BOUND, (
            "no volume is bound to its claim: check the claim's StorageClass (kubectl describe pvc) provisions its "
            "access mode, or bind a PersistentVolume to it")
        if claim is not None and claim.cache and claim.no_storage_class:
            reason, fix = cond.NO_STORAGE_CLASS, (
                f"cache claim {claim.name} has no StorageClass (none was given and the cluster has no default one) "
                "and no volume is bound to it: set spec.model.source.cache.storageClassName to a class that "
                f"provisions ReadWriteMany volumes (kubectl get storageclass), or create a ReadWriteMany "
                f"PersistentVolume for claim {claim.name}")
        elif claim is not None and claim.cache:
            fix = (f"no volume is bound to cache claim {claim.name}: check that its StorageClass "
                   "(spec.model.source.cache.storageClassName) provisions ReadWriteMany volumes and a quota allows "
                   f"its size (kubectl describe pvc {claim.name})")
        elif claim is not None:
            fix = (f"no volume is bound to claim {claim.name} (spec.model.source.pvc.claimName): bind the "
                   "PersistentVolume that holds the checkpoint to it, or check that the claim's StorageClass "
                   f"provisions its access mode (kubectl describe pvc {claim.name})")
        if claim is not None and claim.cache and claim.secret:
            # The operator may not read Secrets: a misspelt secretRef shows only once the download pod starts, which
            # this same claim holds back (controller/modelcache.py names it in ModelReady the same way).
            fix += (f"; once it binds, the download reads Secret {claim.secret} (spec.model.source.secretRef), which "
                    f"the operator cannot look at: check it exists in this namespace (`kubectl get secret {claim.secret}`)")
        return PodProblem(reason, f"pod {pod_name}: {message}; {fix}", since, waiting_reason=reason)
    missing = CLAIM_NOT_FOUND.search(message)
    if missing is not None:
        name = missing.group(1)
        if claim is not None and name == claim.name and claim.cache:
            fix = (f"cache claim {name} of spec.model.source.uri is created by the operator on its next pass; if it "
                   "stays missing, set spec.model.source.cache.claimName")
        elif claim is not None and name == claim.name:
            fix = (f"create PersistentVolumeClaim {name} with the checkpoint in this namespace, or fix "
                   "spec.model.source.pvc.claimName")
        else:
            fix = (f"create PersistentVolumeClaim {name} in this namespace, or fix the volume of "
                   "spec.serving.podTemplate that names it")
        return PodProblem(cond.SERVING_CLAIM_NOT_FOUND, f"pod {pod_name}: {message}; {fix}", since,
                          waiting_reason=cond.SERVING_CLAIM_NOT_FOUND)
    return PodProblem(cond.UNSCHEDULABLE,
                      f"pod {pod_name}: {message}; if nodes are being added this resolves itself, otherwise change "
                      "spec.scheduling or free or add matching nodes", since)


CLAIM_REASONS = frozenset({cond.SERVING_CLAIM_NOT_BOUND, cond.NO_STORAGE_CLASS, cond.SERVING_CLAIM_NOT_FOUND})


def claim_problem(pods: list[dict[str, Any]], claim: ModelClaim | None) -> PodProblem | None:
    """A pod of a multi-node group, leader or worker, that waits for a claim: the root cause, named with its fix as
    for a single-node pod (the group's own words would say to add nodes)."""
    for pod in pods:
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                problem = unschedulable_problem(pod["metadata"]["name"], (c.get("message") or "").strip().rstrip("."),
                                                c.get("lastTransitionTime") or pod["metadata"].get("creationTimestamp"),
                                                claim)
                if problem.reason in CLAIM_REASONS:
                    return problem
    return None


def pod_problem(pods: list[dict[str, Any]], ref: BackendRef, claim: ModelClaim | None = None) -> PodProblem | None:
    """Why serving pods do not run: the scheduler's or the kubelet's words."""
    selector = selector_for(ref)
    for pod in pods:
        if not selector.items() <= (pod["metadata"].get("labels") or {}).items():
            continue  # a multi-node worker: group_problem looks at those
        invalid = checkpoint_check_failure(pod) or engine_failure(pod)
        if invalid:
            return PodProblem(*invalid)
        name = pod["metadata"]["name"]
        for c in pod.get("status", {}).get("conditions", []):
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                return unschedulable_problem(name, (c.get("message") or "").strip().rstrip("."),
                                             c.get("lastTransitionTime") or pod["metadata"].get("creationTimestamp"), claim)
        for cs in pod.get("status", {}).get("containerStatuses", []) + pod.get("status", {}).get("initContainerStatuses", []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            why = waiting.get("reason")
            if why in FATAL_WAITING_REASONS:
                return PodProblem(FATAL_WAITING_REASONS[why],
                                  f"pod {name} container {cs.get('name')}: {waiting.get('message', why)}; "
                                  f"see `kubectl describe pod {name}` and its logs")
    return None

