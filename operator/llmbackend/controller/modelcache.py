"""Reconcile step for model sources: for URI sources the model cache claim, the download Job, status.model,
ModelReady, and the architecture read from the checkpoint when the spec gives none; for a pvc source without
an architecture, the backend's inspector Job and its report.

The operator process itself never calls a source: the download Job reads config.json first and reports the
architecture in its progress line (a tenant chooses source.endpoint; the operator must not be their way into
the cluster network, nor wait on their server). A Secret's credentials go only to endpoints the admin allowed
(egress.py).

Create-if-missing only for the cache: a cache claim or download Job may serve several backends, so this step
never changes one. Cleanup (`cleanup_model_caches`): when no backend names a source any more (a backend
deleted, or its source changed), its download Job is deleted and a cleanup Job deletes the copies no backend
or running pod uses. Downloads and cleanups of a claim never run at the same time: both are decided under
one lock per namespace, from direct API reads. What to create and what a Job's state means:
render/modelcache.py (pure).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..api import conditions as cond
from ..api.catalog import UnknownPresetError, resolve_architecture
from ..api.v1alpha1 import LLMBackendSpec, ModelArchitecture
from ..model_fetch import FetchError
from ..render import modelcache as mc
from ..render.names import BACKEND_LABEL, MANAGED_BY, BackendRef, labels_for
from ..render.servingpod import SERVING_UID
from . import permissions
from .conditions import parse_time
from .egress import MODEL_ENDPOINTS_ENV, settings
from .kube import ApiError

log = logging.getLogger(__name__)

MODEL_READY = "ModelReady"
# Reasons of this step (the download Job's own reasons are model_fetch.REASONS).
SECRET_NOT_FOUND = "SecretNotFound"  # source.secretRef names a Secret that does not exist
WAITING_FOR_CHECKPOINT = "WaitingForCheckpoint"  # no architecture until the download reports config.json
ARCHITECTURE_UNKNOWN = "CheckpointArchitectureUnknown"  # the download finished without an architecture report
CLAIM_NOT_FOUND = "ClaimNotFound"  # source.pvc.claimName names a claim that does not exist
WAITING_FOR_CACHE_CLEANUP = "WaitingForCacheCleanup"  # a cleanup Job is deleting unused copies in the claim

# delete: an inspector Job of a backend's previous pvc source, or one whose pod (and report) is gone.
permissions.require("batch", "jobs", "get", "list", "create", "delete")
# patch: suspend a download no backend names any more (cancel), resume it when one names it again.
permissions.require("batch", "jobs", "patch")
permissions.require("", "persistentvolumeclaims", "get", "create")
# Cleanup: which sources backends still name.
permissions.require("llmbackend.dev", "llmbackends", "list")
# Download progress: the last line of the running Job pod's log (model_fetch prints JSON lines).
permissions.require("", "pods/log", "get")


@dataclass
class ModelCacheResult:
    spec: LLMBackendSpec  # with the checkpoint's architecture filled in when it was read
    ready: bool
    reason: str
    message: str
    status: dict[str, Any] = field(default_factory=dict)  # status.model (wire form)
    permanent: bool = False  # retrying cannot help until the spec or the source changes
    # The work does not move (a Pending pod, a claim without a volume): reason and message name the cause;
    # since when (RFC 3339; decide turns it Degraded past spec.serving.progressDeadlineSeconds), or None when
    # it needs a person at once (an image that cannot be pulled).
    stuck: bool = False
    stuck_since: str | None = None

    @property
    def has_architecture(self) -> bool:
        return self.spec.model.preset is not None or self.spec.model.architecture is not None


# The progress line is a few hundred bytes (model_fetch.Progress caps its message); a longer last line is not one of
# ours and is cut by the API server instead of being read whole into the operator.
LOG_LINE_LIMIT_BYTES = 16 * 1024


def _last_log_line(kube: Any, namespace: str, pod: str) -> dict[str, Any] | None:
    try:
        line = kube.request("GET", kube._path("Pod", namespace, pod, "log"),
                            query={"tailLines": "1", "limitBytes": str(LOG_LINE_LIMIT_BYTES)})
    except Exception:  # noqa: BLE001 - progress is best effort (no log yet, pod gone, not JSON)
        return None
    return line if isinstance(line, dict) else None


def _job_pods(kube: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The Job's own pods: the labels narrow the list (the managed-by label, which every Job's pod template carries,
    lets the watch cache answer: a resync reads nothing), the controller ownerReference (the Job's uid) decides."""
    meta = job["metadata"]
    return mc.job_pods(job, kube.list("Pod", meta["namespace"],
                                      label_selector=f"app.kubernetes.io/managed-by={MANAGED_BY},job-name={meta['name']}"))


def _termination(kube: Any, namespace: str, pods: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """(termination message of the Job's newest finished pod, or the progress line of a running one;
    a config error of a pod that cannot start). `pods`: the Job's own (_job_pods), never found by label alone."""
    pods = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    for pod in reversed(pods):
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "CreateContainerConfigError":
                return None, waiting.get("message", "")
            if "running" in (cs.get("state") or {}):
                return _last_log_line(kube, namespace, pod["metadata"]["name"]), None
            terminated = (cs.get("state") or {}).get("terminated") or {}
            if terminated.get("message"):
                try:
                    report = json.loads(terminated["message"])
                except (ValueError, RecursionError):
                    report = None
                # An unparsable report (cut by the kubelet at 4 KiB, or not the program's) carries only its text:
                # none of the fields the program reports, so no caller takes it for one.
                return (report if isinstance(report, dict) else {"message": terminated["message"][:1024]}), None
    return None, None


def _controlled_by(obj: dict[str, Any], uid: str) -> bool:
    return any(r.get("controller") and r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def downloader_image() -> str:
    return os.environ.get(mc.DOWNLOADER_IMAGE_ENV) or mc.DEFAULT_DOWNLOADER_IMAGE


def _with_architecture(spec: LLMBackendSpec, arch: ModelArchitecture) -> LLMBackendSpec:
    return spec.model_copy(update={"model": spec.model.model_copy(update={"architecture": arch})})


def checkpoint_bytes(spec: LLMBackendSpec, arch: ModelArchitecture | None) -> int | None:
    """Bytes of the checkpoint to size a cache claim by: the index's exact total when read, else the preset's or
    the given architecture's parameters in 16 bits (how checkpoints are published); None when nothing says."""
    if arch is None:
        try:
            arch = resolve_architecture(spec.model) if spec.model.preset or spec.model.architecture else None
        except UnknownPresetError:
            arch = None
    if arch is None:
        return None
    return arch.weight_bytes or arch.parameter_count * 2


# Waiting container reasons of a fetch pod that no retry fixes (the operator's own image).
_IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
FETCH_POD_GRACE_S = 60  # a Job without a pod this long is told apart from one just created


def stuck_pod(job: dict[str, Any] | None, pods: list[dict[str, Any]], claim: dict[str, Any] | None,
              what: str, now: float | None = None) -> tuple[str, str, str | None] | None:
    """(reason, message, since) when the download or inspector Job's work does not start: its pod Pending
    (a claim without a volume, no StorageClass, no node), its image not pulled, or no pod at all. `since`
    (RFC 3339) starts the progress deadline; None: a person must act now."""
    if job is None:
        return None
    name = job["metadata"]["name"]
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")]
    if not pods:
        created = parse_time(job["metadata"].get("creationTimestamp"))
        age = (now or time.time()) - created.timestamp() if created else 0.0
        if age < FETCH_POD_GRACE_S:
            return None
        return (cond.FETCH_POD_NOT_CREATED,
                f"the {what} Job {name} has no pod after {int(age)}s: a ResourceQuota or LimitRange of the namespace "
                f"or an admission webhook may refuse it; `kubectl describe job {name}` shows why in its events",
                job["metadata"].get("creationTimestamp"))
    for pod in live:
        pod_name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in _IMAGE_PULL_REASONS:
                return (cond.DOWNLOADER_IMAGE_PULL_FAILED,
                        f"the {what} pod {pod_name} cannot pull the operator's image {cs.get('image', '')}: "
                        f"{(waiting.get('message') or waiting['reason']).strip()}; set {mc.DOWNLOADER_IMAGE_ENV} on the "
                        "operator's Deployment to an image the nodes can pull (or add an image pull secret)", None)
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if not scheduled or scheduled.get("status") != "False":
            continue
        since = scheduled.get("lastTransitionTime") or pod["metadata"].get("creationTimestamp")
        words = (scheduled.get("message") or "").strip().rstrip(".")
        claim_name = ((claim or {}).get("metadata") or {}).get("name", "")
        # The scheduler names volume trouble ("pod has unbound immediate PersistentVolumeClaims", "didn't find
        # available persistent volumes to bind"); a claim still Pending otherwise may only wait for the pod (WFFC).
        if any(w in words.lower() for w in ("persistentvolumeclaim", "persistent volume", "volume binding")):
            storage_class = ((claim or {}).get("spec") or {}).get("storageClassName")
            if what == "inspector":  # the user's claim, with the checkpoint on it
                return (cond.CACHE_CLAIM_NOT_BOUND,
                        f"claim {claim_name} is not bound to a volume, so the {what} pod {pod_name} waits: {words}; bind "
                        f"the PersistentVolume that holds the checkpoint to it (see `kubectl describe pvc {claim_name}`)",
                        since)
            if not storage_class:
                return (cond.NO_STORAGE_CLASS,
                        f"claim {claim_name} has no StorageClass (none was given and the cluster has no default one) "
                        f"and no PersistentVolume is bound to it, so the {what} pod {pod_name} waits; set "
                        "spec.model.source.cache.storageClassName to a class that provisions ReadWriteMany volumes "
                        f"(kubectl get storageclass), or create a ReadWriteMany PersistentVolume for claim {claim_name}",
                        since)
            return (cond.CACHE_CLAIM_NOT_BOUND,
                    f"claim {claim_name} (StorageClass {storage_class}) is not bound, so the {what} pod {pod_name} "
                    f"waits; the class may not provision {'/'.join((claim or {}).get('spec', {}).get('accessModes') or ['its access mode'])} "
                    f"volumes or a quota may refuse the size: see `kubectl describe pvc {claim_name}`, or use a "
                    "StorageClass with ReadWriteMany (spec.model.source.cache.storageClassName)", since)
        return (cond.FETCH_POD_UNSCHEDULABLE,
                f"the {what} pod {pod_name} cannot be scheduled: {words or scheduled.get('reason', 'Unschedulable')}; "
                "it needs 0.5 CPU and 512Mi of memory on any node: free some or add a node", since)
    return None


def _inspect_pvc(kube: Any, owner: BackendRef, spec: LLMBackendSpec) -> ModelCacheResult:
    """A pvc source without preset or architecture: the backend's inspector Job reads the checkpoint;
    the plan waits for its report (its pod's termination message)."""
    pvc = spec.model.source.pvc  # type: ignore[union-attr]
    assert pvc is not None
    namespace = owner.namespace
    status: dict[str, Any] = {"source": mc.pvc_source_label(pvc), "claimName": pvc.claim_name,
                              "path": pvc.path.strip("/") or None}
    claim_obj = kube.get("PersistentVolumeClaim", namespace, pvc.claim_name)
    if claim_obj is None:
        message = (f"PersistentVolumeClaim {pvc.claim_name} does not exist in {namespace}; create it with the checkpoint "
                   "(config.json, *.safetensors) at source.pvc.path, or fix source.pvc.claimName")
        return ModelCacheResult(spec, False, CLAIM_NOT_FOUND, message, {**status, "phase": "Failed"}, stuck=True)
    name = mc.inspect_job_name(owner.name, pvc)
    job = kube.get("Job", namespace, name)
    if job is not None and not _controlled_by(job, owner.uid):  # never adopted, its pods' reports never read
        return ModelCacheResult(spec, False, cond.RESOURCE_EXISTS, f"Job {name} exists and this backend does not own it, "
                                "so its pods' report is not read; delete it and the operator creates its own",
                                {**status, "phase": "Failed"}, stuck=True)
    if job is None:
        for old in kube.list("Job", namespace, label_selector=f"{BACKEND_LABEL}={owner.name}"):
            meta = old["metadata"]
            if (meta.get("labels", {}).get("app.kubernetes.io/component") == "model-inspect" and meta["name"] != name
                    and _controlled_by(old, owner.uid)):  # a Job with the labels that is not ours is left alone
                kube.delete("Job", namespace, meta["name"], uid=meta.get("uid"))  # the previous source's inspector
        job = kube.create(mc.render_inspect_job(namespace, owner.name, pvc, downloader_image(), SERVING_UID,
                                                labels_for(owner, "model-inspect"), owner.owner_reference()))
    pods = _job_pods(kube, job)
    report, _ = _termination(kube, namespace, pods) if pods else (None, None)
    outcome = mc.inspect_outcome(job, report, len(pods))
    stuck = stuck_pod(job, pods, claim_obj, "inspector") if outcome["phase"] == "Inspecting" else None
    if outcome["phase"] == "Rerun":  # a finished Job whose pod was garbage-collected: read the checkpoint again
        kube.delete("Job", namespace, name, uid=job["metadata"].get("uid"))
        outcome = {**outcome, "phase": "Inspecting"}
    status = {k: v for k, v in {**status, "phase": outcome["phase"]}.items() if v is not None}
    if outcome["phase"] == "Ready":
        try:
            arch = ModelArchitecture.model_validate(outcome["architecture"])
        except ValueError as exc:
            return ModelCacheResult(spec, False, "InvalidCheckpointConfig", f"the inspector's report is not a valid "
                                    f"architecture ({exc}); set spec.model.architecture", {**status, "phase": "Failed"},
                                    permanent=True)
        return ModelCacheResult(_with_architecture(spec, arch), True, outcome["reason"], outcome["message"], status)
    if outcome["phase"] == "Failed":
        return ModelCacheResult(spec, False, outcome["reason"], outcome["message"], status, permanent=True)
    if stuck is not None:
        reason, message, since = stuck
        return ModelCacheResult(spec, False, reason, message, status, stuck=True, stuck_since=since)
    return ModelCacheResult(spec, False, outcome["reason"], outcome["message"] + "; the plan waits for its report", status)


# ---- cleanup of copies no backend uses ----

_locks_guard = threading.Lock()
_namespace_locks: dict[str, threading.Lock] = {}
_cleanup_owed: set[str] = set()  # namespaces where a cleanup may be owed (a source was dropped, or one waits)
_cleanup_seen: set[str] = set()  # namespaces looked at since this process started (catches up after a restart)


def _namespace_lock(namespace: str) -> threading.Lock:
    with _locks_guard:
        return _namespace_locks.setdefault(namespace, threading.Lock())


def cleanup_model_caches(kube: Any, namespace: str) -> bool:
    """Run the cleanups a namespace owes (render/modelcache.cache_cleanups decides); True while one waits
    (a download still running, pods still loading a dropped copy): call again later."""
    managed = f"app.kubernetes.io/managed-by={MANAGED_BY}"
    with _namespace_lock(namespace):
        _cleanup_seen.add(namespace)
        jobs = kube.list("Job", namespace, label_selector=managed)
        for job in jobs:  # an older operator's cleanup of a claim that never bound: Pending for as long as the claim
            labels = job["metadata"].get("labels") or {}
            if labels.get("app.kubernetes.io/component") == mc.CLEANUP_COMPONENT and not mc.job_finished(job) \
                    and _never_bound(kube, namespace, labels.get(mc.CACHE_LABEL, "")):
                kube.delete("Job", namespace, job["metadata"]["name"])
                log.info("model cache %s: cleanup Job %s deleted: its claim never bound, so holds nothing",
                         namespace, job["metadata"]["name"])
        if not any((j["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == mc.DOWNLOAD_COMPONENT
                   for j in jobs):
            _cleanup_owed.discard(namespace)
            return False
        backends = kube.list("LLMBackend", namespace)
        pods = kube.list("Pod", namespace, label_selector=managed)
        waiting = False
        for cleanup in mc.cache_cleanups(backends, jobs, pods):
            if _never_bound(kube, namespace, cleanup.claim):
                # Nothing was ever written there, so nothing to wait for; a cleanup Job would wait, Pending, for
                # a volume as long as the claim.
                for name in cleanup.stale_jobs:
                    kube.delete("Job", namespace, name)
                log.info("model cache %s/%s: no backend uses %s any more; the claim never bound, so nothing to clean",
                         namespace, cleanup.claim, ", ".join(cleanup.stale_jobs))
                continue
            for name in cleanup.cancel:  # no backend names its source any more: stop the download now
                _set_suspended(kube, namespace, name, True)
                log.info("model cache %s/%s: no backend names the source of Job %s any more; download cancelled",
                         namespace, cleanup.claim, name)
            if cleanup.wait:
                log.info("model cache %s/%s: cleanup of %s waits: %s", namespace, cleanup.claim,
                         ", ".join(cleanup.stale_jobs), cleanup.wait)
                waiting = True
                continue
            # The cleanup Job first: should deleting the stale Jobs fail, the next pass finds them again.
            try:
                kube.create(mc.render_cleanup_job(namespace, cleanup, downloader_image(), SERVING_UID))
            except ApiError as exc:
                if exc.status != 409:  # 409: this very cleanup was started before
                    raise
            for name in cleanup.stale_jobs:
                kube.delete("Job", namespace, name)
            log.info("model cache %s/%s: no backend uses %s any more; cleaning up, keeping %s", namespace,
                     cleanup.claim, ", ".join(cleanup.stale_jobs), ", ".join(cleanup.keep) or "nothing")
        if waiting:
            _cleanup_owed.add(namespace)
        else:
            _cleanup_owed.discard(namespace)
        return waiting


def _never_bound(kube: Any, namespace: str, claim: str) -> bool:
    """The claim is gone or has never been bound (a claim leaves Pending only for Bound, and never returns to it):
    no download wrote to it."""
    live = kube.get("PersistentVolumeClaim", namespace, claim) if claim else None
    return live is None or (live.get("status") or {}).get("phase") == "Pending"


def _set_suspended(kube: Any, namespace: str, job_name: str, suspend: bool) -> None:
    """Suspend a download Job (the Job controller deletes its running pod: the download stops) or resume it."""
    try:
        kube.request("PATCH", kube._path("Job", namespace, job_name), body={"spec": {"suspend": suspend}},
                     content_type="application/merge-patch+json")
    except ApiError as exc:
        if exc.status != 404:  # gone meanwhile: nothing to stop or resume
            raise


def cleanup_model_caches_safely(kube: Any, namespace: str) -> bool:
    """cleanup_model_caches for callers that must not fail on it: an API error leaves the cleanup owed (the
    next reconcile in the namespace retries) instead of failing that reconcile."""
    try:
        return cleanup_model_caches(kube, namespace)
    except ApiError as exc:
        log.warning("model cache cleanup in %s failed, retried at the next reconcile there: %s", namespace, exc)
        with _locks_guard:
            _cleanup_owed.add(namespace)
        return False


def _claim_jobs(kube: Any, namespace: str, claim: str, uri: str) -> tuple[str | None, bool]:
    """(name of a cleanup Job of the claim that has not finished: a download must not start meanwhile; whether a
    download Job of the same source exists, under another name: another Secret's, maybe one no backend names now)."""
    cleaning, other = None, False
    for job in kube.list("Job", namespace, label_selector=f"{mc.CACHE_LABEL}={claim}"):
        meta = job["metadata"]
        component = (meta.get("labels") or {}).get("app.kubernetes.io/component")
        if component == mc.CLEANUP_COMPONENT and not mc.job_finished(job) and cleaning is None:
            cleaning = str(meta["name"])
        elif component == mc.DOWNLOAD_COMPONENT and (meta.get("annotations") or {}).get(mc.SOURCE_ANNOTATION) == uri:
            other = True
    return cleaning, other


def _create_if_missing(kube: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """Create a shared object; another backend's reconcile may have created it a moment ago (409): then it is that."""
    try:
        return dict(kube.create(obj))
    except ApiError as exc:
        if exc.status != 409:
            raise
    meta = obj["metadata"]
    existing = kube.get(obj["kind"], meta["namespace"], meta["name"])
    if existing is None:  # created and deleted again meanwhile: the next pass creates it
        raise ApiError(409, "Conflict", f"{obj['kind']} {meta['name']} changed while it was created; retried")
    return dict(existing)


def sync_model_cache(kube: Any, namespace: str, spec: LLMBackendSpec, owner: BackendRef | None = None,
                     previous_source: str | None = None) -> ModelCacheResult | None:
    """Ensure the cache claim and the download Job of a URI source, or the inspector Job of a pvc source
    without an architecture (needs `owner`); None when the source needs neither. `previous_source`
    (status.model.source): a URI the backend no longer names may leave a copy to clean up."""
    source = spec.model.source
    current = source.uri if source is not None else None
    if previous_source and previous_source.startswith(("hf://", "s3://")) and previous_source != current:
        _cleanup_owed.add(namespace)
    if namespace in _cleanup_owed or namespace not in _cleanup_seen:
        cleanup_model_caches_safely(kube, namespace)
    if source is not None and source.pvc is not None and owner is not None and (
            spec.model.preset is None and spec.model.architecture is None):
        return _inspect_pvc(kube, owner, spec)
    if source is None or source.uri is None:
        return None
    arch: ModelArchitecture | None = spec.model.architecture
    try:
        mc.ref_path(source)
    except FetchError as err:  # stored before the API server checked what the program checks
        return ModelCacheResult(spec, False, err.reason, f"spec.model.source.uri: {err}; fix the source",
                                {"phase": "Failed", "source": source.uri}, permanent=True)
    if source.secret_ref is not None and not settings.credentials_may_go_to(source.endpoint):
        message = (f"source.endpoint {source.endpoint} is not an endpoint this operator sends credentials to, so Secret "
                   f"{source.secret_ref.name} is not used and nothing is downloaded; ask the cluster admin to allow it "
                   f"(operator flag --model-endpoint, or {MODEL_ENDPOINTS_ENV}), or leave out source.endpoint (the "
                   "default endpoint) or source.secretRef (a public model)")
        return ModelCacheResult(spec, False, cond.ENDPOINT_NOT_ALLOWED, message, {"phase": "Failed", "source": source.uri},
                                permanent=True)

    claim = mc.cache_claim(source)
    claim_obj = kube.get("PersistentVolumeClaim", namespace, claim)
    if claim_obj is None:
        size = checkpoint_bytes(spec, arch)
        if size is None and not (source.cache and source.cache.size):
            # The operator process never reads a source (docs/security.md): before the download only the spec knows.
            return ModelCacheResult(
                spec, False, cond.CACHE_SIZE_UNKNOWN,
                f"the size of cache claim {claim} is not known before the download: neither spec.model.preset nor "
                f"spec.model.architecture gives one; set spec.model.source.cache.size "
                f"(the checkpoint's size plus 10 %), or create claim {claim} (ReadWriteMany) yourself",
                {"phase": "Resolving", "source": source.uri, "claimName": claim}, stuck=True)
        claim_obj = _create_if_missing(kube, mc.render_cache_claim(namespace, source, size))
    job_name = mc.download_job_name(source)
    cleaning: str | None
    with _namespace_lock(namespace):  # never start a download while a cleanup of the claim runs
        job = kube.get("Job", namespace, job_name)
        if (job is not None and not job["metadata"].get("deletionTimestamp") and mc.is_download_job(job, source)
                and not mc.credentials_match(job, source)):
            # An older operator's Job of this source that reads another backend's Secret (or none): never used for
            # this backend's download (it would borrow that token, or block this one's); replaced by its own.
            kube.delete("Job", namespace, job_name, uid=job["metadata"].get("uid"))
            log.info("model cache %s: Job %s read Secret(s) %s, not %s: replaced", namespace, job_name,
                     ", ".join(mc.job_secrets(job)) or "none", mc.download_secret(source) or "none")
            return ModelCacheResult(spec, False, "DownloadPending",
                                    f"Job {job_name} of an older operator read another Secret than this backend's; it "
                                    "was deleted and this backend's own download Job is created next",
                                    {"phase": "Resolving", "source": source.uri, "claimName": claim})
        if job is not None and job["metadata"].get("deletionTimestamp"):
            cleaning = job_name  # deleted by a cleanup just now: its copy is going too
        else:
            cleaning, other_secret = _claim_jobs(kube, namespace, claim, source.uri) if job is None else (None, False)
            if other_secret:  # perhaps the Job of this backend's previous secretRef (status does not record it):
                _cleanup_owed.add(namespace)  # the next pass in the namespace cancels and cleans it up if unnamed
        if job is None and cleaning is None:
            job = _create_if_missing(kube, mc.render_download_job(namespace, source, downloader_image(), SERVING_UID))
        elif job is not None and cleaning is None and mc.suspended(job):  # cancelled, and named again since
            _set_suspended(kube, namespace, job_name, False)
    if cleaning is not None:
        message = f"Job {cleaning} is deleting unused copies in claim {claim}; the download starts when it finishes"
        waiting = ModelCacheResult(spec, False, WAITING_FOR_CACHE_CLEANUP, message,
                                   {"phase": "Resolving", "source": source.uri, "claimName": claim})
        cleanup = kube.get("Job", namespace, cleaning)
        if cleanup is not None and not cleanup["metadata"].get("deletionTimestamp") and \
                (cleanup["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == mc.CLEANUP_COMPONENT:
            # A cleanup pod that never starts (an image the nodes cannot pull, no node) would hold this download
            # with no word and no deadline: its trouble is this wait's, bounded as a download pod's is.
            stuck = stuck_pod(cleanup, _job_pods(kube, cleanup), claim_obj, "cache cleanup")
            if stuck is not None:
                waiting.reason, why, waiting.stuck_since = stuck
                waiting.message, waiting.stuck = f"{message}, but {why}", True
        return waiting
    if job is not None and not mc.is_download_job(job, source):  # someone else's Job: its pods' reports are not read
        return ModelCacheResult(spec, False, cond.RESOURCE_EXISTS, f"Job {job_name} exists but is not the operator's "
                                f"download Job for {source.uri} (labels, source annotation or owner differ), so its "
                                "pods' report is not read; delete it and the operator creates its own",
                                {"phase": "Failed", "source": source.uri, "claimName": claim}, stuck=True)
    pods = _job_pods(kube, job) if job is not None else []
    termination, config_error = _termination(kube, namespace, pods)
    outcome = mc.job_outcome(job, termination)
    stuck = stuck_pod(job, pods, claim_obj, "download") if outcome["phase"] == "Downloading" else None
    # The Secret(s) the Job's pods really read (credentials_match made them this backend's secretRef, or none).
    secrets = mc.job_secrets(job) if job is not None else []
    if config_error and outcome["phase"] != "Ready":
        name = ", ".join(secrets) or "?"
        outcome = {"phase": "Failed", "reason": SECRET_NOT_FOUND,
                   "message": f"the download Job cannot start: {config_error}; create Secret {name} in {namespace} "
                              "with the keys source.secretRef documents, or fix spec.model.source.secretRef.name"}
        stuck = None  # the Secret is named first: a storage wait of another pod of the Job comes after it
    elif stuck is not None and secrets:
        # The operator holds no rights on Secrets (docs/security-rbac.md), so a misspelt secretRef shows only when
        # the kubelet starts the pod (CreateContainerConfigError, above); until then the wait names it to check.
        reason, message, since = stuck
        secret = secrets[0]
        stuck = (reason, f"{message}. Once it starts it reads Secret {secret} (spec.model.source.secretRef), which "
                 f"the operator cannot look at: check it exists with `kubectl get secret {secret} -n {namespace}`", since)
    status = {"phase": outcome["phase"], "source": source.uri, "claimName": claim,
              "resolvedRevision": outcome.get("resolvedRevision"), "bytesTotal": outcome.get("bytesTotal"),
              "path": outcome.get("path")}
    if outcome["phase"] == "Ready" and outcome.get("bytesTotal") is not None:
        status["bytesDone"] = outcome["bytesTotal"]
    elif outcome["phase"] == "Downloading" and termination and isinstance(termination.get("bytesDone"), int):
        status["bytesDone"] = termination["bytesDone"]
    if arch is None and spec.model.preset is None and termination and isinstance(termination.get("architecture"), dict):
        try:  # from the Job's progress line (config.json is fetched first) or its termination message
            arch = ModelArchitecture.model_validate(termination["architecture"])
        except ValidationError as exc:
            return ModelCacheResult(spec, False, "InvalidCheckpointConfig", f"the download Job's report is not a valid "
                                    f"architecture ({exc}); set spec.model.architecture", {"phase": "Failed",
                                    "source": source.uri}, permanent=True)
    if (arch is None and spec.model.preset is None and outcome["phase"] == "Ready" and termination
            and termination.get("architectureError")):
        return ModelCacheResult(spec, True, termination.get("architectureReason") or "InvalidCheckpointConfig",
                                termination["architectureError"], {k: v for k, v in status.items() if v is not None},
                                permanent=True)
    if arch is None and spec.model.preset is None and outcome["phase"] == "Ready":
        return ModelCacheResult(spec, True, ARCHITECTURE_UNKNOWN,
                                "the download finished without reporting the checkpoint's architecture; "
                                "set spec.model.preset or spec.model.architecture",
                                {k: v for k, v in status.items() if v is not None}, permanent=True)
    if arch is not None and spec.model.preset is None and spec.model.architecture is None:
        spec = _with_architecture(spec, arch)
    result = ModelCacheResult(spec, outcome["phase"] == "Ready", outcome["reason"], outcome["message"],
                              {k: v for k, v in status.items() if v is not None},
                              permanent=outcome["phase"] == "Failed")
    if stuck is not None:
        result.reason, result.message, result.stuck_since = stuck
        result.stuck = True
    if not result.has_architecture and not result.permanent:
        result.message += "; the plan waits for the checkpoint's config.json"
    return result
