"""Level-triggered reconciliation of one LLMBackend: observe -> decide -> act.

`Reconciler.reconcile(key)` observes (the CR, its children, pods and the optional APIs: reads the watch caches
answer), hands that to the pure `decide()` (decide.py), and acts on the decision: applies what differs, prunes
what is no longer desired, writes status once, posts events. Safe to call any number of times. An API error
of any step becomes a condition with its reason and message; the work queue retries with backoff.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from ..api.v1alpha1 import LLMBackendSpec, LLMBackendStatus
from ..autoscaling import metrics
from ..planning.inventory import Inventory
from ..render.multinode import LAUNCHER_CLUSTER_ROLE
from ..render.names import BACKEND_LABEL, MANAGED_KINDS, OPTIONAL_KINDS, BackendRef, model_name, serving_pod_ready
from . import egress, permissions
from .adapters import sync_adapters
from .conditions import Conditions, now_rfc3339
from .decide import OPTIONAL_APIS, api_failure, condition_events, decide, finish_status, gpus_free, merge_patch
from .events import EventCorrelator
from .kube import ApiError
from .modelcache import cleanup_model_caches_safely, sync_model_cache
from .passdata import AutoscaleTarget, Decision, Observed, ScaleDecision

log = logging.getLogger("llmbackend.reconcile")

EVENT_SOURCE = "llmbackend-operator"
MAX_LOOKUP_ROUNDS = 4  # decide may ask for children the caches do not hold, the HPAs, the free GPUs: at most once each
MAX_WRITE_ATTEMPTS = 3  # a child changed by others between read and write: read again, at most this often

permissions.require("", "events", "create")
permissions.require("autoscaling", "horizontalpodautoscalers", "list")  # conflict detection
# The names a LeaderWorkerSet's new groups would take, anyone's, read by name before it gets them
# (groupnames.taken_group); pods have `get` already (permissions.py).
permissions.require("apps", "statefulsets", "get")
READ_BY_NAME = ("StatefulSet", "Pod")  # kinds decide asks for that are not children: read, never assumed absent
# The multi-node leaders' exec rights are a RoleBinding of one fixed ClusterRole (render/multinode.py). The API
# server lets the operator create it because it may `bind` that ClusterRole by name (RBAC escalation prevention);
# the operator holds no exec right itself and may bind no other role.
permissions.require("rbac.authorization.k8s.io", "clusterroles", "bind", resource_names=(LAUNCHER_CLUSTER_ROLE,))

__all__ = ["KubeClient", "Outcome", "Reconciler", "ScaleDecision", "AutoscaleTarget", "SharedState"]


class KubeClient(Protocol):
    """What the reconciler needs of an API client: controller/kube.py's `Kube`, controller/cache.py's
    `CachedKube` (reads from the watch caches) and tests' fakes (controller/fakekube.py)."""

    calls: Any  # Counter of requests by HTTP method

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...
    def get_live(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...  # never cached
    # (name, uid, resourceVersion) of what `list` would return, without copying or reading; None: cannot say
    def versions(self, kind: str, namespace: str, label_selector: str) -> list[tuple[str, str, str]] | None: ...
    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict[str, Any]]: ...
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def create_applied(self, obj: dict[str, Any]) -> dict[str, Any]: ...  # create (409 if the name is taken), applied
    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]: ...
    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> bool: ...
    def has_api(self, api_version: str, plural: str, absent_ttl_s: float = ...) -> bool: ...


def precondition_failed(exc: ApiError) -> bool:
    """The write's precondition did not hold: the name is taken or another resourceVersion or uid is there (409),
    another object under that name (422 on metadata.uid, "field is immutable"). (A 404 is no precondition: the
    resource itself is not served, e.g. a CRD just deleted or not yet served.)"""
    return exc.status == 409 or (exc.status == 422 and "metadata.uid" in exc.message)


WRITTEN, UNCHANGED, CONFLICT = "written", "unchanged", "conflict"  # what a status write did


class LostRace(Exception):
    """A child this pass was about to write is someone else's (created or replaced since it was read)."""

    def __init__(self, key: tuple[str, str], live: dict[str, Any]):
        super().__init__(f"{key[0]} {key[1]} is not controlled by this LLMBackend")
        self.key = key
        self.live = live


class BackendGone(Exception):
    """The API server has no such backend (or another one under its name): the pass ends, with no retry."""


@dataclass
class Outcome:
    requeue_after: float | None = None
    writes: int = 0
    gone: bool = False  # the API server said the backend is gone (the store still had it): forget the key


@dataclass
class SharedState:
    """State shared between the reconcilers, the autoscaler loop and the watch handlers."""

    inventory: Inventory = field(default_factory=Inventory)
    decisions: dict[tuple[str, str], ScaleDecision] = field(default_factory=dict)
    autoscale_targets: dict[tuple[str, str], AutoscaleTarget] = field(default_factory=dict)
    waiting_for_capacity: set[tuple[str, str]] = field(default_factory=set)
    # Nodes deleted (seen by the Node watch): their pods stay, Ready, until the pod garbage collector takes them (about
    # a minute), and their Deployment counts them ready meanwhile. A node created again under the name leaves the set.
    lost_nodes: set[str] = field(default_factory=set)
    # The names of every Node (from the Node watch's store), for a kept plan's explanation; None: not known.
    node_names: Callable[[], frozenset[str]] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class Reconciler:
    def __init__(self, kube: KubeClient, state: SharedState):
        self.kube = kube
        self.state = state
        self._local = threading.local()  # per worker thread: whether its pass confirmed the backend
        self.events = EventCorrelator()  # repeats counted, similar ones combined, a budget per backend
        # key -> the inputs (pass_inputs) of its last pass when that pass had nothing to do: a resync that finds them
        # unchanged decides nothing again (a no-op pass costs the reads only, issue 47)
        self._settled: dict[tuple[str, str], tuple[Any, ...]] = {}

    def reconcile(self, key: tuple[str, str]) -> Outcome:
        namespace, name = key
        obj = self.kube.get("LLMBackend", namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return self._gone(key)
        try:
            return self._reconcile(key, obj)
        except BackendGone as exc:
            # The store still had it (its DELETED missed while a watch was down): nothing of it is written again.
            log.info("%s/%s is gone (%s): forgotten, no retry", namespace, name, exc)
            return dataclasses.replace(self._gone(key), gone=True)

    def _gone(self, key: tuple[str, str]) -> Outcome:
        self.forget(key)
        # Children go with the CR through owner references; copies in a model cache only when no other
        # backend uses them (the cleanup waits for the backend's pods to go: look again until it ran).
        return Outcome(requeue_after=30 if cleanup_model_caches_safely(self.kube, key[0]) else None)

    def _reconcile(self, key: tuple[str, str], obj: dict[str, Any]) -> Outcome:
        namespace, name = key
        writes_before = self._writes()
        self._local.confirmed = False  # whether this pass found the backend on the API server (before its first create)
        self._local.written = None  # (resourceVersion, status) of this pass's status write: a second one starts there
        decision: Decision | None = None
        settled = self._settled.pop(key, None)
        try:
            observed, inputs = self._observe(obj, settled)
            if observed is None:  # nothing decide reads changed since a pass that had nothing to do
                assert inputs is not None
                self._settled[key] = inputs
                return Outcome()
            decision = decide(observed)
            looked_up = False
            for _ in range(MAX_LOOKUP_ROUNDS):
                if not (decision.look_up or decision.look_up_hpas or decision.look_up_free_gpus):
                    break
                observed, looked_up = self._look_up(observed, decision), True
                decision = decide(observed)
            try:
                acted = self.act(obj, decision)
            except LostRace as race:  # decide again with what is there now: ResourceExists, nothing of it changed
                log.info("%s %s/%s appeared while this pass wrote it and is not ours: left alone", race.key[0],
                         namespace, race.key[1])
                observed = dataclasses.replace(observed, children={**observed.children, race.key: race.live})
                decision = decide(observed)
                acted = self.act(obj, decision)
                looked_up = True
        except ApiError as exc:
            self._report_failure(obj, decision, exc)
            raise
        # Settled: the same inputs would decide the same again (decide is pure), and this decision wants nothing done
        # nor a later look (a deadline in flight asks for one, so time cannot change a settled decision).
        if inputs is not None and not (acted or looked_up) and decision.requeue_after is None:
            self._settled[key] = inputs
        return Outcome(decision.requeue_after, self._writes() - writes_before)  # writes: approximate when concurrent

    def _writes(self) -> int:
        return sum(self.kube.calls[method] for method in ("PATCH", "POST", "PUT", "DELETE"))

    def forget(self, key: tuple[str, str]) -> None:
        self._settled.pop(key, None)
        with self.state.lock:
            self.state.decisions.pop(key, None)
            self.state.autoscale_targets.pop(key, None)
            self.state.waiting_for_capacity.discard(key)

    # ---- observe ----

    def observe(self, obj: dict[str, Any]) -> Observed:
        """Every read of a pass. With the watch caches behind `self.kube` none of these reaches the API server
        once the backend's children exist (lists by the backend's label, discovery cached)."""
        observed, _ = self._observe(obj)
        assert observed is not None
        return observed

    def _observe(self, obj: dict[str, Any], settled: tuple[Any, ...] | None = None) \
            -> tuple[Observed | None, tuple[Any, ...] | None]:
        """What `observe` says, and the pass's inputs (`pass_inputs` and the rest decide reads); (None, inputs) when
        they equal `settled`: then the children and pods are not copied out of the caches."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        apis = frozenset(api for api, (version, plural) in OPTIONAL_APIS.items() if self.kube.has_api(version, plural))
        by_label = f"{BACKEND_LABEL}={name}"
        kinds = [kind for kind in MANAGED_KINDS if kind not in OPTIONAL_KINDS or kind in apis]
        # Before the reads: the inputs are never newer than what decide sees (a change meanwhile is decided next pass).
        inputs = pass_inputs(self.kube, obj, kinds)
        model_cache = adapters = None
        try:
            spec = LLMBackendSpec.model_validate(obj.get("spec") or {})
        except ValidationError:
            spec = None  # decide says what is wrong
        if spec is not None:
            # URI sources (shared cache, create-if-missing); pvc sources without an architecture (inspector Job).
            ref = BackendRef(name, namespace, meta["uid"])
            model_cache = sync_model_cache(self.kube, namespace, spec, owner=ref,
                                           previous_source=((obj.get("status") or {}).get("model") or {}).get("source"))
            adapters = sync_adapters(self.kube, namespace, spec, (obj.get("status") or {}).get("adapters"),
                                     served_model=model_name(ref, spec))
        with self.state.lock:
            scale_decision = self.state.decisions.get((namespace, name))
            lost_nodes = set(self.state.lost_nodes)
        nodes = self.state.inventory.nodes()
        node_names = self.state.node_names() if self.state.node_names else None
        if inputs is not None:
            inputs += (nodes, apis, scale_decision, model_cache, adapters, egress.settings.prometheus_urls, node_names,
                       frozenset(lost_nodes))
            if inputs == settled:
                return None, inputs
        children: dict[tuple[str, str], dict[str, Any] | None] = {}
        for kind in kinds:
            for child in self.kube.list(kind, namespace, label_selector=by_label):
                children[(kind, child["metadata"]["name"])] = child
        pods = self.kube.list("Pod", namespace, label_selector=by_label)
        if lost_nodes:
            pods, children = without_lost_nodes(pods, children, lost_nodes, name)
        observed = Observed(obj=obj, nodes=nodes, apis=apis, children=children, pods=pods, scale_decision=scale_decision,
                            model_cache=model_cache, adapters=adapters, prometheus_urls=egress.settings.prometheus_urls,
                            node_names=node_names)
        return observed, inputs

    def _look_up(self, observed: Observed, decision: Decision) -> Observed:
        """What decide asked for and the caches do not hold: children by name, and the namespace's HPAs when replicas
        changed behind our back. A child the caches do not hold is taken as absent without a read: it is not created
        yet, or someone else's (not labelled as ours), and the create (an apply that the API server refuses with 409
        when the name is taken: kube.create_applied) tells which; on a refusal the pass decides again with that
        object (LostRace), as it would have with a read first. The names a LeaderWorkerSet's new groups would take
        (READ_BY_NAME, asked only while the pass adds groups) are read: a pod of ours from the cache, the rest with
        one GET each, as no create of ours would find them taken (LWS creates those)."""
        namespace = observed.ref.namespace
        children = dict(observed.children)
        for kind, name in decision.look_up:
            children[(kind, name)] = self.kube.get(kind, namespace, name) if kind in READ_BY_NAME else None
        hpas = observed.hpas
        if decision.look_up_hpas:
            hpas = self.kube.list("HorizontalPodAutoscaler", namespace)
        free = observed.free_gpus
        if decision.look_up_free_gpus:  # asked only while serving pods wait for GPUs
            try:
                free = gpus_free(self.kube.list("Pod", None, field_selector="status.phase!=Succeeded,status.phase!=Failed"),
                                 observed.nodes)
            except ApiError as exc:  # e.g. an operator confined to some namespaces: no runner-up advice
                log.info("free GPUs not known (%s); the plan's pods wait for GPUs", exc)
                free = {}
        return dataclasses.replace(observed, children=children, hpas=hpas, free_gpus=free)

    # ---- act ----

    def act(self, obj: dict[str, Any], decision: Decision) -> bool:
        """Apply, prune, hand the autoscaler its target, write status once (before the children when one is to be
        created: that write confirms the backend), post events. Returns whether it wrote or posted anything."""
        meta = obj["metadata"]
        namespace = meta["namespace"]
        key = (namespace, meta["name"])
        with self.state.lock:
            if decision.autoscale_target is None:
                self.state.autoscale_targets.pop(key, None)
            else:
                self.state.autoscale_targets[key] = decision.autoscale_target
            if decision.waiting_for_capacity:
                self.state.waiting_for_capacity.add(key)
            else:
                self.state.waiting_for_capacity.discard(key)
        status = None
        if not getattr(self._local, "confirmed", False) and \
                any(not child["metadata"].get("resourceVersion") for child in decision.apply):
            # Status first: its write confirms the backend for the creates (`_patch_status`), a GET less.
            try:
                status = self._patch_status(obj, decision)
            except ApiError as exc:  # refused (not 404: BackendGone): written again after the children, as before
                log.info("status of %s/%s not written before its children (%s): written after them", namespace,
                         meta["name"], exc)
        for child in decision.apply:
            try:
                self._write_child(child, meta)
            except ApiError as exc:
                raise ApiError(exc.status, exc.reason,
                               f"applying {child['kind']} {child['metadata']['name']}: {exc.message}") from exc
        for kind, name, uid in decision.prune:
            log.info("deleting %s %s/%s: no longer desired", kind, namespace, name)
            try:
                self.kube.delete(kind, namespace, name, uid=uid)
            except ApiError as exc:
                raise ApiError(exc.status, exc.reason, f"deleting {kind} {name}: {exc.message}") from exc
        if status is None:
            status = self._patch_status(obj, decision)
        posted = self._post_events(obj, decision, with_decided=True)
        return bool(decision.apply or decision.prune or posted) or status != UNCHANGED

    def _write_child(self, child: dict[str, Any], owner: dict[str, Any]) -> None:
        """Never adopt, also when someone creates or replaces the object while this pass runs: a child decide saw
        absent is created (POST: a name already taken fails), one it saw controlled by this backend is applied with
        that object's uid and resourceVersion as preconditions. When one fails, the object is read again and
        written only if it is still ours; else LostRace."""
        uid = owner["uid"]
        meta = dict(child["metadata"])
        kind, child = child["kind"], {**child, "metadata": meta}
        for _ in range(MAX_WRITE_ATTEMPTS):
            try:
                if meta.get("resourceVersion"):
                    self.kube.apply(child)
                else:
                    self._confirm_backend(owner)
                    self.kube.create_applied(child)
                return
            except ApiError as exc:
                if not precondition_failed(exc):
                    raise
            live = self.kube.get_live(kind, meta["namespace"], meta["name"])
            if live is not None and not any(o.get("uid") == uid and o.get("controller")
                                            for o in live["metadata"].get("ownerReferences") or []):
                raise LostRace((kind, meta["name"]), live)
            for field_name in ("uid", "resourceVersion"):
                if live is None:
                    meta.pop(field_name, None)
                else:
                    meta[field_name] = live["metadata"][field_name]
        raise ApiError(409, "Conflict", f"{kind} {meta['name']} kept changing while the operator wrote it; retrying")

    def _confirm_backend(self, owner: dict[str, Any]) -> None:
        """Before a pass creates its first child, the owner must be known to the API server: the store may still hold
        a backend deleted while its watch was down, and a child created for it would be garbage collected, recreated
        by the next pass, and so on (a pod scheduled each time). Usually this pass's status write has confirmed it
        already (`_patch_status`, written before the first create); else (status unchanged, or a conflict) the owner
        is read: one GET. A pass that only applies needs neither (an applied child cannot outlive its owner: the
        garbage collector takes it)."""
        if getattr(self._local, "confirmed", False):
            return
        live = self.kube.get_live("LLMBackend", owner["namespace"], owner["name"])
        if live is None or live["metadata"]["uid"] != owner["uid"] or live["metadata"].get("deletionTimestamp"):
            raise BackendGone("not found on the API server" if live is None else "deleted, or replaced under its name")
        self._local.confirmed = True

    def _patch_status(self, obj: dict[str, Any], decision: Decision) -> str:
        """Writes status when it differs from what the backend has (or what this pass wrote already): WRITTEN,
        UNCHANGED or CONFLICT (the backend changed meanwhile; the watch brings it back).

        The write is conditional on the resourceVersion the store's copy has, so the API server answers 404 when no
        backend has that name and 409 when the one there is any other version (a backend replaced under its name is
        a new object: a new uid, a newer resourceVersion; one being deleted has a deletionTimestamp, which changed its
        resourceVersion): kube-apiserver's `Store.Update` (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/
        store.go, read at kubernetes/kubernetes 0021a864) refuses a merge patch of a missing object with NotFound (a
        custom resource has no create on update) and compares the patched object's resourceVersion with the stored
        one (Conflict) before the status strategy (apiextensions-apiserver customresource/status_strategy.go,
        `statusStrategy.PrepareForUpdate`) copies everything but status from the stored object, so a uid in the body
        would not be checked. A write that succeeds confirms the backend as the GET of `_confirm_backend` would
        (issue 47: one request less in a new backend's first pass)."""
        meta = obj["metadata"]
        status = finish_status(decision)
        export_status_metrics(obj, status)
        written = getattr(self._local, "written", None)  # (resourceVersion, status) of this pass's earlier write
        version, old = written or (meta["resourceVersion"], obj.get("status") or {})
        patch = merge_patch(old, status)
        if not patch:
            return UNCHANGED
        try:
            live = self.kube.patch_status("LLMBackend", meta["namespace"], meta["name"], patch, resource_version=version)
        except ApiError as exc:
            if exc.status == 409:  # the CR changed meanwhile; the watch brings us back
                return CONFLICT
            if exc.status == 404:
                raise BackendGone("its status write found no such LLMBackend") from exc
            raise
        self._local.written = (live["metadata"]["resourceVersion"], live.get("status") or {})
        self._local.confirmed = True  # the API server held the very version this pass decided on
        return WRITTEN

    def _write_status(self, obj: dict[str, Any], decision: Decision) -> bool:
        """Writes status when it differs, posts the events of changed conditions; whether it did either."""
        status = self._patch_status(obj, decision)
        return self._post_events(obj, decision, with_decided=False) or status != UNCHANGED

    def _post_events(self, obj: dict[str, Any], decision: Decision, with_decided: bool) -> bool:
        """Posts an event for each condition that changed (and, `with_decided`, the pass's own events): whether any."""
        events = [*condition_events(decision.conditions), *(decision.events if with_decided else ())]
        for type_, reason, message in events:
            self.event(obj, type_, reason, message)
        return bool(events)

    def _report_failure(self, obj: dict[str, Any], decision: Decision | None, exc: ApiError) -> None:
        """An API request failed: conditions say so (what the pass decided is kept), written if the API server lets us."""
        meta = obj["metadata"]
        if decision is None:
            decision = Decision(status=_carried_status(obj),
                                conditions=Conditions((obj.get("status") or {}).get("conditions"), meta.get("generation")))
        api_failure(decision.conditions, exc.status, exc.reason, exc.message)
        try:
            self._write_status(obj, decision)
        except ApiError:
            pass  # the API server is failing us; the original error is retried with backoff
        # BackendGone goes up: the original error is moot when the backend is gone.

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
        send = self.events.correlate(event)
        if send is None:  # this backend's event budget is spent (a failure in a loop): the log keeps it
            log.info("event %s on %s/%s not posted (rate limit): %s", reason, meta["namespace"], meta["name"], message)
            return
        try:
            if send.create is not None:
                self.events.posted(send.create, self.kube.create(send.create))
            else:
                assert send.name is not None and send.patch is not None
                self.kube.patch("Event", meta["namespace"], send.name, send.patch)
        except ApiError as exc:  # events are best effort
            if exc.status == 404 and send.name is not None:  # the counted Event expired: the next one is posted anew
                self.events.forget(event)
            log.warning("could not post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc)


def pass_inputs(kube: KubeClient, obj: dict[str, Any], kinds: list[str]) -> tuple[Any, ...] | None:
    """The objects a pass reads, by kind, name, uid and resourceVersion (which the API server changes with every write
    of an object): the backend, its children of `kinds` and its pods, as the client's caches hold them (no copies). Two
    passes with equal ones (and equal other inputs, added by observe) decide the same. None when the client cannot say
    or an object has no resourceVersion (not from an API server): then the pass is always decided."""
    meta = obj["metadata"]
    versions = [("LLMBackend", meta["name"], meta.get("uid", ""), meta.get("resourceVersion", ""))]
    by_label = f"{BACKEND_LABEL}={meta['name']}"
    for kind in (*kinds, "Pod"):
        listed = kube.versions(kind, meta["namespace"], by_label)
        if listed is None:
            return None
        versions += [(kind, *version) for version in listed]
    if not all(version[-1] for version in versions):
        return None
    return (tuple(versions),)


def _carried_status(obj: dict[str, Any]) -> LLMBackendStatus:
    """A failure before any decision: keep the status as it was, but for the conditions."""
    old = {k: v for k, v in (obj.get("status") or {}).items() if k != "conditions"}
    try:
        status = LLMBackendStatus.model_validate(old)
    except ValidationError:
        status = LLMBackendStatus()
    status.observed_generation = obj["metadata"].get("generation")  # the conditions speak of this generation
    return status


def export_status_metrics(obj: dict[str, Any], status: dict[str, Any]) -> None:
    """The per-backend series every backend has (conditions, replicas), from the status this pass writes."""
    spec = obj.get("spec") or {}
    autoscaled = bool((spec.get("autoscaling") or {}).get("enabled"))
    desired = (status.get("autoscaling") or {}).get("desiredReplicas")
    if desired is None and not autoscaled:
        desired = spec.get("replicas", 1)
    metrics.set_backend_status(obj["metadata"]["namespace"], obj["metadata"]["name"], status.get("conditions") or [],
                               status.get("replicas"), status.get("readyReplicas"), desired)


NODE_LOST = "NodeLost"


def without_lost_nodes(pods: list[dict[str, Any]], children: dict[tuple[str, str], dict[str, Any] | None],
                       lost_nodes: set[str], name: str) -> tuple[list[dict[str, Any]], dict[tuple[str, str], Any]]:
    """What this pass sees of pods bound to deleted nodes: not Ready (nothing runs them), and not counted in their
    Deployment's readyReplicas, which the deployment controller lowers only once the pod garbage collector deletes
    them. So status says at once what is served. (A LeaderWorkerSet's ready groups are left as it reports them.)"""
    lost = [p for p in pods if (p.get("spec") or {}).get("nodeName") in lost_nodes]
    if not lost:
        return pods, children
    seen = []
    for pod in pods:
        if pod not in lost:
            seen.append(pod)
            continue
        pod = copy.deepcopy(pod)
        status = pod.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + [
            {"type": "Ready", "status": "False", "reason": NODE_LOST,
             "message": f"node {pod['spec']['nodeName']} was deleted"}]
        seen.append(pod)
    counted = sum(1 for p in lost if serving_pod_ready(p))
    deployment = children.get(("Deployment", name))
    if counted and deployment is not None:
        deployment = copy.deepcopy(deployment)
        deployment_status = deployment.setdefault("status", {})
        for field_name in ("readyReplicas", "availableReplicas"):
            if deployment_status.get(field_name):
                deployment_status[field_name] = max(0, deployment_status[field_name] - counted)
        children = {**children, ("Deployment", name): deployment}
    return seen, children
