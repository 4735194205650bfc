"""A backend's status from its serving workload and pods: Available, Progressing and Degraded, replicas and the
endpoint; which pods are of the current pod templates (the template hash each carries). Pure, for decide.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..api import conditions as cond
from ..api.v1alpha1 import EndpointStatus, LLMBackendSpec, PlanStatus
from ..render import activator, triton
from ..render.multinode import group_problem
from ..render.names import BackendRef, selector_for, serving_pod_ready
from .conditions import AVAILABLE, DEGRADED, PROGRESSING, deadline_at, seconds_left
from .digest import object_hash
from .passdata import Decision, Observed
from .pods import FATAL_WAITING_REASONS, PodProblem, claim_problem, model_claim, pod_problem

TEMPLATE_HASH_ANNOTATION = "llmbackend.dev/template-hash"  # on each serving pod template: see stamp_template_hashes


def status_from_workload(observed: Observed, ref: BackendRef, spec: LLMBackendSpec, workload: dict[str, Any] | None,
                          workload_changes: bool, replicas: int | None, capacity: int | None,
                          plan_status: PlanStatus, strategy_why: str, decision: Decision,
                          current_templates: set[str] | None = None) -> None:
    conditions, status = decision.conditions, decision.status
    ws = (workload or {}).get("status", {})
    want = replicas if replicas is not None else (workload or {}).get("spec", {}).get("replicas", 0)
    ready = ws.get("readyReplicas", 0) or 0
    updated = ws.get("updatedReplicas", 0) or 0
    current = ws.get("replicas", 0) or 0
    generation = (workload or {}).get("metadata", {}).get("generation", 1)
    # LeaderWorkerSet reports no observedGeneration; its updated/ready group counts are the signal.
    lws = (workload or {}).get("kind") == "LeaderWorkerSet"
    observed_generation = ws.get("observedGeneration", generation if lws else 0) >= generation
    status.replicas = want
    status.ready_replicas = ready
    status.endpoint = EndpointStatus(service=f"{ref.name}.{ref.namespace}.svc", http_port=triton.HTTP_PORT,
                                     grpc_port=triton.GRPC_PORT, metrics_port=triton.METRICS_PORT)
    # A workload this pass changes is rolling out whatever its status said before the change.
    rolled_out = (not workload_changes and observed_generation and updated >= want and ready >= want
                  and current <= want)
    strategy = f"rollout strategy {status.rollout_strategy}: {strategy_why}"
    if want == 0 and activator.enabled(spec):
        conditions.set(AVAILABLE, True, cond.SCALED_TO_ZERO,
                       f"idle: autoscaling scaled to 0 replicas (minReplicas 0); requests sent to Service {ref.name} "
                       f"wait at {activator.deployment_name(ref.name)}, and the first one scales to 1 (raise "
                       "spec.autoscaling.minReplicas to keep a replica)")
    elif want == 0 and spec.autoscaling.enabled:
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
        # Only pods of the current spec say why it does not run: a pod of an earlier spec goes with the rollout.
        pods = current_pods(observed.pods, current_templates or set())
        claim = model_claim(spec, observed.model_cache)
        problem = pod_problem(pods, ref, claim)
        if plan_status.nodes_per_replica > 1:  # workers are not "server" pods: look at whole groups
            group = group_problem(pods, plan_status.nodes_per_replica, set(FATAL_WAITING_REASONS))
            problem = claim_problem(pods, claim) or (PodProblem(*group) if group is not None else problem)
        if problem is not None and decision.placement_note:
            problem = dataclasses.replace(problem, message=f"{problem.message}; {decision.placement_note}")
        if problem is not None and problem.since is not None:  # waiting on the scheduler: progress until the deadline
            deadline = spec.serving.progress_deadline_seconds
            left = seconds_left(problem.since, observed.now, deadline)
            if left > 0:
                conditions.set(PROGRESSING, True, problem.waiting_reason,
                               f"{problem.message}; waiting until {deadline_at(problem.since, deadline)} "
                               f"(spec.serving.progressDeadlineSeconds {deadline}s), then Degraded")
                decision.requeue_within(left + 1)
                problem = None
            else:
                problem = dataclasses.replace(problem, message=f"{problem.message} (pending for more than "
                                              f"spec.serving.progressDeadlineSeconds, {deadline}s)")
        degraded = (problem.reason, problem.message) if problem is not None else degraded
    for condition in ws.get("conditions", []):
        if condition.get("type") == "Progressing" and condition.get("reason") == cond.PROGRESS_DEADLINE_EXCEEDED:
            degraded = (cond.PROGRESS_DEADLINE_EXCEEDED,
                        f"{condition.get('message', '')}; see the serving pods' events (kubectl describe pods)")
    if degraded:
        conditions.set(DEGRADED, True, *degraded)
    else:
        conditions.set(DEGRADED, False, cond.AS_EXPECTED, "nothing needs a change")


def serving_ready(observed: Observed, ref: BackendRef) -> bool:
    """A serving pod (a leader, for multi-node) is Ready and not terminating: the Service may select them."""
    selector = selector_for(ref)
    return any(selector.items() <= (p["metadata"].get("labels") or {}).items() and serving_pod_ready(p)
               for p in observed.pods)


def pod_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a serving workload (a Deployment's; a LeaderWorkerSet's leader and worker)."""
    spec = workload.get("spec") or {}
    if workload.get("kind") == "LeaderWorkerSet":
        group = spec.get("leaderWorkerTemplate") or {}
        return [t for t in (group.get("leaderTemplate"), group.get("workerTemplate")) if t]
    return [spec["template"]] if spec.get("template") else []


def stamp_template_hashes(workload: dict[str, Any]) -> set[str]:
    """Annotate each pod template with a hash of itself; its pods carry it, so a pass tells the pods of the current
    spec from those of an earlier one (a rollout in flight, a pod that never started). The hash changes only when
    the template does, so it rolls nothing by itself. Returns the hashes."""
    hashes = set()
    for template in pod_templates(workload):
        annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
        annotations.pop(TEMPLATE_HASH_ANNOTATION, None)
        annotations[TEMPLATE_HASH_ANNOTATION] = object_hash(template)
        hashes.add(annotations[TEMPLATE_HASH_ANNOTATION])
    return hashes


def current_pods(pods: list[dict[str, Any]], template_hashes: set[str]) -> list[dict[str, Any]]:
    """The pods of the current pod templates. A pod without the annotation (made by an operator before it
    existed) counts as current: its workload rolls to the annotated template, which replaces it."""
    def current(pod: dict[str, Any]) -> bool:
        stamped = ((pod.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)
        return stamped is None or stamped in template_hashes
    return [p for p in pods if current(p)]
