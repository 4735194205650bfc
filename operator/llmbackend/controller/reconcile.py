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

from ..api import conditions as cond
from ..api.catalog import UnknownPresetError, resolve_architecture
from ..api.engine_metrics import RECORDING_RULE_NAME
from ..api.v1alpha1 import AutoscalingMode, LLMBackendSpec, PlanStatus
from ..planning.inventory import Inventory
from ..planning.planner import Plan, plan_for_spec, replicas_capacity
from ..render import openai, triton
from ..render.multinode import (
    KUEUE_API,
    VOLCANO_API,
    choose_gang_scheduler,
    group_problem,
    multi_node_spec,
    needs_compute_domain,
)
from ..render.vllm_backend import EngineConfigError
from ..render.workloads import (
    BACKEND_LABEL,
    CHECKPOINT_CHECK_CONTAINER,
    MANAGED_KINDS,
    OPTIONAL_KINDS,
    PROMETHEUS_RULE_API,
    BackendRef,
    choose_rollout_strategy,
    desired_objects,
    metrics_model,
    model_name,
    owned_names,
    selector_string,
)
from . import permissions
from .conditions import AVAILABLE, DEGRADED, PLANNED, PROGRESSING, Conditions, now_rfc3339
from .kube import ApiError, Kube
from .modelcache import model_cache_blocks_plan, sync_model_cache

log = logging.getLogger("llmbackend.reconcile")

APPLIED_HASH_ANNOTATION = "llmbackend.dev/applied-hash"
EVENT_SOURCE = "llmbackend-operator"
CHECKPOINT_INVALID = "CheckpointInvalid"  # reason: the checkpoint check init container failed
KEDA_NOT_INSTALLED = "KEDANotInstalled"  # reason: autoscaling.mode keda without KEDA's ScaledObject CRD
# Waiting container reasons that mean the pod will not start without a change.
FATAL_WAITING_REASONS = {
    "ErrImagePull": cond.IMAGE_PULL_FAILED, "ImagePullBackOff": cond.IMAGE_PULL_FAILED,
    "InvalidImageName": cond.IMAGE_PULL_FAILED, "CreateContainerConfigError": cond.CREATE_CONTAINER_CONFIG_ERROR,
    "CrashLoopBackOff": cond.CRASH_LOOP_BACK_OFF,
}

permissions.require("", "events", "create")
permissions.require("autoscaling", "horizontalpodautoscalers", "list")  # conflict detection
# Never used by the operator itself: the API server lets it create the multi-node leaders' Role
# (pods get + pods/exec create, see render/multinode.py) only if it holds those permissions
# (RBAC escalation prevention). The alternative, `escalate` on roles, would let it grant anything.
permissions.require("", "pods/exec", "create")


@dataclass
class ScaleDecision:
    """What the autoscaler last decided for a backend (written by the autoscaler loop)."""

    desired_replicas: int
    reason: str
    message: str
    current_ratio: str | None
    last_scale_time: str | None
    extra: dict[str, Any] = field(default_factory=dict)  # more status.autoscaling fields (signal, in flight, cold start)


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
                return CHECKPOINT_INVALID, f"pod {pod['metadata']['name']}: {message or 'the checkpoint check failed'}"
    return None


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
        """One pass: every path sets all four conditions for this generation; ONE status write at the end."""
        meta = obj["metadata"]
        ref = BackendRef(meta["name"], meta["namespace"], meta["uid"])
        old_status = obj.get("status") or {}
        conditions = Conditions(old_status.get("conditions"), meta.get("generation"))
        status: dict[str, Any] = {"observedGeneration": meta.get("generation"), "selector": selector_string(ref)}
        try:
            outcome = self._converge(obj, ref, old_status, status, conditions)
        except ApiError as exc:
            _api_failure(conditions, exc)
            try:
                self._finish(obj, ref, status, conditions, old_status)
            except ApiError:
                pass  # the API server is failing us; the original error below is retried with backoff
            raise
        self._finish(obj, ref, status, conditions, old_status)
        return outcome

    def _converge(self, obj: dict[str, Any], ref: BackendRef, old_status: dict[str, Any], status: dict[str, Any],
                  conditions: Conditions) -> Outcome:
        meta = obj["metadata"]
        key = (ref.namespace, ref.name)
        try:
            spec = LLMBackendSpec.model_validate(obj.get("spec") or {})
            model_cache = sync_model_cache(self.kube, ref.namespace, spec)  # uri sources only
            if model_cache is not None:
                spec = model_cache.spec  # with the checkpoint's architecture when the spec has none
                if model_cache_blocks_plan(model_cache, status, conditions):
                    if model_cache.permanent:
                        _not_served(conditions, model_cache.reason, model_cache.message)
                    else:  # downloading: nothing is wrong yet, the checkpoint is on its way
                        conditions.set(AVAILABLE, False, cond.NOT_PLANNED, "waiting for the checkpoint (see ModelReady)")
                        conditions.set(PROGRESSING, True, model_cache.reason, model_cache.message)
                        conditions.set(DEGRADED, False, model_cache.reason, "")
                    return Outcome(requeue_after=None if model_cache.permanent else 15)
            resolve_architecture(spec.model)
        except (ValidationError, UnknownPresetError) as exc:
            if isinstance(exc, UnknownPresetError):
                reason, message = cond.UNKNOWN_PRESET, (f"{exc}; set spec.model.preset to a catalog entry "
                                                       "(`llmbackend presets`) or give spec.model.architecture")
            else:
                reason, message = cond.INVALID_SPEC, f"{_validation_message(exc)}; fix these fields of the spec"
            conditions.set(PLANNED, False, reason, message)
            _not_served(conditions, reason, message)
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
                _not_served(conditions, fresh.reason,
                            f"{_first_line(fresh.explanation)}; change the spec (model, quantization, parallelism, "
                            "scheduling) or add nodes that fit: the operator re-plans when nodes change")
                if old_status.get("plan"):
                    status["plan"] = old_status["plan"]  # running replicas keep their plan; nothing is deleted
                return Outcome()  # re-run by node events (waiting_for_capacity)
            plan_status = plan_status_from(fresh, input_hash)
        with self.state.lock:
            self.state.waiting_for_capacity.discard(key)
        status["plan"] = plan_status.dump()
        conditions.set(PLANNED, True, cond.FITS, plan_status.explanation or "plan chosen")

        multi_node = plan_status.nodes_per_replica > 1
        if multi_node and not self.kube.has_api(*MANAGED_KINDS["LeaderWorkerSet"]):
            message = (f"this plan needs {plan_status.nodes_per_replica} nodes per replica, served as a LeaderWorkerSet; "
                       "install LeaderWorkerSet (https://lws.sigs.k8s.io) and the operator retries within a minute, "
                       "or change the spec so one node holds a replica")
            _not_served(conditions, cond.LEADER_WORKER_SET_NOT_INSTALLED, message)
            return Outcome(requeue_after=60)
        compute_domains = needs_compute_domain(plan_status) and self.kube.has_api(*MANAGED_KINDS["ComputeDomain"])
        if needs_compute_domain(plan_status) and not compute_domains and not multi_node_spec(spec).allow_cross_node_nvlink_without_compute_domain:
            message = (f"tensor parallelism spans {plan_status.nodes_per_replica} nodes of a multi-node NVLink clique "
                       "(GB200/GB300), which needs an IMEX channel per group: install NVIDIA's DRA driver for GPUs with "
                       "ComputeDomains (resource.nvidia.com), or set spec.scheduling.multiNode."
                       "allowCrossNodeNvlinkWithoutComputeDomain: true if IMEX is provisioned outside Kubernetes")
            _not_served(conditions, "ComputeDomainNotInstalled", message)
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
        scaler_mode = spec.autoscaling.enabled and spec.autoscaling.mode in (AutoscalingMode.HPA, AutoscalingMode.KEDA)
        prometheus_rules = scaler_mode and self.kube.has_api(*PROMETHEUS_RULE_API)
        keda_missing = (spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.KEDA
                        and not self.kube.has_api(*MANAGED_KINDS["ScaledObject"]))
        inference_pool = openai.enabled(spec) and self.kube.has_api(*MANAGED_KINDS["InferencePool"])
        gang = choose_gang_scheduler(spec, self.kube.has_api(*VOLCANO_API), self.kube.has_api(*KUEUE_API)) if multi_node else None
        try:
            desired = desired_objects(ref, spec, plan_status, replicas if replicas is not None else 1, strategy, prometheus_rules,
                                      compute_domains, gang, scaled_objects=not keda_missing, inference_pool=inference_pool)
        except EngineConfigError as exc:  # e.g. a quantization the checkpoint contradicts: nothing to apply until the spec changes
            _not_served(conditions, exc.reason, str(exc))
            return Outcome()
        lives = {(c["kind"], c["metadata"]["name"]):
                 live_workload if c["kind"] == workload_kind and c["metadata"]["name"] == ref.name
                 else self.kube.get(c["kind"], ref.namespace, c["metadata"]["name"]) for c in desired}
        foreign = [f"{kind} {ref.namespace}/{name}" for (kind, name), live in lives.items()
                   if live is not None and not _controlled_by(live, ref)]
        if foreign:  # never adopt: someone else's object keeps every field it has
            with self.state.lock:
                self.state.autoscale_targets.pop(key, None)
            _not_served(conditions, cond.RESOURCE_EXISTS,
                        f"{', '.join(foreign)} already exists and is not controlled by this LLMBackend; the operator "
                        "changes nothing of it. Delete or rename it, or give this LLMBackend another name")
            return Outcome(requeue_after=60)  # nothing of ours is watched on it: look again
        conflict = self._foreign_hpa(ref, workload_kind, live_workload, replicas)
        applied_any = False
        for child in desired:
            is_workload = child["kind"] == workload_kind and child["metadata"]["name"] == ref.name
            if conflict and is_workload:
                child["spec"].pop("replicas", None)  # one writer for replicas: do not fight the other HPA
            child["metadata"].setdefault("annotations", {})[APPLIED_HASH_ANNOTATION] = object_hash(child)
            live = lives[(child["kind"], child["metadata"]["name"])]
            if live is None or not _up_to_date(child, live):
                try:
                    applied = self.kube.apply(child)
                except ApiError as exc:
                    raise ApiError(exc.status, exc.reason,
                                   f"applying {child['kind']} {child['metadata']['name']}: {exc.message}") from exc
                applied_any = True
                if is_workload:
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

        self._status_from_workload(ref, spec, live_workload, replicas, capacity, plan_status, status, conditions, strategy_why)
        if openai.enabled(spec):
            status["endpoint"]["openaiPort"] = openai.OPENAI_PORT
        if keda_missing:
            conditions.set(DEGRADED, True, KEDA_NOT_INSTALLED,
                           "autoscaling.mode keda needs KEDA's ScaledObject CRD (keda.sh/v1alpha1); install KEDA "
                           "(https://keda.sh) and the operator renders the ScaledObject, or use mode operator or hpa")
        if model_cache is not None and model_cache.permanent:
            conditions.set(DEGRADED, True, model_cache.reason, model_cache.message)
        if conflict:
            conditions.set(DEGRADED, True, cond.CONFLICTING_HPA,
                           f"HorizontalPodAutoscaler {conflict} also scales {workload_kind} {ref.name}; the operator stopped "
                           "writing its replicas. Delete that HPA, or use spec.autoscaling (mode operator or hpa) instead.")
        # Keep watching a rollout; the watch on children also wakes us, this is the safety net.
        return Outcome(requeue_after=None if conditions.is_true(AVAILABLE) and not conditions.is_true(PROGRESSING) else 30)

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
            message = "replicas are owned by the rendered HPA on the custom metric llmbackend_engine_queue_compute_ratio (the engine queue/compute ratio)"
            if not self.kube.has_api(*PROMETHEUS_RULE_API):
                message += ("; no PrometheusRule CRD here: load the recording rule and the prometheus-adapter rule "
                            "printed by `llmbackend hpa-rules -f <this manifest>`")
            status["autoscaling"] = {"reason": "HorizontalPodAutoscaler", "message": message}
            return live_replicas
        if autoscaling.mode == AutoscalingMode.KEDA:
            status["autoscaling"] = {"reason": "ScaledObject", "message": (
                f"replicas are owned by KEDA (ScaledObject with a Prometheus trigger on {RECORDING_RULE_NAME}); "
                "the recording rule must be loaded in that Prometheus")}
            with self.state.lock:
                self.state.autoscale_targets.pop(key, None)
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
                        lastScaleTime=decision.last_scale_time, **decision.extra)
        else:
            auto.update(reason="AwaitingMetrics", message="no decision yet: waiting for a full window of engine metrics")
        status["autoscaling"] = {k: v for k, v in auto.items() if v is not None}
        return replicas

    def _prune(self, ref: BackendRef, desired: set[tuple[str, str]]) -> None:
        """Delete owned children of the managed kinds that are no longer desired (e.g. PDB after scale to 1)."""
        for kind, name in owned_names(ref):
            if (kind, name) in desired:
                continue
            if kind in OPTIONAL_KINDS and not self.kube.has_api(*MANAGED_KINDS[kind]):
                continue
            live = self.kube.get(kind, ref.namespace, name)
            if live and any(o.get("uid") == ref.uid for o in live["metadata"].get("ownerReferences", [])):
                log.info("deleting %s %s/%s: no longer desired", kind, ref.namespace, name)
                self.kube.delete(kind, ref.namespace, name, uid=live["metadata"]["uid"])

    def _status_from_workload(self, ref, spec: LLMBackendSpec, workload, replicas, capacity, plan_status, status,
                              conditions, strategy_why) -> None:
        ws = (workload or {}).get("status", {})
        want = replicas if replicas is not None else (workload or {}).get("spec", {}).get("replicas", 0)
        ready = ws.get("readyReplicas", 0) or 0
        updated = ws.get("updatedReplicas", 0) or 0
        current = ws.get("replicas", 0) or 0
        generation = (workload or {}).get("metadata", {}).get("generation", 1)
        # LeaderWorkerSet reports no observedGeneration; its updated/ready group counts are the signal.
        lws = (workload or {}).get("kind") == "LeaderWorkerSet"
        observed = ws.get("observedGeneration", generation if lws else 0) >= generation
        status["replicas"] = want
        status["readyReplicas"] = ready
        status["endpoint"] = {"service": f"{ref.name}.{ref.namespace}.svc", "httpPort": triton.HTTP_PORT,
                              "grpcPort": triton.GRPC_PORT, "metricsPort": triton.METRICS_PORT}
        rolled_out = observed and updated >= want and ready >= want and current <= want
        strategy = f"rollout strategy {status['rolloutStrategy']}: {strategy_why}"
        if want == 0 and spec.autoscaling.enabled:
            # As a Deployment at 0 replicas is Available: the desired state is reached, on purpose.
            conditions.set(AVAILABLE, True, cond.SCALED_TO_ZERO,
                           f"idle: autoscaling scaled to 0 replicas (minReplicas {spec.autoscaling.min_replicas}); nothing "
                           "is served and a backend at 0 has no metrics to scale up on: raise "
                           "spec.autoscaling.minReplicas to serve")
        elif want == 0:
            conditions.set(AVAILABLE, True, cond.ZERO_REPLICAS,
                           "spec.replicas is 0: nothing is served, on purpose; set spec.replicas (or enable autoscaling) to serve")
        elif rolled_out:
            conditions.set(AVAILABLE, True, cond.REPLICAS_READY, f"{ready}/{want} replicas ready on the current spec")
        else:
            conditions.set(AVAILABLE, False, cond.REPLICAS_NOT_READY,
                           f"{ready}/{want} replicas ready, {updated} on the current spec; see Degraded if this persists")
        if rolled_out or want == 0:
            conditions.set(PROGRESSING, False, cond.ROLLOUT_COMPLETE, strategy)
        else:
            conditions.set(PROGRESSING, True, cond.ROLLING_OUT, f"{updated}/{want} updated, {ready} ready; {strategy}")

        degraded = None
        if capacity is not None and want > capacity:
            degraded = (cond.INSUFFICIENT_GPUS,
                        f"{want} replicas need {want * plan_status.gpus_per_replica} x {plan_status.gpu_product} "
                        f"GPUs ({plan_status.gpus_per_replica} per replica); the matching nodes hold {capacity} replicas: "
                        "lower the replicas (or maxReplicas) or add GPU nodes")
        if not rolled_out and want > 0:
            degraded = self._pod_problem(ref) or degraded
            if plan_status.nodes_per_replica > 1:  # workers are not "server" pods: look at whole groups
                pods = self.kube.list("Pod", ref.namespace, label_selector=f"{BACKEND_LABEL}={ref.name}")
                degraded = group_problem(pods, plan_status.nodes_per_replica, FATAL_WAITING_REASONS) or degraded
        for condition in ws.get("conditions", []):
            if condition.get("type") == "Progressing" and condition.get("reason") == cond.PROGRESS_DEADLINE_EXCEEDED:
                degraded = (cond.PROGRESS_DEADLINE_EXCEEDED,
                            f"{condition.get('message', '')}; see the serving pods' events (kubectl describe pods)")
        if degraded:
            conditions.set(DEGRADED, True, *degraded)
        else:
            conditions.set(DEGRADED, False, cond.AS_EXPECTED, "")

    def _pod_problem(self, ref: BackendRef) -> tuple[str, str] | None:
        """Why serving pods do not run: the scheduler's or the kubelet's words."""
        for pod in self.kube.list("Pod", ref.namespace, label_selector=selector_string(ref)):
            invalid = checkpoint_check_failure(pod)
            if invalid:
                return invalid
            name = pod["metadata"]["name"]
            for c in pod.get("status", {}).get("conditions", []):
                if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                    return cond.UNSCHEDULABLE, (f"pod {name}: {c.get('message', '')}; change spec.scheduling or "
                                                "free or add matching nodes")
            for cs in pod.get("status", {}).get("containerStatuses", []) + pod.get("status", {}).get("initContainerStatuses", []):
                waiting = (cs.get("state") or {}).get("waiting") or {}
                why = waiting.get("reason")
                if why in FATAL_WAITING_REASONS:
                    reason = FATAL_WAITING_REASONS[why]
                    return reason, (f"pod {name} container {cs.get('name')}: {waiting.get('message', why)}; "
                                    f"see `kubectl describe pod {name}` and its logs")
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
        for c in conditions.changed():
            if c["type"] == PROGRESSING or c["status"] == "Unknown" or (c["type"] == DEGRADED and c["status"] == "False"):
                continue  # routine (or unknown); the other transitions are worth an event
            warn = c["type"] == DEGRADED or (c["type"] == PLANNED and c["status"] == "False")
            self.event(obj, "Warning" if warn else "Normal", c["reason"], _first_line(c["message"]) or c["reason"])

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


def _controlled_by(obj: dict[str, Any], ref: BackendRef) -> bool:
    return any(o.get("uid") == ref.uid and o.get("controller") for o in obj["metadata"].get("ownerReferences") or [])


def _not_served(conditions: Conditions, reason: str, message: str) -> None:
    """A pass that stops before the workload (PLANNED already set): the current spec is not served, so nothing
    rolls out until someone changes the spec or the cluster; Degraded carries the cause and what to do."""
    why = reason if conditions.is_true(PLANNED) else cond.NOT_PLANNED
    conditions.set(AVAILABLE, False, why, "the current spec is not served (see Degraded); replicas of an earlier "
                   "spec, if any, keep running unchanged")
    conditions.set(PROGRESSING, False, why, "nothing rolls out until the cause in Degraded is fixed")
    conditions.set(DEGRADED, True, reason, message)


def _api_failure(conditions: Conditions, exc: ApiError) -> None:
    """A request of this pass failed: what the pass knows is kept, the rest is Unknown; the pass is retried."""
    if not conditions.is_set(PLANNED):
        conditions.set(PLANNED, "Unknown", cond.API_REQUEST_FAILED, "not evaluated: an API request failed (see Degraded)")
    conditions.set(AVAILABLE, "Unknown", cond.API_REQUEST_FAILED, "not known: an API request failed (see Degraded)")
    conditions.set(PROGRESSING, False, cond.API_REQUEST_FAILED, "stopped: an API request failed (see Degraded)")
    conditions.set(DEGRADED, True, cond.API_REQUEST_FAILED,
                   f"{exc.status} {exc.reason}: {exc.message}; the operator retries with backoff. If it persists, "
                   "check the namespace's ResourceQuota and LimitRange, admission webhooks and the operator's RBAC")
