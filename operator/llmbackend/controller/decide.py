"""The decision of one reconcile pass, with no I/O: what the operator observed in, what it wants out.

`decide(Observed) -> Decision`: the children to apply and prune, the status (typed: api/v1alpha1.py's
models), the conditions, the events, the autoscaler's target and when to look again. reconcile.py
observes (reads, answered by the watch caches) and acts (writes); this module only decides, so every
path of a pass is unit-tested on plain data (tests/unit/test_decide.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ..api import conditions as cond
from ..api.catalog import UnknownPresetError, resolve_architecture
from ..api.engine_metrics import RECORDING_RULE_NAME
from ..api.v1alpha1 import (
    SOURCE_REQUIRED_MESSAGE,
    AdapterStatus,
    AutoscalingMode,
    AutoscalingSpec,
    AutoscalingStatus,
    Condition,
    EndpointStatus,
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
from ..planning.inventory import GPUNode
from ..planning.planner import Plan, free_view, gpu_pool, gpu_pool_nodes, plan_for_spec, replicas_capacity
from ..planning.podfit import pod_gpus, unplaceable
from ..render import activator, openai, triton
from ..render.drain import drain_seconds
from ..render.multinode import (
    KUEUE_API,
    VOLCANO_API,
    choose_gang_scheduler,
    group_names,
    group_problem,
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
    selector_for,
    selector_string,
    serving_pod_ready,
)
from ..render.vllm_backend import EngineConfigError
from ..render.workloads import choose_rollout_strategy, desired_objects
from .adapters import adapters_problem, ready_adapters
from .conditions import (
    AVAILABLE,
    DEGRADED,
    PLANNED,
    PROGRESSING,
    Conditions,
    event_type,
    now_rfc3339,
    parse_time,
    seconds_left,
    summarize,
)
from .digest import is_summarized, summarize_data
from .egress import PROMETHEUS_URLS_ENV, allowed, query_refusal
from .modelcache import MODEL_READY, WAITING_FOR_CHECKPOINT, ModelCacheResult, downloader_image
from .pods import FATAL_WAITING_REASONS, PodProblem, claim_problem, model_claim, pod_problem

APPLIED_HASH_ANNOTATION = "llmbackend.dev/applied-hash"
TEMPLATE_HASH_ANNOTATION = "llmbackend.dev/template-hash"  # on each serving pod template: see stamp_template_hashes
# Optional APIs a pass asks about, by name: (apiVersion, plural). Observe reports which are served.
OPTIONAL_APIS: dict[str, tuple[str, str]] = {
    **{kind: MANAGED_KINDS[kind] for kind in OPTIONAL_KINDS},
    "Volcano": VOLCANO_API,
    "Kueue": KUEUE_API,
}
ROLLOUT_REQUEUE_S = 30.0  # safety net while a rollout runs (the watches on children wake us first)
OPTIONAL_API_REQUEUE_S = 60.0  # a missing CRD: installing it sends no event to this backend
DOWNLOAD_REQUEUE_S = 15.0


@dataclass
class ScaleDecision:
    """What the autoscaler last decided for a backend (written by the autoscaler loop)."""

    desired_replicas: int
    reason: str
    message: str
    current_ratio: str | None
    last_scale_time: str | None
    extra: dict[str, Any] = field(default_factory=dict)  # more status.autoscaling fields (signal, in flight, cold start)
    request_p99_s: float | None = None  # observed p99 request time in the engines, seconds (None: not measured)
    # more of status.autoscaling.memory (ScalerState.recent): written with the rest, never a reason to write
    recent: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class AutoscaleTarget:
    """What the autoscaler loop needs to know about a backend (decided here, kept in the shared state)."""

    namespace: str
    name: str
    spec: AutoscalingSpec
    scrape_model: str
    selector: str
    current_replicas: int
    capacity_replicas: int | None
    gpus_per_replica: int
    max_batch_size: int
    # Scale to zero with the activator: its pods' selector; at 0 replicas the requests it holds decide 0 -> 1.
    activator_selector: str | None = None
    # status.autoscaling.memory as the CR holds it: what a new scaler resumes (ScalerState.resumed checks it)
    memory: dict[str, Any] | None = None
    # The GPU pool it shares with backends on the same nodes (planner.gpu_pool; "" none) and its claim on it
    # (autoscaling/pool.py): spec.autoscaling.priority, else the PriorityClass's value (the loop reads it).
    pool: str = ""
    pool_gpus: int = 0
    priority: int | None = None
    priority_class: str | None = None
    # why no node of that pool could hold one of its rendered pods, even with the pool's GPUs free
    # (planning/podfit.py); None: they fit. Then its demand counts against no other backend (autoscaling/pool.py).
    unplaceable: str | None = None
    # the names of that pool's nodes (None: not known; empty: a pool of no nodes): a pod bound elsewhere holds none
    # of its GPUs
    pool_nodes: frozenset[str] | None = None


@dataclass(frozen=True)
class Observed:
    """Everything one pass reads. `children` maps (kind, name) to the live object, or None when the API server
    said there is none; a name missing from it was not looked at (decide asks for it: Decision.look_up)."""

    obj: dict[str, Any]
    nodes: list[GPUNode] = field(default_factory=list)
    apis: frozenset[str] = frozenset()  # names of OPTIONAL_APIS served here
    children: Mapping[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)  # every pod with the backend's label
    scale_decision: ScaleDecision | None = None
    model_cache: ModelCacheResult | None = None
    adapters: list[dict[str, Any]] | None = None  # status.adapters of this pass (controller/adapters.py)
    hpas: list[dict[str, Any]] | None = None  # the namespace's HPAs; None: not looked at
    prometheus_urls: tuple[str, ...] | None = None  # the admin's allow-list (egress.py); None: not restricted
    now: datetime = field(default_factory=lambda: datetime.now(UTC))  # for deadlines of waits in flight
    free_gpus: Mapping[str, int] | None = None  # node -> GPUs no pod holds; None: not looked at
    node_names: frozenset[str] | None = None  # every Node of the cluster (GPUs or not); None: not known

    @property
    def ref(self) -> BackendRef:
        meta = self.obj["metadata"]
        return BackendRef(meta["name"], meta["namespace"], meta["uid"])


@dataclass
class Decision:
    status: LLMBackendStatus
    conditions: Conditions
    # Children to write: without metadata.resourceVersion created (an existing one is someone else's), with it (and
    # the uid) applied to that object and version only (the one decide saw controlled by this backend): never adopted.
    apply: list[dict[str, Any]] = field(default_factory=list)
    prune: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, name, uid) of owned children not desired
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message) besides condition changes
    requeue_after: float | None = None
    autoscale_target: AutoscaleTarget | None = None  # None: the operator's autoscaler does not scale this backend
    waiting_for_capacity: bool = False  # re-run this backend when nodes change
    model_failure: tuple[str, str] | None = None  # (reason, message): the model's download or inspection needs a person
    # Reads the caches cannot answer that this decision needs: children by (kind, name) and the HPAs.
    look_up: list[tuple[str, str]] = field(default_factory=list)
    look_up_hpas: bool = False
    look_up_free_gpus: bool = False  # serving pods wait for GPUs: would a runner-up fit the free ones?
    placement_note: str = ""  # the plan cannot be placed now but a runner-up could (said with the pending pods)


class _Stop(Exception):
    """A step ended the pass early; the decision so far is complete."""


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
                                  serving_ready=_serving_ready(observed, ref), operator_image=downloader_image(),
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
        decision.autoscale_target.unplaceable = unplaceable(serving_pod_specs(desired, workload_kind, ref.name), pool_nodes)
        decision.autoscale_target.pool_nodes = frozenset(node.name for node in pool_nodes)
    wanted = [(c["kind"], c["metadata"]["name"]) for c in desired]
    new_groups = _new_groups(spec, ref, plan_status, live_workload, replicas) if multi_node else []
    decision.look_up = [k for k in [*wanted, *_group_look_ups(new_groups, ref, live_workload)]
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
    taken = _taken_group(observed, ref, new_groups, live_workload, decision)
    if taken is not None:  # the LeaderWorkerSet keeps the groups before it: replicas, the autoscaler's wish too
        replicas = _cap_groups(desired, ref.name, taken.group, replicas, decision.autoscale_target, capacity)
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

    _status_from_workload(observed, ref, spec, live_workload, workload_changes, replicas, capacity, plan_status,
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
        _requeue_within(decision, OPTIONAL_API_REQUEUE_S)  # nothing wakes us when that object goes: look again
    rolled_out = conditions.is_true(AVAILABLE) and not conditions.is_true(PROGRESSING)
    if not rolled_out:
        _requeue_within(decision, ROLLOUT_REQUEUE_S)


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
                        _requeue_within(decision, OPTIONAL_API_REQUEUE_S)
                else:  # waiting on work in flight: nothing is wrong yet, the checkpoint is on its way
                    conditions.set(PLANNED, False, WAITING_FOR_CHECKPOINT,
                                   "the plan waits for the checkpoint's config.json (see ModelReady)")
                    conditions.set(AVAILABLE, False, cond.NOT_PLANNED, "waiting for the checkpoint (see ModelReady)")
                    conditions.set(PROGRESSING, True, cache.reason, _model_message(decision))
                    conditions.set(DEGRADED, False, cond.AS_EXPECTED, "nothing needs a change yet: the checkpoint is on its way")
                    _requeue_within(decision, DOWNLOAD_REQUEUE_S)
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


def _requeue_within(decision: Decision, seconds: float) -> None:
    """Look again within `seconds` (the earliest of what the steps ask for)."""
    seconds = max(1.0, seconds)
    decision.requeue_after = seconds if decision.requeue_after is None else min(decision.requeue_after, seconds)


def _deadline_at(since: str | None, deadline_s: int) -> str:
    start = parse_time(since) or datetime.now(UTC)
    return now_rfc3339(start + timedelta(seconds=deadline_s))


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
            message = f"{message} (Degraded at {_deadline_at(cache.stuck_since, deadline)} unless it starts)"
            _requeue_within(decision, left + 1)
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
            _requeue_within(decision, left + 1)
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
    planning/podfit.py pod_gpus)."""
    used: dict[str, int] = {}
    for pod in pods:
        spec, phase = pod.get("spec") or {}, (pod.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            continue
        used[spec["nodeName"]] = used.get(spec["nodeName"], 0) + pod_gpus(pod)
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
            _requeue_within(decision, OPTIONAL_API_REQUEUE_S)
        raise _Stop
    conditions.set(AVAILABLE, False, cond.WAITING_FOR_OWN_DOWNLOAD,
                   "the serving pods are created once this backend's own download of the source has finished "
                   "(see ModelReady); a copy already in the cache is not served before that")
    conditions.set(PROGRESSING, True, cache.reason, _model_message(decision))
    if _keda_missing(observed, spec):  # a person can fix it while the download runs: said now, not after it
        conditions.set(DEGRADED, True, cond.KEDA_NOT_INSTALLED, KEDA_NOT_INSTALLED_MESSAGE)
    else:
        conditions.set(DEGRADED, False, cond.AS_EXPECTED, "nothing needs a change yet: the checkpoint is on its way")
    _requeue_within(decision, DOWNLOAD_REQUEUE_S)
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


@dataclass(frozen=True)
class TakenGroup:
    """The first group a LeaderWorkerSet would add whose name an object of someone else holds (issue 42)."""

    group: int  # the LeaderWorkerSet keeps this many groups
    message: str


def _new_groups(spec: LLMBackendSpec, ref: BackendRef, plan_status: PlanStatus, live_workload: dict[str, Any] | None,
                replicas: int | None) -> list[tuple[int, list[tuple[str, str]]]]:
    """(index, names) of the groups this pass would let the LeaderWorkerSet add: from the live one's count up to the
    replicas written (spec or the operator's autoscaler), or in modes hpa/keda up to maxReplicas (the HPA adds them;
    its bounds are capped alike: _cap_groups). Empty when none is added, or when the live LeaderWorkerSet is someone
    else's (ResourceExists says so; nothing of it is written)."""
    if live_workload is not None and not controlled_by(live_workload, ref):
        return []
    live_groups = (live_workload or {}).get("spec", {}).get("replicas") or 0
    hpa_scaled = spec.autoscaling.enabled and spec.autoscaling.mode in (AutoscalingMode.HPA, AutoscalingMode.KEDA)
    target = spec.autoscaling.max_replicas if hpa_scaled else (replicas if replicas is not None else live_groups)
    return [(g, group_names(ref.name, g, plan_status.nodes_per_replica)) for g in range(live_groups, target)]


def _group_look_ups(new_groups: list[tuple[int, list[tuple[str, str]]]], ref: BackendRef,
                    live_workload: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The names to read before groups are added (anyone's: reconcile GETs them), with the leader StatefulSet <x>
    when a LeaderWorkerSet is there: the root of the controllers' chain that makes a group's objects ours."""
    if not new_groups:
        return []
    root = [("StatefulSet", ref.name)] if live_workload is not None else []
    return root + [name for _, names in new_groups for name in names]


def _taken_group(observed: Observed, ref: BackendRef, new_groups: list[tuple[int, list[tuple[str, str]]]],
                 live_workload: dict[str, Any] | None, decision: Decision) -> TakenGroup | None:
    """Before the LeaderWorkerSet gets a group it does not have, the names LWS gives that group must be free or ours:
    its leader pod <x>-<g> holds the launcher token, which the exec admission policy lets into any pod named
    <x>-<g>-<i>, and LWS takes a StatefulSet <x>-<g> it finds as the group's workers. The first taken group (the
    LeaderWorkerSet keeps the ones before it), None when all are free; stops the pass when group 0 is taken."""
    lws_uid = (live_workload or {}).get("metadata", {}).get("uid")
    for group, names in new_groups:
        holder = _foreign_holder(observed.children, ref.name, names, lws_uid)
        if holder is None:
            continue
        message = (f"{holder} holds a name LeaderWorkerSet {ref.name} would give its group {group} (leader pod "
                   f"{ref.name}-{group}, workers' StatefulSet {ref.name}-{group}, worker pods {ref.name}-{group}-<i>) "
                   f"and is not this LLMBackend's; that group's leader would hold the launcher's exec right into it, "
                   f"so the LeaderWorkerSet keeps {group} of the {new_groups[-1][0] + 1} groups asked for. Give this "
                   f"LLMBackend another name (delete and recreate it), or lower replicas (autoscaling.maxReplicas) to "
                   f"{group}; the operator changes nothing of that object and looks again within a minute")
        if group == 0:
            not_served(decision.conditions, cond.GROUP_NAME_TAKEN, message)
            decision.requeue_after = OPTIONAL_API_REQUEUE_S  # nothing wakes us when that object goes: look again
            raise _Stop
        return TakenGroup(group, message)
    return None


def _foreign_holder(found: Mapping[tuple[str, str], dict[str, Any] | None], lws: str, names: list[tuple[str, str]],
                    lws_uid: str | None) -> str | None:
    """"<kind> <name>" of the first object of one group's names that is not our LeaderWorkerSet's, by the uid chain of
    controller references LWS and StatefulSets make: LWS -> StatefulSet <lws> -> leader pod -> workers' StatefulSet
    -> worker pods (`names` in that order, render/multinode.group_names). Labels prove nothing: anyone sets them."""
    def uid(obj: dict[str, Any]) -> str | None:
        return obj["metadata"].get("uid")

    def controller(obj: dict[str, Any]) -> str | None:
        return next((o.get("uid") for o in obj["metadata"].get("ownerReferences") or [] if o.get("controller")), None)

    leaders = found.get(("StatefulSet", lws))
    ours = {uid(leaders)} if lws_uid and leaders is not None and controller(leaders) == lws_uid else set()
    ours.discard(None)
    for kind, name in names:
        obj = found.get((kind, name))
        if obj is None:
            continue
        if controller(obj) not in ours:
            return f"{kind} {name}"
        ours.add(uid(obj))
    return None


def _cap_groups(desired: list[dict[str, Any]], lws: str, groups: int, replicas: int | None,
                target: AutoscaleTarget | None, capacity: int | None) -> int | None:
    """The rendered LeaderWorkerSet `lws` gets at most `groups` groups, from whoever scales it: its replicas, the bounds
    of its HPA or ScaledObject, the operator's autoscaler (its target's replicas and capacity). Returns the replicas."""
    bounds = {"LeaderWorkerSet": ("replicas",), "HorizontalPodAutoscaler": ("minReplicas", "maxReplicas"),
              "ScaledObject": ("minReplicaCount", "maxReplicaCount")}
    for obj in desired:
        spec = obj.get("spec") or {}
        scaled = obj["metadata"]["name"] if obj["kind"] == "LeaderWorkerSet" else (
            (spec.get("scaleTargetRef") or {}).get("name") if
            (spec.get("scaleTargetRef") or {}).get("kind") == "LeaderWorkerSet" else None)
        if obj["kind"] in bounds and scaled == lws:
            for key in bounds[obj["kind"]]:
                if key in spec:
                    spec[key] = min(spec[key], groups)
    if target is not None:
        target.current_replicas = min(target.current_replicas, groups)
        target.capacity_replicas = min(capacity if capacity is not None else groups, groups)
    return min(replicas, groups) if replicas is not None else None


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
        priority_class=spec.scheduling.priority_class_name,
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


def _status_from_workload(observed: Observed, ref: BackendRef, spec: LLMBackendSpec, workload: dict[str, Any] | None,
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
                               f"{problem.message}; waiting until {_deadline_at(problem.since, deadline)} "
                               f"(spec.serving.progressDeadlineSeconds {deadline}s), then Degraded")
                _requeue_within(decision, left + 1)
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


def _serving_ready(observed: Observed, ref: BackendRef) -> bool:
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
