"""The decision of one reconcile pass, with no I/O: what the operator observed in, what it wants out.

`decide(Observed) -> Decision`: the children to apply and prune, the status (typed: api/v1alpha1.py's
models), the conditions, the events, the autoscaler's target and when to look again. reconcile.py
observes (reads, answered by the watch caches) and acts (writes); this module only decides, so every
path of a pass is unit-tested on plain data (tests/unit/test_decide.py). Its parts: passdata.py (what a pass reads
and decides), workloadstatus.py (status from the serving workload and pods), groupnames.py (the names a multi-node
backend's new groups take).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ..api import conditions as cond
from ..api.catalog import UnknownPresetError, resolve_architecture
from ..api.engine_metrics import RECORDING_RULE_NAME
from ..api.v1alpha1 import (
    SOURCE_REQUIRED_MESSAGE,
    AdapterStatus,
    AutoscalingMode,
    AutoscalingStatus,
    Condition,
    LLMBackendSpec,
    LLMBackendStatus,
    ModelStatus,
    Placement,
    PlanStatus,
    ScalerMemory,
    name_ends_with_group_index,
)
from ..autoscaling.drain import drain_warning
from ..autoscaling.pool import NOT_CLAIMED
from ..model_fetch import FetchError
from ..planning.capacity import free_view, gpu_pool, gpu_pool_nodes, replicas_capacity
from ..planning.inventory import GPUNode
from ..planning.planner import Plan, plan_for_spec
from ..planning.podfit import gpus_held_by_node, unplaceable
from ..render import activator, openai
from ..render.drain import drain_seconds
from ..render.multinode import (
    KUEUE_API,
    VOLCANO_API,
    choose_gang_scheduler,
    multi_node_spec,
    needs_compute_domain,
)
from ..render.names import (
    MANAGED_KINDS,
    OPTIONAL_KINDS,
    BackendRef,
    activator_selector,
    label_selector,
    metrics_model,
    model_name,
    selector_string,
)
from ..render.vllm_backend import EngineConfigError
from ..render.workloads import choose_rollout_strategy, desired_objects
from . import groupnames
from .adapters import adapters_problem, ready_adapters
from .conditions import (
    AVAILABLE,
    DEGRADED,
    PLANNED,
    PROGRESSING,
    Conditions,
    deadline_at,
    event_type,
    now_rfc3339,
    seconds_left,
    summarize,
)
from .digest import is_summarized, object_hash, summarize_data
from .egress import PROMETHEUS_URLS_ENV, allowed, query_refusal
from .modelcache import MODEL_READY, WAITING_FOR_CHECKPOINT, ModelCacheResult, downloader_image
from .passdata import AutoscaleTarget, Decision, Observed, ScaleDecision
from .pods import pod_problem
from .workloadstatus import (
    serving_ready,
    stamp_template_hashes,
    status_from_workload,
)

APPLIED_HASH_ANNOTATION = "llmbackend.dev/applied-hash"
# Optional APIs a pass asks about, by name: (apiVersion, plural). Observe reports which are served.
OPTIONAL_APIS: dict[str, tuple[str, str]] = {
    **{kind: MANAGED_KINDS[kind] for kind in OPTIONAL_KINDS},
    "Volcano": VOLCANO_API,
    "Kueue": KUEUE_API,
}
ROLLOUT_REQUEUE_S = 30.0  # safety net while a rollout runs (the watches on children wake us first)
OPTIONAL_API_REQUEUE_S = 60.0  # a missing CRD: installing it sends no event to this backend
DOWNLOAD_REQUEUE_S = 15.0


class _Stop(Exception):
    """A step ended the pass early; the decision so far is complete."""


def spec_hash(spec: LLMBackendSpec) -> str:
    """Hash of the fields that decide the plan (not replicas or autoscaling)."""
    wire = spec.dump()
    planning_input = {k: wire.get(k) for k in ("model", "engine", "parallelism", "scheduling")}
    return hashlib.sha256(json.dumps(planning_input, sort_keys=True).encode()).hexdigest()[:16]


def is_subset(desired: Any, live: Any) -> bool:
    """Every field we set has that value live (server defaults may add fields; lists must match in length)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(k in live and is_subset(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(is_subset(d, x) for d, x in zip(desired, live))
    return desired == live


def plan_status_from(plan: Plan, input_hash: str) -> PlanStatus:
    return PlanStatus.model_validate({**plan.to_status(), "inputHash": input_hash})


def controlled_by(obj: dict[str, Any], ref: BackendRef) -> bool:
    return any(o.get("uid") == ref.uid and o.get("controller") for o in obj["metadata"].get("ownerReferences") or [])


def decide(observed: Observed) -> Decision:
    """One pass: every path sets all four conditions for this generation."""
    obj = observed.obj
    meta = obj["metadata"]
    ref = observed.ref
    old_status = obj.get("status") or {}
    decision = Decision(
        status=LLMBackendStatus(observed_generation=meta.get("generation"), selector=selector_string(ref)),
        conditions=Conditions(old_status.get("conditions"), meta.get("generation")),
    )
    try:
        _converge(observed, ref, old_status, decision)
    except _Stop:
        pass
    if decision.status.replicas is None:  # stopped before the workload: nothing of this spec is ready yet
        spec = obj.get("spec") or {}
        auto = spec.get("autoscaling") or {}
        desired = auto.get("minReplicas", 1) if auto.get("enabled") else spec.get("replicas", 1)
        decision.status.ready = f"0/{desired}" if isinstance(desired, int) and 0 <= desired <= 1000 else None
    return decision


def finish_status(decision: Decision) -> dict[str, Any]:
    """The status to write (wire form), with the conditions of this pass and what they add up to."""
    status = decision.status
    written = decision.conditions.to_list()
    status.conditions = [Condition.model_validate(c) for c in written]
    summary = summarize(written)
    status.phase, status.reason = summary.phase, summary.reason
    if status.replicas is not None:
        status.ready = f"{status.ready_replicas or 0}/{status.replicas}"
    if status.plan is not None:
        status.parallelism = f"{status.plan.tensor_parallel}x{status.plan.pipeline_parallel}"
    return status.dump()


# ---- the steps ----


def _converge(observed: Observed, ref: BackendRef, old_status: dict[str, Any], decision: Decision) -> None:
    conditions, status = decision.conditions, decision.status
    spec = _valid_spec(observed, decision)
    status.model_name = model_name(ref, spec)
    status.backend = spec.engine.backend
    fresh = plan_for_spec(spec, observed.nodes)
    plan_status = _plan(observed, spec, fresh, old_status, decision)
    plan_status = _placement(observed, spec, plan_status, decision)
    _require_apis(observed, spec, plan_status, decision)
    _require_unambiguous_name(observed, plan_status, decision)
    _require_own_download(observed, spec, decision)

    # The plan the pods run (a runner-up taken by preferRunnable stays in status while the best plan differs) on
    # all the nodes: its capacity, and the GPU pool its pods take GPUs from, are those of the deployed shape.
    deployed = _deployed_plan(spec, observed.nodes, fresh, plan_status)
    tolerations = [t.dump() for t in spec.scheduling.tolerations or []]
    capacity = replicas_capacity(deployed, observed.nodes, spec.scheduling.node_selector,
                                 tolerations) if deployed is not None else None
    multi_node = plan_status.nodes_per_replica > 1
    workload_kind = "LeaderWorkerSet" if multi_node else "Deployment"
    live_workload = observed.children.get((workload_kind, ref.name))
    # the GPUs this backend shares with others on the same nodes (autoscaling/pool.py): mode operator only
    pool = gpu_pool(deployed, observed.nodes, spec.scheduling.node_selector, tolerations) if (
        deployed is not None and spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.OPERATOR
    ) else ("", 0)
    replicas = _replicas(observed, spec, live_workload, capacity, plan_status, decision, pool)
    spare = (capacity - (replicas or 0)) if capacity is not None else 0
    strategy, strategy_why = choose_rollout_strategy(replicas or 0, spare)
    status.rollout_strategy = strategy.type

    apis = observed.apis
    scaler_mode = spec.autoscaling.enabled and spec.autoscaling.mode in (AutoscalingMode.HPA, AutoscalingMode.KEDA)
    keda_missing = _keda_missing(observed, spec)
    prom = spec.autoscaling.prometheus
    # KEDA polls the ScaledObject's Prometheus: only one the admin allowed (the operator's own polling: run.py).
    keda_refused = (spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.KEDA and prom is not None
                    and observed.prometheus_urls is not None and not allowed(prom.url, observed.prometheus_urls))
    # A stored backend's removed free-form query: never handed on, as in mode operator (egress.query_refusal).
    keda_query_refused = (spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.KEDA
                          and prom is not None and not keda_refused and bool(prom.removed_fields_set))
    compute_domains = needs_compute_domain(plan_status) and "ComputeDomain" in apis
    gang = choose_gang_scheduler(spec, "Volcano" in apis, "Kueue" in apis) if multi_node else None
    try:
        desired = desired_objects(ref, spec, plan_status, replicas if replicas is not None else 1, strategy,
                                  scaler_mode and "PrometheusRule" in apis, compute_domains, gang,
                                  scaled_objects=not (keda_missing or keda_refused or keda_query_refused),
                                  inference_pool=openai.enabled(spec) and "InferencePool" in apis,
                                  serving_ready=serving_ready(observed, ref), operator_image=downloader_image(),
                                  pod_monitor="PodMonitor" in apis, ready_adapters=ready_adapters(observed.adapters))
    except EngineConfigError as exc:  # e.g. a quantization the checkpoint contradicts: nothing to apply until the spec changes
        not_served(conditions, exc.reason, str(exc))
        raise _Stop from None
    except FetchError as exc:  # a source URI the download program refuses, stored before the API server checked it
        not_served(conditions, exc.reason, f"spec.model.source.uri: {exc}; fix the source")
        raise _Stop from None
    if decision.autoscale_target is not None and decision.autoscale_target.pool and deployed is not None:
        # the pool takes GPUs from others only for pods the scheduler could place there (planning/podfit.py)
        pool_nodes = gpu_pool_nodes(deployed, observed.nodes, spec.scheduling.node_selector, tolerations)
        pod_specs = serving_pod_specs(desired, workload_kind, ref.name)
        decision.autoscale_target.unplaceable = unplaceable(pod_specs, pool_nodes)
        decision.autoscale_target.pool_nodes = frozenset(node.name for node in pool_nodes)
        if workload_kind == "Deployment" and pod_specs:
            decision.autoscale_target.replica_pod_spec = pod_specs[0][1]
    wanted = [(c["kind"], c["metadata"]["name"]) for c in desired]
    # groups the LeaderWorkerSet would add (none to a LeaderWorkerSet that is someone else's: ResourceExists below)
    new_groups = groupnames.new_groups(spec, ref.name, plan_status, live_workload, replicas) \
        if multi_node and (live_workload is None or controlled_by(live_workload, ref)) else []
    decision.look_up = [k for k in [*wanted, *groupnames.look_ups(new_groups, ref.name, live_workload)]
                        if k not in observed.children]
    if decision.look_up:  # not in the caches: not created yet, or someone else's; reconcile asks the API server
        raise _Stop
    foreign = [f"{kind} {ref.namespace}/{name}" for kind, name in wanted
               if (live := observed.children[(kind, name)]) is not None and not controlled_by(live, ref)]
    if foreign:  # never adopt: someone else's object keeps every field it has
        decision.autoscale_target = None
        not_served(conditions, cond.RESOURCE_EXISTS,
                    f"{', '.join(foreign)} already exists and is not controlled by this LLMBackend; the operator "
                    "changes nothing of it. Delete or rename it, or give this LLMBackend another name")
        decision.requeue_after = OPTIONAL_API_REQUEUE_S  # nothing of ours is watched on it: look again
        raise _Stop
    taken = groupnames.taken_group(observed.children, ref.name, new_groups, live_workload)
    if taken is not None and taken.group == 0:
        not_served(conditions, cond.GROUP_NAME_TAKEN, taken.message)
        decision.requeue_after = OPTIONAL_API_REQUEUE_S  # nothing wakes us when that object goes: look again
        raise _Stop
    if taken is not None:  # the LeaderWorkerSet keeps the groups before it: replicas, the autoscaler's wish too
        replicas = groupnames.cap_groups(desired, ref.name, taken.group, replicas)
        if (target := decision.autoscale_target) is not None:
            target.current_replicas = min(target.current_replicas, taken.group)
            target.capacity_replicas = min(capacity if capacity is not None else taken.group, taken.group)
    live_replicas = (live_workload or {}).get("spec", {}).get("replicas")
    drifted = live_workload is not None and replicas is not None and live_replicas != replicas
    if drifted and observed.hpas is None:
        decision.look_up_hpas = True  # replicas changed behind our back: another HPA? (asked only then)
        raise _Stop
    conflict = _foreign_hpa(observed, ref, workload_kind) if drifted else None

    workload_changes = False
    current_templates: set[str] = set()
    for child in desired:
        is_workload = child["kind"] == workload_kind and child["metadata"]["name"] == ref.name
        if is_workload:
            current_templates = stamp_template_hashes(child)
        if conflict and is_workload:
            child["spec"].pop("replicas", None)  # one writer for replicas: do not fight the other HPA
        child["metadata"].setdefault("annotations", {})[APPLIED_HASH_ANNOTATION] = object_hash(child)
        live = observed.children[(child["kind"], child["metadata"]["name"])]
        if live is None or not _up_to_date(child, live):
            if live is not None and live["metadata"].get("resourceVersion"):
                # ours (checked above): written only if it is still the object and version this pass checked
                child["metadata"]["uid"] = live["metadata"].get("uid")
                child["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            decision.apply.append(child)
            workload_changes = workload_changes or is_workload
    # The workload last: children are created without a read first (Reconciler._look_up), so a name found taken
    # stops the pass before anything that runs on GPUs is created.
    decision.apply.sort(key=lambda c: c["kind"] == workload_kind and c["metadata"]["name"] == ref.name)
    decision.prune = _to_prune(observed, ref, set(wanted))
    if spec.autoscaling.enabled and live_replicas is not None and replicas is not None and replicas != live_replicas:
        auto = status.autoscaling or AutoscalingStatus()
        decision.events.append(("Normal", "ScaledUp" if replicas > live_replicas else "ScaledDown",
                                f"{workload_kind} {ref.name}: {live_replicas} -> {replicas} replicas "
                                f"(ratio {auto.current_ratio or '?'}, {auto.reason or ''}: {auto.message or ''})"))

    status_from_workload(observed, ref, spec, live_workload, workload_changes, replicas, capacity, plan_status,
                          strategy_why, decision, current_templates)
    if openai.enabled(spec) and status.endpoint is not None:
        status.endpoint.openai_port = openai.OPENAI_PORT
    if keda_missing:
        conditions.set(DEGRADED, True, cond.KEDA_NOT_INSTALLED, KEDA_NOT_INSTALLED_MESSAGE)
    if keda_refused and prom is not None:
        conditions.set(DEGRADED, True, cond.PROMETHEUS_NOT_ALLOWED,
                       f"autoscaling.prometheus.url {prom.url} is not a Prometheus this operator lets KEDA poll, so no "
                       "ScaledObject is rendered; ask the cluster admin to allow it (operator flag --prometheus-url, or "
                       f"{PROMETHEUS_URLS_ENV}), or use autoscaling.mode operator with source triton")
    if keda_query_refused and prom is not None:
        conditions.set(DEGRADED, True, cond.PROMETHEUS_QUERY_NOT_ALLOWED, query_refusal(prom, {}) or "")
    if decision.model_failure is not None:
        conditions.set(DEGRADED, True, *decision.model_failure)
    _adapters_status(observed, decision)
    if conflict:
        conditions.set(DEGRADED, True, cond.CONFLICTING_HPA,
                       f"HorizontalPodAutoscaler {conflict} also scales {workload_kind} {ref.name}; the operator stopped "
                       "writing its replicas. Delete that HPA, or use spec.autoscaling (mode operator or hpa) instead.")
    if taken is not None:
        conditions.set(DEGRADED, True, cond.GROUP_NAME_TAKEN, taken.message)
        decision.requeue_within(OPTIONAL_API_REQUEUE_S)  # nothing wakes us when that object goes: look again
    rolled_out = conditions.is_true(AVAILABLE) and not conditions.is_true(PROGRESSING)
    if not rolled_out:
        decision.requeue_within(ROLLOUT_REQUEUE_S)


def _adapters_status(observed: Observed, decision: Decision) -> None:
    """status.adapters; an adapter that cannot be served is Degraded unless something else already is."""
    if observed.adapters is not None:
        decision.status.adapters = [AdapterStatus.model_validate(a) for a in observed.adapters]
    problem = adapters_problem(observed.adapters)
    if problem is not None and not decision.conditions.is_true(DEGRADED):
        decision.conditions.set(DEGRADED, True, *problem)


def _valid_spec(observed: Observed, decision: Decision) -> LLMBackendSpec:
    """The spec, with the checkpoint's architecture for URI sources; stops the pass when it cannot be planned."""
    conditions = decision.conditions
    try:
        spec = LLMBackendSpec.model_validate(observed.obj.get("spec") or {})
        cache = observed.model_cache
        if cache is not None:
            spec = cache.spec  # with the checkpoint's architecture when the spec has none
            failure = _model_progress(observed, spec, cache, decision)
            if not cache.has_architecture:
                if failure is not None:
                    conditions.set(PLANNED, False, *failure)
                    not_served(conditions, *failure)
                    if not cache.permanent:  # a claim bound or a pod placed later sends us no event
                        decision.requeue_within(OPTIONAL_API_REQUEUE_S)
                else:  # waiting on work in flight: nothing is wrong yet, the checkpoint is on its way
                    conditions.set(PLANNED, False, WAITING_FOR_CHECKPOINT,
                                   "the plan waits for the checkpoint's config.json (see ModelReady)")
                    conditions.set(AVAILABLE, False, cond.NOT_PLANNED, "waiting for the checkpoint (see ModelReady)")
                    conditions.set(PROGRESSING, True, cache.reason, _model_message(decision))
                    conditions.set(DEGRADED, False, cond.AS_EXPECTED, "nothing needs a change yet: the checkpoint is on its way")
                    decision.requeue_within(DOWNLOAD_REQUEUE_S)
                raise _Stop
        if spec.model.source is None:  # stored before the CRD required it: the pods would load nothing
            message = SOURCE_REQUIRED_MESSAGE
            conditions.set(PLANNED, False, cond.SOURCE_REQUIRED, message)
            not_served(conditions, cond.SOURCE_REQUIRED, message)
            raise _Stop
        resolve_architecture(spec.model)
        return spec
    except (ValidationError, UnknownPresetError) as exc:
        if isinstance(exc, UnknownPresetError):
            reason, message = cond.UNKNOWN_PRESET, (f"{exc}; set spec.model.preset to a catalog entry "
                                                   "(`llmbackend presets`) or give spec.model.architecture")
        else:
            reason, message = cond.INVALID_SPEC, f"{_validation_message(exc)}; fix these fields of the spec"
        conditions.set(PLANNED, False, reason, message)
        not_served(conditions, reason, message)
        raise _Stop from None  # nothing to retry until the spec changes


def _model_message(decision: Decision) -> str:
    model = decision.conditions.get(MODEL_READY)
    return str(model["message"]) if model else ""


def _model_progress(observed: Observed, spec: LLMBackendSpec, cache: ModelCacheResult,
                    decision: Decision) -> tuple[str, str] | None:
    """status.model and ModelReady for the download or inspection; (reason, message) when it needs a person:
    a permanent failure, or work stuck (a pod that does not start, no new bytes) past the progress deadline."""
    deadline = spec.serving.progress_deadline_seconds
    model = dict(cache.status)
    reason, message = cache.reason, cache.message
    failure: tuple[str, str] | None = (reason, message) if cache.permanent else None
    if cache.stuck and failure is None:
        left = seconds_left(cache.stuck_since, observed.now, deadline) if cache.stuck_since else 0.0
        if left <= 0:
            failure = (reason, message if cache.stuck_since is None else
                       f"{message} (stuck for more than spec.serving.progressDeadlineSeconds, {deadline}s)")
        else:
            message = f"{message} (Degraded at {deadline_at(cache.stuck_since, deadline)} unless it starts)"
            decision.requeue_within(left + 1)
    elif model.get("phase") == "Downloading" and failure is None:
        before = (observed.obj.get("status") or {}).get("model") or {}
        same = all(before.get(k) == model.get(k) for k in ("phase", "source", "bytesDone"))
        model["lastProgressTime"] = (before.get("lastProgressTime") if same else None) or now_rfc3339(observed.now)
        left = seconds_left(model["lastProgressTime"], observed.now, deadline)
        if left <= 0:
            done = model.get("bytesDone") or 0
            failure = (cond.DOWNLOAD_STALLED,
                       f"the download of {model.get('source')} made no progress for {deadline}s "
                       f"(spec.serving.progressDeadlineSeconds) at {done} of {model.get('bytesTotal') or '?'} bytes; "
                       "see the download pod's log (kubectl logs -l llmbackend.dev/model-cache) for the store's "
                       "errors, check the network path to the source and the cache claim's free space")
        else:
            decision.requeue_within(left + 1)
    decision.status.model = ModelStatus.model_validate(model)
    decision.conditions.set(MODEL_READY, cache.ready, *(failure or (reason, message)))
    decision.model_failure = failure
    return failure


def _plan(observed: Observed, spec: LLMBackendSpec, fresh: Plan, old_status: dict[str, Any],
          decision: Decision) -> PlanStatus:
    """The plan kept for this spec (node churn must not reshuffle running replicas), else a fresh one that fits."""
    conditions = decision.conditions
    input_hash = spec_hash(spec)
    plan_status = _sticky_plan(old_status, input_hash, conditions)
    stale = None
    if plan_status is not None and (gone := _gone_domain(plan_status, observed)):
        refreshed = plan_status_from(fresh, input_hash) if fresh.fits else None
        if refreshed is not None and refreshed.model_dump(exclude={"explanation"}) == \
                plan_status.model_dump(exclude={"explanation"}):
            plan_status = refreshed  # the same plan on the nodes there are now: only its explanation changes
        else:
            stale = (f"status.plan.explanation names {gone}, which is no longer a node here; the plan is kept for "
                     "the running replicas (a new spec is planned on the nodes there are)")
    if plan_status is None:
        if not fresh.fits:
            decision.waiting_for_capacity = True  # re-run by node events
            conditions.set(PLANNED, False, fresh.reason, fresh.explanation)
            not_served(conditions, fresh.reason,
                        f"{_first_line(fresh.explanation)}; change the spec (model, quantization, parallelism, "
                        "scheduling) or add nodes that fit: the operator re-plans when nodes change")
            if old_status.get("plan"):  # running replicas keep their plan; nothing is deleted
                try:
                    decision.status.plan = PlanStatus.model_validate(old_status["plan"])
                except ValidationError:
                    pass  # unreadable (written by another version): dropped rather than kept half
            raise _Stop
        plan_status = plan_status_from(fresh, input_hash)
    decision.status.plan = plan_status
    conditions.set(PLANNED, True, cond.FITS, f"{_first_line(plan_status.explanation).rstrip('.') or 'plan chosen'}; "
                   + (stale or "the estimate, memory and alternatives are in status.plan.explanation"))
    return plan_status


def _gone_domain(plan: PlanStatus, observed: Observed) -> str | None:
    """The node (or NVLink clique) a kept plan's "Domain:" line names first, when the cluster has no such Node (deleted;
    a node that only lost its GPU labels for a moment still is one) and no node is in such a clique."""
    line = next((x for x in plan.explanation.splitlines() if x.startswith("Domain: ")), "")
    words = line.removeprefix("Domain: ").split()
    named = words[0].rstrip(":,;") if words else ""
    if not named or not observed.node_names or named in observed.node_names \
            or any(named == n.clique for n in observed.nodes):
        return None
    return named


def gpus_free(pods: list[dict[str, Any]], nodes: list[GPUNode]) -> dict[str, int]:
    """GPUs of each node that no running or scheduled pod holds (each pod's GPUs as the scheduler reserves them:
    planning/podfit.py gpus_held_by_node)."""
    used = gpus_held_by_node(pods)
    return {node.name: max(node.gpu_count - used.get(node.name, 0), 0) for node in nodes}


def _placement(observed: Observed, spec: LLMBackendSpec, plan_status: PlanStatus, decision: Decision) -> PlanStatus:
    """When the plan's serving pods wait for GPUs that other pods hold: say whether a runner-up could run on the
    GPUs free now, and take it with spec.planning.placement preferRunnable (the default keeps the best plan)."""
    if plan_status.nodes_per_replica != 1:
        return plan_status
    problem = pod_problem(observed.pods, observed.ref)
    if problem is None or problem.reason != cond.UNSCHEDULABLE:
        return plan_status
    if observed.free_gpus is None:
        decision.look_up_free_gpus = True  # reconcile lists the pods that hold GPUs, then asks again
        raise _Stop
    free_now = free_view(observed.nodes, observed.free_gpus)
    most_free = max((n.gpu_count for n in free_now if n.product == plan_status.gpu_product), default=0)
    if most_free >= plan_status.gpus_per_replica:
        return plan_status  # GPUs enough are free: the pods wait for something else
    runnable = plan_for_spec(spec, free_now)
    # A runner-up on one node per replica only: one spread over nodes' leftovers is slower and needs LeaderWorkerSet.
    if not runnable.fits or runnable.nodes_per_replica != 1 or (runnable.tensor_parallel, runnable.pipeline_parallel, runnable.gpu_product) == (
            plan_status.tensor_parallel, plan_status.pipeline_parallel, plan_status.gpu_product):
        return plan_status
    note = (f"the plan TP{plan_status.tensor_parallel} x PP{plan_status.pipeline_parallel} ({plan_status.gpus_per_replica} "
            f"GPUs per replica) cannot be placed on the GPUs free now (at most {most_free} free on a "
            f"{plan_status.gpu_product} node), while TP{runnable.tensor_parallel} x PP{runnable.pipeline_parallel} "
            f"({runnable.gpus_per_replica} GPUs on {runnable.gpu_product}) could run now")
    if spec.planning.placement == Placement.PREFER_RUNNABLE:
        chosen = plan_status_from(runnable, plan_status.input_hash or spec_hash(spec))
        decision.status.plan = chosen
        decision.conditions.set(PLANNED, True, cond.RUNNABLE_PLAN_CHOSEN,
                                f"{note}: taken, as spec.planning.placement is preferRunnable; "
                                f"{_first_line(runnable.explanation)}")
        return chosen
    decision.placement_note = f"{note}; set spec.planning.placement: preferRunnable to take it, or wait for GPUs"
    decision.conditions.set(PLANNED, True, cond.RUNNER_UP_RUNNABLE, decision.placement_note)
    return plan_status


def _shape(plan_: Plan | PlanStatus) -> tuple[int, int, str | None]:
    return plan_.tensor_parallel, plan_.pipeline_parallel, plan_.gpu_product


def _deployed_plan(spec: LLMBackendSpec, nodes: Sequence[GPUNode], fresh: Plan, plan_status: PlanStatus) -> Plan | None:
    """The plan of status (the one deployed) as the planner makes it on every node of its GPU product; None when
    it no longer fits there (node churn: no capacity, no pool until the spec or the nodes change)."""
    if fresh.fits and _shape(fresh) == _shape(plan_status):
        return fresh
    if not plan_status.gpu_product or not plan_status.tensor_parallel:
        return None
    pinned = spec.model_copy(update={"parallelism": spec.parallelism.model_copy(update={
        "tensor_parallel": plan_status.tensor_parallel, "pipeline_parallel": plan_status.pipeline_parallel})})
    again = plan_for_spec(pinned, [n for n in nodes if n.product == plan_status.gpu_product])
    return again if again.fits and _shape(again) == _shape(plan_status) else None


def _sticky_plan(old_status: dict[str, Any], input_hash: str, conditions: Conditions) -> PlanStatus | None:
    old_plan = old_status.get("plan")
    if old_plan and old_plan.get("inputHash") == input_hash and conditions.is_true(PLANNED):
        try:
            return PlanStatus.model_validate(old_plan)
        except ValidationError:
            return None
    return None


def _require_apis(observed: Observed, spec: LLMBackendSpec, plan_status: PlanStatus, decision: Decision) -> None:
    """Stop when the plan needs an API this cluster does not serve (installing a CRD wakes no backend: look again)."""
    if plan_status.nodes_per_replica > 1 and "LeaderWorkerSet" not in observed.apis:
        message = (f"this plan needs {plan_status.nodes_per_replica} nodes per replica, served as a LeaderWorkerSet; "
                   "install LeaderWorkerSet (https://lws.sigs.k8s.io) and the operator retries within a minute, "
                   "or change the spec so one node holds a replica")
        not_served(decision.conditions, cond.LEADER_WORKER_SET_NOT_INSTALLED, message)
        decision.requeue_after = OPTIONAL_API_REQUEUE_S
        raise _Stop
    if (needs_compute_domain(plan_status) and "ComputeDomain" not in observed.apis
            and not multi_node_spec(spec).allow_cross_node_nvlink_without_compute_domain):
        message = (f"tensor parallelism spans {plan_status.nodes_per_replica} nodes of a multi-node NVLink clique "
                   "(GB200/GB300), which needs an IMEX channel per group: install NVIDIA's DRA driver for GPUs with "
                   "ComputeDomains (resource.nvidia.com), or set spec.scheduling.multiNode."
                   "allowCrossNodeNvlinkWithoutComputeDomain: true if IMEX is provisioned outside Kubernetes")
        not_served(decision.conditions, cond.COMPUTE_DOMAIN_NOT_INSTALLED, message)
        decision.requeue_after = OPTIONAL_API_REQUEUE_S
        raise _Stop


def _require_own_download(observed: Observed, spec: LLMBackendSpec, decision: Decision) -> None:
    """A hf:// or s3:// source is served only once this backend's own download Job finished. The copy belongs to the
    source, not to a credential: another backend's download (with a Secret of its own) may have put it in the claim
    first, and pods rendered now would mount it at once, whatever this backend's credentials are worth. Its own Job
    runs with its own secretRef, or none (render/modelcache.download_job_name, credentials_match), and lists the
    source before it reuses a copy, so Complete means those credentials read the source. Until then nothing of
    this spec is applied; a permanent failure is Degraded, and replicas of an earlier spec keep running (not_served)."""
    cache, source = observed.model_cache, spec.model.source
    if cache is None or cache.ready or source is None or source.uri is None:
        return
    conditions = decision.conditions
    if decision.model_failure is not None:  # permanent, or stuck past the progress deadline
        not_served(conditions, *decision.model_failure)
        if not cache.permanent:  # a claim bound or a pod placed later sends us no event
            decision.requeue_within(OPTIONAL_API_REQUEUE_S)
        raise _Stop
    conditions.set(AVAILABLE, False, cond.WAITING_FOR_OWN_DOWNLOAD,
                   "the serving pods are created once this backend's own download of the source has finished "
                   "(see ModelReady); a copy already in the cache is not served before that")
    conditions.set(PROGRESSING, True, cache.reason, _model_message(decision))
    if _keda_missing(observed, spec):  # a person can fix it while the download runs: said now, not after it
        conditions.set(DEGRADED, True, cond.KEDA_NOT_INSTALLED, KEDA_NOT_INSTALLED_MESSAGE)
    else:
        conditions.set(DEGRADED, False, cond.AS_EXPECTED, "nothing needs a change yet: the checkpoint is on its way")
    decision.requeue_within(DOWNLOAD_REQUEUE_S)
    raise _Stop


KEDA_NOT_INSTALLED_MESSAGE = ("autoscaling.mode keda needs KEDA's ScaledObject CRD (keda.sh/v1alpha1); install KEDA "
                              "(https://keda.sh) and the operator renders the ScaledObject, or use mode operator or hpa")


def _keda_missing(observed: Observed, spec: LLMBackendSpec) -> bool:
    return spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.KEDA and "ScaledObject" not in observed.apis


def _require_unambiguous_name(observed: Observed, plan_status: PlanStatus, decision: Decision) -> None:
    """Stop a multi-node plan of a backend stored before the CRD refused names ending in -<digits>: its
    LeaderWorkerSet's StatefulSets and pods could be another backend's group (issue 42)."""
    if plan_status.nodes_per_replica > 1 and name_ends_with_group_index(observed.ref.name):
        name = observed.ref.name
        base, group = name.rsplit("-", 1)
        message = (f"this plan needs {plan_status.nodes_per_replica} nodes per replica, a LeaderWorkerSet {name} whose pods "
                   f"and StatefulSets are named {name}-<group>[-<index>]; but {name} is also the name of group {group} of "
                   f"a multi-node backend {base}, so their pods could collide. The CRD refuses such names now; recreate "
                   "this backend under a name that does not end in '-' and digits (e.g. llama3 or llama-3-8b), or change "
                   "the spec so one node holds a replica")
        not_served(decision.conditions, cond.BACKEND_NAME_AMBIGUOUS, message)
        raise _Stop


def _replicas(observed: Observed, spec: LLMBackendSpec, live_workload: dict[str, Any] | None, capacity: int | None,
              plan_status: PlanStatus, decision: Decision, pool: tuple[str, int] = ("", 0)) -> int | None:
    """Replicas to write (None: another controller owns them) and status.autoscaling."""
    autoscaling = spec.autoscaling
    ref = observed.ref
    if not autoscaling.enabled:
        return spec.replicas
    live_replicas = (live_workload or {}).get("spec", {}).get("replicas")
    if autoscaling.mode == AutoscalingMode.HPA:
        message = ("replicas are owned by the rendered HPA on the custom metric llmbackend_engine_queue_compute_ratio "
                   "(the engine queue/compute ratio)")
        if "PrometheusRule" not in observed.apis:
            message += ("; no PrometheusRule CRD here: load the recording rule and the prometheus-adapter rule "
                        "printed by `llmbackend hpa-rules -f <this manifest>`")
        decision.status.autoscaling = AutoscalingStatus(reason="HorizontalPodAutoscaler", message=message)
        return live_replicas
    if autoscaling.mode == AutoscalingMode.KEDA:
        decision.status.autoscaling = AutoscalingStatus(reason="ScaledObject", message=(
            f"replicas are owned by KEDA (ScaledObject with a Prometheus trigger on {RECORDING_RULE_NAME}); "
            "the recording rule must be loaded in that Prometheus"))
        return live_replicas
    scale = observed.scale_decision
    before = (observed.obj.get("status") or {}).get("autoscaling") or {}
    memory = before.get("memory")
    if scale is not None:
        replicas = scale.desired_replicas
    elif live_replicas is not None:
        replicas = live_replicas
    else:
        replicas = autoscaling.min_replicas
    replicas = max(autoscaling.min_replicas, min(autoscaling.max_replicas, replicas))
    decision.autoscale_target = AutoscaleTarget(
        namespace=ref.namespace, name=ref.name, spec=autoscaling, scrape_model=metrics_model(ref, spec),
        selector=selector_string(ref), current_replicas=replicas, capacity_replicas=capacity,
        gpus_per_replica=plan_status.gpus_per_replica, max_batch_size=spec.engine.max_batch_size,
        activator_selector=label_selector(activator_selector(ref)) if activator.enabled(spec) else None,
        memory=memory if isinstance(memory, dict) else None,
        pool=pool[0], pool_gpus=pool[1], priority=autoscaling.priority,
        priority_class=spec.scheduling.priority_class_name, multi_node=plan_status.nodes_per_replica > 1,
    )
    if scale is not None:
        extra = dict(scale.extra)
        if extra.get("memory") is not None:
            extra["memory"] = {**extra["memory"], **scale.recent}
        auto = AutoscalingStatus.model_validate({
            "desiredReplicas": replicas, "currentRatio": scale.current_ratio, "reason": scale.reason,
            "message": scale.message, "lastScaleTime": scale.last_scale_time, **extra})
    else:
        # no decision since this operator started: the memory stays until the scaler that resumes it writes its own,
        # and the burst floor's warning with it (its event is not posted again after each restart)
        burst = before.get("burstWarning")
        auto = AutoscalingStatus(desired_replicas=replicas, reason="AwaitingMetrics",
                                 message="no decision yet: waiting for a full window of engine metrics",
                                 memory=_readable_memory(memory),
                                 burst_warning=burst if isinstance(burst, str) and memory is not None else None)
    _drain_bound_and_warnings(before, spec, scale, auto, decision)
    decision.status.autoscaling = auto
    return replicas


def serving_pod_specs(desired: list[dict[str, Any]], kind: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    """The pod specs of the rendered serving workload, by role: a Deployment's pod, or a LeaderWorkerSet's leader
    and worker."""
    for obj in desired:
        if obj["kind"] != kind or obj["metadata"]["name"] != name:
            continue
        spec = obj.get("spec") or {}
        if kind == "Deployment":
            return [("serving", (spec.get("template") or {}).get("spec") or {})]
        group = spec.get("leaderWorkerTemplate") or {}
        return [(role, (group.get(f"{role}Template") or {}).get("spec") or {})
                for role in ("leader", "worker") if group.get(f"{role}Template")]
    return []


def _readable_memory(memory: Any) -> ScalerMemory | None:
    """status.autoscaling.memory as the API reads it; None when it does not (status is not only ours to write)."""
    try:
        return ScalerMemory.model_validate(memory) if memory is not None else None
    except ValidationError:
        return None


def _drain_bound_and_warnings(before: dict[str, Any], spec: LLMBackendSpec, scale: ScaleDecision | None,
                              auto: AutoscalingStatus, decision: Decision) -> None:
    """status.autoscaling shows the observed p99 request time beside the (spec-derived) drain bound the pods use, a
    warning while the p99 nears the bound; one Warning event when this, the churn or the burst warning appears
    (``before``: the status.autoscaling the backend holds)."""
    drain_s = drain_seconds(spec.engine.max_seq_len, spec.serving.drain_seconds)
    p99 = scale.request_p99_s if scale is not None else None
    auto.drain_seconds = drain_s
    auto.request_p99_seconds = None if p99 is None else f"{p99:.1f}"
    auto.drain_warning = drain_warning(p99, drain_s, before.get("drainWarning"), before.get("drainSeconds"))
    if auto.drain_warning is not None and before.get("drainWarning") is None:
        decision.events.append(("Warning", cond.DRAIN_BOUND_SHORT, auto.drain_warning))
    if auto.churn_warning is not None and before.get("churnWarning") is None:
        decision.events.append(("Warning", cond.AUTOSCALER_CHURN, auto.churn_warning))
    if auto.burst_warning is not None and before.get("burstWarning") is None:
        decision.events.append(("Warning", cond.BURSTS_OVER_HEADROOM, auto.burst_warning))
    # a shared GPU pool (autoscaling/pool.py): routine by design, so Normal events, once when it begins
    if auto.preempted_by is not None and before.get("preemptedBy") is None:
        decision.events.append(("Normal", cond.PREEMPTED_BY, f"replicas given up to: {auto.preempted_by}"))
    waiting = auto.waiting_for_capacity
    if waiting is not None and NOT_CLAIMED in waiting and NOT_CLAIMED not in (before.get("waitingForCapacity") or ""):
        # pods no node of the pool could hold: the tenant has something to change (spec.scheduling)
        decision.events.append(("Warning", cond.WAITING_FOR_CAPACITY, waiting))
    elif waiting is not None and before.get("waitingForCapacity") is None:
        decision.events.append(("Normal", cond.WAITING_FOR_CAPACITY, f"waiting for {waiting}"))


def _foreign_hpa(observed: Observed, ref: BackendRef, workload_kind: str) -> str | None:
    """Name of an HPA we do not own that targets our workload."""
    for hpa in observed.hpas or []:
        target = hpa.get("spec", {}).get("scaleTargetRef", {})
        owned = any(o.get("uid") == ref.uid for o in hpa["metadata"].get("ownerReferences", []))
        if not owned and target.get("kind") == workload_kind and target.get("name") == ref.name:
            return str(hpa["metadata"]["name"])
    return None


def _to_prune(observed: Observed, ref: BackendRef, wanted: set[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """Owned children of the managed kinds that are no longer desired (e.g. the PDB after a scale to 1)."""
    return [(kind, name, live["metadata"]["uid"]) for (kind, name), live in sorted(observed.children.items())
            if (kind, name) not in wanted and live is not None and kind in MANAGED_KINDS
            and any(o.get("uid") == ref.uid for o in live["metadata"].get("ownerReferences", []))]


def condition_events(conditions: Conditions) -> list[tuple[str, str, str]]:
    """Events for what a person acts on or looks for in `kubectl describe`: a failure (Warning) and the plan (every
    Planned transition: chosen, changed, waiting for a checkpoint, a runner-up that could run now). Other
    transitions (replicas ready or not, rollouts, waits within their deadline) are in the conditions only: routine,
    and each Event is a request per backend (issue 47). Progressing is never one (Degraded says the failure)."""
    events = []
    degraded = conditions.is_true(DEGRADED)
    for c in conditions.changed():
        if c["type"] == PROGRESSING or c["status"] == "Unknown":
            continue
        type_ = event_type(c, degraded)
        if type_ == "Warning" or c["type"] == PLANNED:
            events.append((type_, c["reason"], _first_line(c["message"]) or c["reason"]))
    return events


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


def not_served(conditions: Conditions, reason: str, message: str) -> None:
    """A pass that stops before the workload (PLANNED already set): the current spec is not served, so nothing
    rolls out until someone changes the spec or the cluster; Degraded carries the cause and what to do."""
    why = reason if conditions.is_true(PLANNED) else cond.NOT_PLANNED
    conditions.set(AVAILABLE, False, why, "the current spec is not served (see Degraded); replicas of an earlier "
                   "spec, if any, keep running unchanged")
    conditions.set(PROGRESSING, False, why, "nothing rolls out until the cause in Degraded is fixed")
    conditions.set(DEGRADED, True, reason, message)


def api_failure(conditions: Conditions, status: int, reason: str, message: str) -> None:
    """A request of this pass failed: what the pass knows is kept, the rest is Unknown; the pass is retried."""
    if not conditions.is_set(PLANNED):
        conditions.set(PLANNED, "Unknown", cond.API_REQUEST_FAILED, "not evaluated: an API request failed (see Degraded)")
    conditions.set(AVAILABLE, "Unknown", cond.API_REQUEST_FAILED, "not known: an API request failed (see Degraded)")
    conditions.set(PROGRESSING, False, cond.API_REQUEST_FAILED, "stopped: an API request failed (see Degraded)")
    conditions.set(DEGRADED, True, cond.API_REQUEST_FAILED,
                   f"{status} {reason}: {message}; the operator retries with backoff. If it persists, "
                   "check the namespace's ResourceQuota and LimitRange, admission webhooks and the operator's RBAC")


def _up_to_date(desired: dict[str, Any], live: dict[str, Any]) -> bool:
    annotations = live.get("metadata", {}).get("annotations") or {}
    if annotations.get(APPLIED_HASH_ANNOTATION) != desired["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]:
        return False
    if is_summarized(live):  # from the caches: compare the digests (per key: keys someone else added are ignored)
        desired = summarize_data(desired)
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
