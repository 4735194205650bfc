"""Level-triggered reconciliation of one LLMBackend.

`Reconciler.reconcile(key)` reads the CR, plans (or keeps the plan it already chose for this spec),
renders the desired children (pure functions in render/), applies only what differs, prunes what is
no longer desired, and writes status only when it changed. Safe to call any number of times.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..api.catalog import UnknownPresetError, resolve_architecture
from .modelcache import model_cache_blocks_plan, sync_model_cache
from ..api.v1alpha1 import AutoscalingMode, LLMBackendSpec, PlanStatus
from ..planning.inventory import Inventory
from ..planning.planner import Plan, plan_for_spec, replicas_capacity
from ..render import triton
from ..render.workloads import (
    MANAGED_KINDS,
    PROMETHEUS_RULE_API,
    BackendRef,
    choose_rollout_strategy,
    config_map_name,
    desired_objects,
    metrics_model,
    model_name,
    selector_string,
)
from . import permissions
from .conditions import AVAILABLE, DEGRADED, PLANNED, PROGRESSING, Conditions, now_rfc3339
from .kube import ApiError, Kube

log = logging.getLogger("llmbackend.reconcile")

APPLIED_HASH_ANNOTATION = "llmbackend.dev/applied-hash"
EVENT_SOURCE = "llmbackend-operator"
# Waiting container reasons that mean the pod will not start without a change.
FATAL_WAITING_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CrashLoopBackOff"}

permissions.require("", "events", "create")
permissions.require("autoscaling", "horizontalpodautoscalers", "list")  # conflict detection


@dataclass
class ScaleDecision:
    """What the autoscaler last decided for a backend (written by the autoscaler loop)."""

    desired_replicas: int
    reason: str
    message: str
    current_ratio: str | None
    last_scale_time: str | None


@dataclass
class AutoscaleTarget:
    """What the autoscaler loop needs to know about a backend (written by reconcile)."""

    namespace: str
    name: str
    spec: Any  # AutoscalingSpec
    scrape_model: str
    selector: str
    current_replicas: int
    capacity_replicas: int | None
    gpus_per_replica: int
    max_batch_size: int


@dataclass
class Outcome:
    requeue_after: float | None = None
    writes: int = 0


@dataclass
class SharedState:
    """State shared between the reconcilers, the autoscaler loop and the watch handlers."""

    inventory: Inventory = field(default_factory=Inventory)
    decisions: dict[tuple[str, str], ScaleDecision] = field(default_factory=dict)
    autoscale_targets: dict[tuple[str, str], AutoscaleTarget] = field(default_factory=dict)
    waiting_for_capacity: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def spec_hash(spec: LLMBackendSpec) -> str:
    """Hash of the fields that decide the plan (not replicas or autoscaling)."""
    wire = spec.dump()
    planning_input = {k: wire.get(k) for k in ("model", "engine", "parallelism", "scheduling")}
    return hashlib.sha256(json.dumps(planning_input, sort_keys=True).encode()).hexdigest()[:16]


def object_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def is_subset(desired: Any, live: Any) -> bool:
    """Every field we set has that value live (server defaults may add fields; lists must match in length)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(k in live and is_subset(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(is_subset(d, x) for d, x in zip(desired, live))
    return desired == live


def plan_status_from(plan: Plan, input_hash: str) -> PlanStatus:
    return PlanStatus.model_validate({**plan.to_status(), "inputHash": input_hash})


class Reconciler:
    def __init__(self, kube: Kube, state: SharedState):
        self.kube = kube
        self.state = state

    # ---- entry point ----

    def reconcile(self, key: tuple[str, str]) -> Outcome:
        namespace, name = key
        obj = self.kube.get("LLMBackend", namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            self.forget(key)
            return Outcome()  # children go with the CR through owner references
        writes_before = self._writes()
        outcome = self._reconcile(obj)
        outcome.writes = self._writes() - writes_before  # approximate when several reconciles run at once
        return outcome

    def _writes(self) -> int:
        return sum(self.kube.calls[method] for method in ("PATCH", "POST", "PUT", "DELETE"))

    def forget(self, key: tuple[str, str]) -> None:
        with self.state.lock:
            self.state.decisions.pop(key, None)
            self.state.autoscale_targets.pop(key, None)
            self.state.waiting_for_capacity.discard(key)

    # ---- the steps ----

    def _reconcile(self, obj: dict[str, Any]) -> Outcome:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        ref = BackendRef(meta["name"], meta["namespace"], meta["uid"])
        old_status = obj.get("status") or {}
        conditions = Conditions(old_status.get("conditions"), meta.get("generation"))
        status: dict[str, Any] = {"observedGeneration": meta.get("generation"), "selector": selector_string(ref)}

        try:
            spec = LLMBackendSpec.model_validate(obj.get("spec") or {})
            model_cache = sync_model_cache(self.kube, ref.namespace, spec)  # uri sources only
            if model_cache is not None:
                spec = model_cache.spec  # with the checkpoint's architecture when the spec has none
                if model_cache_blocks_plan(model_cache, status, conditions):
                    self._finish(obj, ref, status, conditions, old_status)
                    return Outcome(requeue_after=None if model_cache.permanent else 15)
            resolve_architecture(spec.model)
        except (ValidationError, UnknownPresetError) as exc:
            reason = "UnknownPreset" if isinstance(exc, UnknownPresetError) else "InvalidSpec"
            message = str(exc) if isinstance(exc, UnknownPresetError) else _validation_message(exc)
            conditions.set(PLANNED, False, reason, message)
            conditions.set(DEGRADED, True, reason, message)
            self._finish(obj, ref, status, conditions, old_status)
            return Outcome()  # nothing to retry until the spec changes

        status["modelName"] = model_name(ref, spec)
        status["backend"] = spec.engine.backend
        nodes = self.state.inventory.nodes()
        fresh = plan_for_spec(spec, nodes)
        input_hash = spec_hash(spec)
        plan_status = self._sticky_plan(old_status, input_hash, conditions)
        if plan_status is None:
            if not fresh.fits:
                with self.state.lock:
                    self.state.waiting_for_capacity.add(key)
                conditions.set(PLANNED, False, fresh.reason, fresh.explanation)
                conditions.set(DEGRADED, True, fresh.reason, _first_line(fresh.explanation))
                if old_status.get("plan"):
                    status["plan"] = old_status["plan"]  # running replicas keep their plan; nothing is deleted
                self._finish(obj, ref, status, conditions, old_status)
                return Outcome()  # re-run by node events (waiting_for_capacity)
            plan_status = plan_status_from(fresh, input_hash)
        with self.state.lock:
            self.state.waiting_for_capacity.discard(key)
        status["plan"] = plan_status.dump()
        conditions.set(PLANNED, True, "Fits", plan_status.explanation or "plan chosen")

        multi_node = plan_status.nodes_per_replica > 1
        if multi_node and not self.kube.has_api(*MANAGED_KINDS["LeaderWorkerSet"]):
            message = (f"this plan needs {plan_status.nodes_per_replica} nodes per replica, served as a LeaderWorkerSet; "
                       "install LeaderWorkerSet (https://lws.sigs.k8s.io) and the operator retries")
            conditions.set(DEGRADED, True, "LeaderWorkerSetNotInstalled", message)
            conditions.set(AVAILABLE, False, "LeaderWorkerSetNotInstalled", message)
            self._finish(obj, ref, status, conditions, old_status)
            return Outcome(requeue_after=60)

        same_shape = fresh.fits and (fresh.tensor_parallel, fresh.pipeline_parallel, fresh.gpu_product) == (
            plan_status.tensor_parallel, plan_status.pipeline_parallel, plan_status.gpu_product)
        capacity = replicas_capacity(fresh, nodes, spec.scheduling.node_selector,
                                     [t.dump() for t in spec.scheduling.tolerations or []]) if same_shape else None
        workload_kind = "LeaderWorkerSet" if multi_node else "Deployment"
        live_workload = self.kube.get(workload_kind, ref.namespace, ref.name)
        replicas = self._replicas(key, spec, live_workload, status, capacity, plan_status, ref)
        spare = (capacity - (replicas or 0)) if capacity is not None else 0
        strategy, strategy_why = choose_rollout_strategy(replicas or 0, spare)
        status["rolloutStrategy"] = strategy.type

        previous_replicas = (live_workload or {}).get("spec", {}).get("replicas")
        hpa_mode = spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.HPA
        prometheus_rules = hpa_mode and self.kube.has_api(*PROMETHEUS_RULE_API)
        desired = desired_objects(ref, spec, plan_status, replicas if replicas is not None else 1, strategy, prometheus_rules)
        conflict = self._foreign_hpa(ref, workload_kind, live_workload, replicas)
        applied_any = False
        for child in desired:
            if conflict and child["kind"] == workload_kind:
                child["spec"].pop("replicas", None)  # one writer for replicas: do not fight the other HPA
            child["metadata"].setdefault("annotations", {})[APPLIED_HASH_ANNOTATION] = object_hash(child)
            live = live_workload if child["kind"] == workload_kind else self.kube.get(child["kind"], ref.namespace, child["metadata"]["name"])
            if live is None or not _up_to_date(child, live):
                applied = self.kube.apply(child)
                applied_any = True
                if child["kind"] == workload_kind:
                    live_workload = applied
        # The desired set only changes with the spec or the replica count (which re-applies the workload):
        # an unchanged pass skips the lookups for children to prune.
        if applied_any or old_status.get("observedGeneration") != meta.get("generation"):
            self._prune(ref, {(c["kind"], c["metadata"]["name"]) for c in desired})
        if spec.autoscaling.enabled and previous_replicas is not None and replicas is not None and replicas != previous_replicas:
            auto = status.get("autoscaling", {})
            self.event(obj, "Normal", "ScaledUp" if replicas > previous_replicas else "ScaledDown",
                       f"{workload_kind} {ref.name}: {previous_replicas} -> {replicas} replicas "
                       f"(ratio {auto.get('currentRatio', '?')}, {auto.get('reason', '')}: {auto.get('message', '')})")

        self._status_from_workload(ref, live_workload, replicas, capacity, plan_status, status, conditions, strategy_why)
        if model_cache is not None and model_cache.permanent:
            conditions.set(DEGRADED, True, model_cache.reason, model_cache.message)
        if conflict:
            conditions.set(DEGRADED, True, "ConflictingHorizontalPodAutoscaler",
                           f"HorizontalPodAutoscaler {conflict} also scales {workload_kind} {ref.name}; the operator stopped "
                           "writing its replicas. Delete that HPA, or use spec.autoscaling (mode operator or hpa) instead.")
        self._finish(obj, ref, status, conditions, old_status)
        # Keep watching a rollout; the watch on children also wakes us, this is the safety net.
        return Outcome(requeue_after=None if conditions.is_true(AVAILABLE) else 30)

    def _foreign_hpa(self, ref: BackendRef, workload_kind: str, live_workload, replicas: int | None) -> str | None:
        """Name of an HPA we do not own that targets our workload. Looked up only when replicas drifted."""
        live_replicas = (live_workload or {}).get("spec", {}).get("replicas")
        if live_workload is None or replicas is None or live_replicas == replicas:
            return None
        for hpa in self.kube.list("HorizontalPodAutoscaler", ref.namespace):
            target = hpa.get("spec", {}).get("scaleTargetRef", {})
            owned = any(o.get("uid") == ref.uid for o in hpa["metadata"].get("ownerReferences", []))
            if not owned and target.get("kind") == workload_kind and target.get("name") == ref.name:
                return hpa["metadata"]["name"]
        return None

    def _sticky_plan(self, old_status: dict[str, Any], input_hash: str, conditions: Conditions) -> PlanStatus | None:
        """Keep the plan chosen for this spec: node churn must not reshuffle running replicas."""
        old_plan = old_status.get("plan")
        if old_plan and old_plan.get("inputHash") == input_hash and conditions.is_true(PLANNED):
            try:
                return PlanStatus.model_validate(old_plan)
            except ValidationError:
                return None
        return None

    def _replicas(self, key, spec: LLMBackendSpec, live_workload, status, capacity, plan_status: PlanStatus, ref) -> int | None:
        autoscaling = spec.autoscaling
        if not autoscaling.enabled:
            with self.state.lock:
                self.state.autoscale_targets.pop(key, None)
            return spec.replicas
        live_replicas = (live_workload or {}).get("spec", {}).get("replicas")
        if autoscaling.mode == AutoscalingMode.HPA:
            message = "replicas are owned by the rendered HPA on the custom metric triton_queue_compute_ratio"
            if not self.kube.has_api(*PROMETHEUS_RULE_API):
                message += ("; no PrometheusRule CRD here: load the recording rule and the prometheus-adapter rule "
                            "printed by `llmbackend hpa-rules -f <this manifest>`")
            status["autoscaling"] = {"reason": "HorizontalPodAutoscaler", "message": message}
            return live_replicas
        with self.state.lock:
            decision = self.state.decisions.get(key)
        if decision is not None:
            replicas = decision.desired_replicas
        elif live_replicas is not None:
            replicas = live_replicas
        else:
            replicas = autoscaling.min_replicas
        replicas = max(autoscaling.min_replicas, min(autoscaling.max_replicas, replicas))
        with self.state.lock:
            self.state.autoscale_targets[key] = AutoscaleTarget(
                namespace=ref.namespace, name=ref.name, spec=autoscaling, scrape_model=metrics_model(ref, spec),
                selector=selector_string(ref), current_replicas=replicas, capacity_replicas=capacity,
                gpus_per_replica=plan_status.gpus_per_replica, max_batch_size=spec.engine.max_batch_size,
            )
        auto = {"desiredReplicas": replicas}
        if decision is not None:
            auto.update(currentRatio=decision.current_ratio, reason=decision.reason, message=decision.message,
                        lastScaleTime=decision.last_scale_time)
        else:
            auto.update(reason="AwaitingMetrics", message="no decision yet: waiting for a full window of Triton metrics")
        status["autoscaling"] = {k: v for k, v in auto.items() if v is not None}
        return replicas

    def _prune(self, ref: BackendRef, desired: set[tuple[str, str]]) -> None:
        """Delete owned children of the managed kinds that are no longer desired (e.g. PDB after scale to 1)."""
        for kind in MANAGED_KINDS:
            name = config_map_name(ref) if kind == "ConfigMap" else ref.name
            if (kind, name) in desired:
                continue
            if kind in ("LeaderWorkerSet", "PrometheusRule") and not self.kube.has_api(*MANAGED_KINDS[kind]):
                continue
            live = self.kube.get(kind, ref.namespace, name)
            if live and any(o.get("uid") == ref.uid for o in live["metadata"].get("ownerReferences", [])):
                log.info("deleting %s %s/%s: no longer desired", kind, ref.namespace, name)
                self.kube.delete(kind, ref.namespace, name, uid=live["metadata"]["uid"])

    def _status_from_workload(self, ref, workload, replicas, capacity, plan_status, status, conditions, strategy_why) -> None:
        ws = (workload or {}).get("status", {})
        want = replicas if replicas is not None else (workload or {}).get("spec", {}).get("replicas", 0)
        ready = ws.get("readyReplicas", 0) or 0
        updated = ws.get("updatedReplicas", 0) or 0
        current = ws.get("replicas", 0) or 0
        observed = ws.get("observedGeneration", 0) >= (workload or {}).get("metadata", {}).get("generation", 1)
        status["replicas"] = want
        status["readyReplicas"] = ready
        status["endpoint"] = {"service": f"{ref.name}.{ref.namespace}.svc", "httpPort": triton.HTTP_PORT,
                              "grpcPort": triton.GRPC_PORT, "metricsPort": triton.METRICS_PORT}
        rolled_out = observed and updated >= want and ready >= want and current <= want
        if want == 0:
            conditions.set(AVAILABLE, False, "ScaledToZero", "replicas is 0")
        elif rolled_out:
            conditions.set(AVAILABLE, True, "ReplicasReady", f"{ready}/{want} replicas ready on the current spec")
        else:
            conditions.set(AVAILABLE, False, "ReplicasNotReady", f"{ready}/{want} replicas ready, {updated} on the current spec")
        if rolled_out or want == 0:
            conditions.set(PROGRESSING, False, "RolloutComplete", f"rollout strategy {status['rolloutStrategy']}: {strategy_why}")
        else:
            conditions.set(PROGRESSING, True, "RollingOut", f"{updated}/{want} updated, {ready} ready; strategy {status['rolloutStrategy']}: {strategy_why}")

        degraded = None
        if capacity is not None and want > capacity:
            degraded = ("InsufficientGPUs", f"{want} replicas need {want * plan_status.gpus_per_replica} x {plan_status.gpu_product} "
                        f"GPUs ({plan_status.gpus_per_replica} per replica); the matching nodes hold {capacity} replicas")
        if not rolled_out and want > 0:
            degraded = self._pod_problem(ref) or degraded
        for cond in ws.get("conditions", []):
            if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
                degraded = ("ProgressDeadlineExceeded", cond.get("message", ""))
        if degraded:
            conditions.set(DEGRADED, True, *degraded)
        else:
            conditions.set(DEGRADED, False, "AsExpected", "")

    def _pod_problem(self, ref: BackendRef) -> tuple[str, str] | None:
        """Why serving pods do not run: the scheduler's or the kubelet's words."""
        for pod in self.kube.list("Pod", ref.namespace, label_selector=selector_string(ref)):
            for cond in pod.get("status", {}).get("conditions", []):
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
                    return "Unschedulable", f"pod {pod['metadata']['name']}: {cond.get('message', '')}"
            for cs in pod.get("status", {}).get("containerStatuses", []) + pod.get("status", {}).get("initContainerStatuses", []):
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in FATAL_WAITING_REASONS:
                    return ("ImagePullFailed" if "Image" in waiting["reason"] else waiting["reason"],
                            f"pod {pod['metadata']['name']} container {cs.get('name')}: {waiting.get('message', waiting['reason'])}")
        return None

    # ---- status and events ----

    def _finish(self, obj, ref: BackendRef, status: dict[str, Any], conditions: Conditions, old_status: dict[str, Any]) -> None:
        status["conditions"] = conditions.to_list()
        patch = merge_patch(old_status, status)
        if patch:
            try:
                self.kube.patch_status("LLMBackend", ref.namespace, ref.name, patch,
                                       resource_version=obj["metadata"]["resourceVersion"])
            except ApiError as exc:
                if exc.status == 409:  # the CR changed meanwhile; the watch brings us back
                    return
                raise
        for cond in conditions.changed():
            if cond["type"] == PROGRESSING or (cond["type"] == DEGRADED and cond["status"] == "False"):
                continue  # routine; the other transitions are worth an event
            warn = cond["type"] == DEGRADED or (cond["type"] == PLANNED and cond["status"] == "False")
            self.event(obj, "Warning" if warn else "Normal", cond["reason"], _first_line(cond["message"]) or cond["reason"])

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = now_rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"],
                               "resourceVersion": meta.get("resourceVersion")},
            "type": type_, "reason": reason[:128], "message": message[:1024],
            "source": {"component": EVENT_SOURCE}, "reportingComponent": EVENT_SOURCE,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.kube.create(event)
        except ApiError as exc:  # events are best effort
            log.warning("could not post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc)


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 patch turning `old` into `new`: fields no longer reported are nulled, at any depth."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch


def _up_to_date(desired: dict[str, Any], live: dict[str, Any]) -> bool:
    annotations = live.get("metadata", {}).get("annotations") or {}
    if annotations.get(APPLIED_HASH_ANNOTATION) != desired["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]:
        return False
    # Someone else may have changed a field we own since: compare what we set.
    return is_subset({k: v for k, v in desired.items() if k not in ("status",)}, live)


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        location = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"spec.{location}: {error.get('msg')}")
    return "; ".join(parts)
