"""Pure rendering of the model cache: the cache claim, the download Job, and what serving pods add.

A URI source (hf://, s3://) is downloaded ONCE per (cache claim, source, credential) by a Job that runs
`python -m llmbackend.model_fetch download` (operator image) into the claim; see model_fetch for
the layout. Neither the claim nor the Job is owned by a backend: every backend of the same source, cache and
source.secretRef (or none) uses the same Job name, every backend of the source the same copy, and deleting a
backend deletes neither. The Secret is part of the Job's identity: a backend's download runs with the Secret that
backend names and no other, so a backend without one never borrows another's token, nor blocks another's download
with a Job that has none (two Jobs of one source write the same copy safely: model_fetch stages per Job).
When no backend names a source any more, `cache_cleanups` decides a cleanup: its download Job goes
and a cleanup Job (`model_fetch prune`) deletes every copy that no backend's spec and no running
serving pod names (only what the download program made, recognised by its markers). The claim itself is never
deleted. A download that found its cached copy tampered with reports CacheTampered: job_outcome names it.

Serving pods mount only their own copy, never the whole claim (other backends' copies, gated models downloaded
with Secrets of their own among them, live there too): the claim read-only with subPath `ref_path(source)`, which the
kubelet resolves (the `refs/<revision>` link, relative and inside the claim) to the copy's directory, mounted at
`model_path(source)`, where the pods wait in an init container for the completion marker and load it. A copy holds
plain files only (model_fetch refuses one with a link), so nothing in it points outside the mount. The workload is
rendered only once the backend's own download Job has finished (controller/decide.py): the link exists when the
kubelet resolves it (a missing subPath is created as a directory, which would block the download's link there).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..api.v1alpha1 import OPERATOR_IMAGE, ModelSource, PVCSource
from ..model_fetch import (
    EXIT_BAD_CONFIG,
    EXIT_NO_CONFIG,
    MARKER,
    REASON_CACHE_TAMPERED,
    FetchError,
    Source,
    parse_keep,
    parse_uri,
)

CACHE_MOUNT = "/model-cache"
# The download, inspector and cleanup Jobs run the operator's own image (model_fetch is in it); the operator
# Deployment sets LLMBACKEND_DOWNLOADER_IMAGE to its own image (manifests/default), this is the fallback.
DOWNLOADER_IMAGE_ENV = "LLMBACKEND_DOWNLOADER_IMAGE"
DEFAULT_DOWNLOADER_IMAGE = OPERATOR_IMAGE
INSPECT_MOUNT = "/checkpoint"
DEFAULT_CACHE_CLAIM = "llmbackend-model-cache"
CACHE_LABEL = "llmbackend.dev/model-cache"
SOURCE_ANNOTATION = "llmbackend.dev/model-source"
REF_ANNOTATION = "llmbackend.dev/model-ref"  # the download's `<key>/refs/<revision>` (the key depends on the endpoint)
# The Secret the download reads (source.secretRef), "" for none: part of the Job's identity (an annotation: a
# Secret's name may be longer than a label value).
SECRET_ANNOTATION = "llmbackend.dev/model-secret"
DOWNLOAD_COMPONENT = "model-download"
CLEANUP_COMPONENT = "model-cache-cleanup"
CLEANUP_TTL_S = 3600  # finished cleanup Jobs go away by themselves
MIN_CACHE_BYTES = 10 * 1024**3
CACHE_HEADROOM = 1.1  # staging files, config, tokenizer, index next to the weights
BACKOFF_LIMIT = 4
# Exit codes of model_fetch no retry can fix (bad source, credentials, size): fail the Job at once.
PERMANENT_EXIT_CODES = [2, 10, 11, 12, 13, 14, 15]
HF_TOKEN_KEY = "HF_TOKEN"
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _source(source: ModelSource) -> Source:
    if source.uri is None:
        raise ValueError("the model cache is for uri sources")
    return parse_uri(source.uri, source.endpoint)


def cache_claim(source: ModelSource) -> str:
    return (source.cache.claim_name if source.cache else None) or DEFAULT_CACHE_CLAIM


def ref_path(source: ModelSource) -> str:
    """`<key>/refs/<requested revision>` inside the cache claim: the link to the copy this source loads."""
    src = _source(source)
    return f"{src.key}/refs/{src.requested}"


def model_path(source: ModelSource) -> str:
    """Where serving pods find the checkpoint (a link to the complete copy of the requested revision)."""
    return f"{CACHE_MOUNT}/{ref_path(source)}"


def download_secret(source: ModelSource) -> str:
    """The Secret a download of this source reads: source.secretRef's name, "" for none."""
    return source.secret_ref.name if source.secret_ref is not None else ""


def download_job_name(source: ModelSource, adapter: bool = False) -> str:
    """One Job per (cache claim, source, endpoint, region, Secret): backends of the same model with the same
    secretRef (or none) share it; another Secret, or none, is another Job, so whichever backend comes first cannot
    decide which credential the others' download uses. Through a source.endpoint the cache key has the endpoint in
    it (model_fetch.endpoint_id): the Job's name has the key too, so a Job an older operator ran for the same source
    (it wrote the copy elsewhere) is not taken for it. Without a Secret the name is what older operators gave."""
    parts = [cache_claim(source), source.uri or "", source.endpoint or "", source.region or ""]
    src = _source(source)
    if src.endpoint:
        parts.append(src.key)
    if source.secret_ref is not None:
        parts.append(f"secretRef={source.secret_ref.name}")
    if adapter:  # an adapter's download checks and reports adapter_config.json: never the base model's Job
        parts.append("adapter")
    ident = "\n".join(parts)
    return "llmb-fetch-" + hashlib.sha256(ident.encode()).hexdigest()[:16]


def cache_size(source: ModelSource, checkpoint_bytes: int | None) -> str:
    """Requested size of a cache claim the operator creates: source.cache.size, else the checkpoint + 10 %."""
    if source.cache and source.cache.size:
        return source.cache.size
    want = max(int((checkpoint_bytes or 0) * CACHE_HEADROOM), MIN_CACHE_BYTES)
    return f"{math.ceil(want / 1024**3)}Gi"


def _labels(claim: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "llmbackend-operator", "app.kubernetes.io/component": component,
            CACHE_LABEL: claim}


def render_cache_claim(namespace: str, source: ModelSource, checkpoint_bytes: int | None) -> dict[str, Any]:
    """The cache PVC (created when missing; never owned by a backend, never deleted by the operator).
    ReadWriteMany: the download Job writes while serving pods on other nodes read."""
    claim = cache_claim(source)
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": cache_size(source, checkpoint_bytes)}},
    }
    if source.cache and source.cache.storage_class_name:
        spec["storageClassName"] = source.cache.storage_class_name
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace, "labels": _labels(claim, "model-cache")},
        "spec": spec,
    }


def _credential_env(source: ModelSource, src: Source) -> list[dict[str, Any]]:
    if source.secret_ref is None:
        return []
    name = source.secret_ref.name
    if src.scheme == "hf":
        keys = [(HF_TOKEN_KEY, False)]
    else:
        keys = [(S3_KEYS[0], False), (S3_KEYS[1], False), ("AWS_SESSION_TOKEN", True)]
    return [{"name": key, "valueFrom": {"secretKeyRef": {"name": name, "key": key, "optional": optional}}}
            for key, optional in keys]


def render_download_job(namespace: str, source: ModelSource, image: str, uid: int,
                        adapter: bool = False) -> dict[str, Any]:
    """The Job that downloads the source into the cache claim (its termination message reports the result);
    `adapter`: a LoRA adapter of spec.adapters (model_fetch --adapter)."""
    src = _source(source)
    claim, name = cache_claim(source), download_job_name(source, adapter)
    args = ["download", "--source", source.uri or "", "--cache", CACHE_MOUNT,
            "--progress-file", f"{CACHE_MOUNT}/.progress/{name}.json", "--staging-name", name]
    if adapter:
        args.append("--adapter")
    if source.endpoint:
        args += ["--endpoint", source.endpoint]
    if source.region:
        args += ["--region", source.region]
    container = _program_container("fetch", image, args, uid, cpu="500m", memory="512Mi", memory_limit="1Gi",
                                   mounts=[{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
                                   env=_credential_env(source, src))
    labels = _labels(claim, DOWNLOAD_COMPONENT)
    return _job({"name": name, "namespace": namespace, "labels": labels,
                 "annotations": {SOURCE_ANNOTATION: source.uri or "", REF_ANNOTATION: ref_path(source),
                                 SECRET_ANNOTATION: download_secret(source)}},
                {"backoffLimit": BACKOFF_LIMIT,
                 "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                     "containerName": "fetch", "operator": "In", "values": PERMANENT_EXIT_CODES}}]}},
                labels, container, [{"name": "cache", "persistentVolumeClaim": {"claimName": claim}},
                                    {"name": "tmp", "emptyDir": {}}], fs_group=uid)


def _program_container(name: str, image: str, args: list[str], uid: int, *, cpu: str, memory: str, memory_limit: str,
                       mounts: list[dict[str, Any]], env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A container running the model_fetch program: non-root, read-only root, its result in the termination message."""
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": ["python", "-m", "llmbackend.model_fetch"],
        "args": args,
    }
    if env is not None:
        container["env"] = env
    container.update({
        "volumeMounts": mounts,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory_limit}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                            "runAsUser": uid, "runAsGroup": uid, "readOnlyRootFilesystem": True},
        "terminationMessagePolicy": "File",
    })
    return container


def _job(metadata: dict[str, Any], spec: dict[str, Any], pod_labels: dict[str, str], container: dict[str, Any],
         volumes: list[dict[str, Any]], fs_group: int | None) -> dict[str, Any]:
    """A Job running one container once (no service links, no API token)."""
    pod_security: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if fs_group is not None:
        pod_security["fsGroup"] = fs_group
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": metadata,
        "spec": {
            **spec,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "securityContext": pod_security,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


SERVING_VOLUME = "model-cache"


def serving_volume(source: ModelSource) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) of the cache claim in serving pods: the claim read-only, of which the pods see only this
    source's copy (copy_mount)."""
    volume = {"name": SERVING_VOLUME, "persistentVolumeClaim": {"claimName": cache_claim(source), "readOnly": True}}
    return volume, copy_mount(source, SERVING_VOLUME, CACHE_MOUNT)


def copy_mount(source: ModelSource, volume: str, root: str) -> dict[str, Any]:
    """The mount of one source's copy from the cache claim volume `volume`, read-only at `<root>/<ref_path>`: the
    subPath is the `refs/<revision>` link, which the kubelet resolves to the copy's directory (the link stays inside
    the claim, or the kubelet refuses it), so the pods see that copy and nothing else of the claim."""
    return {"name": volume, "mountPath": f"{root}/{ref_path(source)}", "subPath": ref_path(source), "readOnly": True}


def wait_init_container(source: ModelSource, image: str, security_context: dict[str, Any]) -> dict[str, Any]:
    """Init container: the server starts only once the complete copy is in place (marker behind the link)."""
    marker = f"{model_path(source)}/{MARKER}"
    _, mount = serving_volume(source)
    return {
        "name": "wait-model",
        "image": image,
        "command": ["/bin/sh", "-c", 'until [ -f "$MARKER" ]; do echo "waiting for $MARKER"; sleep 10; done'],
        "env": [{"name": "MARKER", "value": marker}],
        "volumeMounts": [mount],
        "securityContext": security_context,
    }


def job_outcome(job: dict[str, Any] | None, termination: dict[str, Any] | None) -> dict[str, Any]:
    """status.model and the ModelReady condition from the Job and its last pod's termination message:
    {"phase", "reason", "message", **progress fields}."""
    term = termination or {}
    progress: dict[str, Any] = {k: term[k] for k in ("resolvedRevision", "bytesTotal", "path") if k in term}
    if job is None:
        return {"phase": "Resolving", "reason": "DownloadPending", "message": "the download Job is being created"}
    # The download found the cached copy changed (model_fetch's re-hash on reuse): named until the Job is replaced.
    tampered = str(term.get("message", ""))[:1024] if term.get("reason") == REASON_CACHE_TAMPERED else None
    conditions = {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or []}
    if (conditions.get("Complete") or {}).get("status") == "True":
        if tampered:
            return {"phase": "Ready", "reason": REASON_CACHE_TAMPERED,
                    "message": f"the checkpoint is complete in the model cache again; {tampered}", **progress}
        return {"phase": "Ready", "reason": "ModelCached", "message": "the checkpoint is complete in the model cache", **progress}
    if (conditions.get("Failed") or {}).get("status") == "True":
        reason = term.get("reason") or conditions["Failed"].get("reason") or "DownloadFailed"
        message = term.get("message") or conditions["Failed"].get("message") or "the download Job failed"
        return {"phase": "Failed", "reason": reason, "message": message, **progress}
    if tampered:
        return {"phase": "Downloading", "reason": REASON_CACHE_TAMPERED, "message": tampered, **progress}
    return {"phase": "Downloading", "reason": "Downloading", "message": "the download Job is running", **progress}


# ---- pvc sources: the inspector Job ----

def pvc_source_label(pvc: PVCSource) -> str:
    """status.model.source of a pvc source."""
    return f"pvc://{pvc.claim_name}/{pvc.path.strip('/')}".rstrip("/")


def inspect_job_name(backend: str, pvc: PVCSource) -> str:
    """One inspector Job per (backend, claim, path): a changed source gets a new Job."""
    ident = "\n".join([backend, pvc.claim_name, pvc.path.strip("/")])
    return "llmb-inspect-" + hashlib.sha256(ident.encode()).hexdigest()[:16]


def render_inspect_job(namespace: str, backend: str, pvc: PVCSource, image: str, uid: int,
                       labels: dict[str, str], owner: dict[str, Any]) -> dict[str, Any]:
    """The Job that reads config.json, the safetensors index and the quantization config of a pvc source
    (claim mounted read-only) and reports the architecture in its termination message. Owned by the backend;
    `labels` are the backend's child labels, so its pod's events wake the backend's reconcile."""
    directory = f"{INSPECT_MOUNT}/{pvc.path.strip('/')}".rstrip("/")
    container = _program_container("inspect", image, ["inspect", "--dir", directory, "--termination-log",
                                                       "/dev/termination-log"], uid,
                                   cpu="100m", memory="256Mi", memory_limit="512Mi",
                                   mounts=[{"name": "checkpoint", "mountPath": INSPECT_MOUNT, "readOnly": True}])
    pod_labels = {**labels, "app.kubernetes.io/component": "model-inspect"}
    return _job({"name": inspect_job_name(backend, pvc), "namespace": namespace, "labels": pod_labels,
                 "ownerReferences": [owner]},
                # A missing or unusable config.json stays so: fail at once, the report says why.
                {"backoffLimit": 2, "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                    "containerName": "inspect", "operator": "In", "values": [EXIT_NO_CONFIG, EXIT_BAD_CONFIG]}}]}},
                pod_labels, container, [{"name": "checkpoint",
                                         "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": True}}],
                fs_group=None)


def inspect_outcome(job: dict[str, Any] | None, report: dict[str, Any] | None, pods: int) -> dict[str, Any]:
    """What the inspector Job's state and report mean: {"phase": Inspecting|Ready|Failed|Rerun, "reason",
    "message", "architecture"?}. Rerun: the Job finished but its pod (and report) is gone."""
    name = (job or {}).get("metadata", {}).get("name", "")
    if job is None:
        return {"phase": "Inspecting", "reason": "InspectingCheckpoint", "message": "the inspector Job is being created"}
    if report and report.get("phase") == "Failed" and report.get("reason"):
        return {"phase": "Failed", "reason": report["reason"], "message": str(report.get("message", ""))}
    if report and isinstance(report.get("architecture"), dict):
        return {"phase": "Ready", "reason": "CheckpointInspected",
                "message": "the architecture was read from the checkpoint's config.json", "architecture": report["architecture"]}
    conditions = {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or []}
    finished = next((t for t in ("Complete", "Failed") if (conditions.get(t) or {}).get("status") == "True"), None)
    if finished is None:
        return {"phase": "Inspecting", "reason": "InspectingCheckpoint",
                "message": f"Job {name} is reading config.json from the claim"}
    if pods == 0:
        return {"phase": "Rerun", "reason": "InspectingCheckpoint", "message": f"Job {name} finished but its report is gone"}
    detail = (conditions.get("Failed") or {}).get("message") or "its pod reported nothing"
    return {"phase": "Failed", "reason": "CheckpointArchitectureUnknown",
            "message": f"the inspector Job {name} finished without reporting the architecture ({detail}); check that the "
                       f"operator image runs `python -m llmbackend.model_fetch inspect`, delete Job {name} to run it again, "
                       "or set spec.model.preset or spec.model.architecture"}


# ---- cleanup of copies no backend uses ----

@dataclass(frozen=True)
class CacheCleanup:
    """What to do for one cache claim whose download Jobs include some no backend needs any more."""

    claim: str
    stale_jobs: tuple[str, ...]  # download Jobs of sources no backend names: deleted when the cleanup starts
    keep: tuple[str, ...]  # refs a backend's spec or a running serving pod names: the cleanup keeps their copies
    wait: str | None = None  # why the cleanup cannot start yet (None: start it now)
    cancel: tuple[str, ...] = ()  # stale download Jobs still running: suspended now (their pods go), not waited for


def job_finished(job: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _running(obj: dict[str, Any]) -> bool:
    """Not finished, or being deleted (its pod may still write)."""
    return bool(obj["metadata"].get("deletionTimestamp")) or not job_finished(obj)


def suspended(job: dict[str, Any]) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def job_pods(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the Job controller created for `job`: those whose controller ownerReference is that Job, by uid.
    Labels prove nothing: any pod template may carry job-name or controller-uid (issue 42: a serving pod labelled
    job-name=llmb-fetch-<hash> had its log read as that download's report). Only a reader of a Job's pods' logs or
    termination messages goes through here."""
    uid = ((job or {}).get("metadata") or {}).get("uid")
    if not uid:
        return []
    return [p for p in pods if any(r.get("controller") and r.get("kind") == "Job" and r.get("uid") == uid
                                   for r in p["metadata"].get("ownerReferences") or [])]


def job_secrets(job: dict[str, Any]) -> list[str]:
    """The Secrets a Job's pods read (env secretKeyRef, envFrom secretRef, secret volumes), sorted: what it really
    uses, whatever its annotations say."""
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    names: set[str] = set()
    for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(str(ref.get("name", "")))
        for env_from in container.get("envFrom") or []:
            if env_from.get("secretRef"):
                names.add(str(env_from["secretRef"].get("name", "")))
    for volume in pod.get("volumes") or []:
        if volume.get("secret"):
            names.add(str(volume["secret"].get("secretName", "")))
    return sorted(names)


def is_download_job(job: dict[str, Any], source: ModelSource) -> bool:
    """The Job of that name is one the operator rendered for this source (download Jobs have no owner: they are
    shared by the backends of a source), not an object someone else made with the name. Its Secret is checked
    apart (credentials_match): an older operator's Job of the source may read another backend's Secret."""
    meta = job.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    want = _labels(cache_claim(source), DOWNLOAD_COMPONENT)
    return (all(labels.get(k) == v for k, v in want.items()) and annotations.get(SOURCE_ANNOTATION) == (source.uri or "")
            and not (meta.get("ownerReferences") or []))


def credentials_match(job: dict[str, Any], source: ModelSource) -> bool:
    """The Job reads exactly the Secret this source names (none when it names none). Operators before the Secret
    was part of the Job's name gave every backend of a source one Job, with the Secret of whichever came first."""
    wanted = download_secret(source)
    return job_secrets(job) == ([wanted] if wanted else [])


def _pods_of(job: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Job's pods that may still run (a terminating pod still writes until it is gone)."""
    return [p for p in job_pods(job, pods) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def _job_ref(job: dict[str, Any]) -> str | None:
    """The ref a download Job writes (Jobs of older operators carry only the URI: the default endpoint's key)."""
    annotations = job["metadata"].get("annotations") or {}
    if annotations.get(REF_ANNOTATION):
        return str(annotations[REF_ANNOTATION])
    try:
        src = parse_uri(annotations.get(SOURCE_ANNOTATION, ""))
    except FetchError:
        return None
    return f"{src.key}/refs/{src.requested}"


def _safe_ref(ref: str) -> bool:
    """A ref the cleanup program accepts in --keep (a pod of an older operator may name one it refuses)."""
    try:
        parse_keep([ref])
    except FetchError:
        return False
    return True


def cleanup_job_name(claim: str, stale_jobs: tuple[str, ...]) -> str:
    ident = "\n".join([claim, *sorted(stale_jobs)])
    return "llmb-cleanup-" + hashlib.sha256(ident.encode()).hexdigest()[:16]


def pod_cache_ref(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(claim, ref) a serving pod loads from the cache: its wait-model init container's marker path."""
    spec = pod.get("spec") or {}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or []
              if "persistentVolumeClaim" in v}
    for init in spec.get("initContainers") or []:
        marker = next((e.get("value", "") for e in init.get("env") or [] if e.get("name") == "MARKER"), "")
        prefix, suffix = f"{CACHE_MOUNT}/", f"/{MARKER}"
        if init.get("name") == "wait-model" and marker.startswith(prefix) and marker.endswith(suffix) and "model-cache" in claims:
            return claims["model-cache"], marker[len(prefix):-len(suffix)]
    return None


def _named_sources(spec: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """(raw source, is an adapter) of a stored spec: the model's and each of spec.adapters'."""
    model = (spec.get("model") or {}).get("source") or {}
    adapters = [a.get("source") or {} for a in spec.get("adapters") or [] if isinstance(a, dict)]
    return [(model, False)] + [(a, True) for a in adapters if isinstance(a, dict)]


def cache_cleanups(backends: list[dict[str, Any]], jobs: list[dict[str, Any]],
                   pods: list[dict[str, Any]]) -> list[CacheCleanup]:
    """Cleanups owed in one namespace, from its LLMBackends, the operator's Jobs and the serving pods.

    A download Job is stale when no backend (not being deleted) has its source; a stale one still running is
    cancelled (`cancel`). A cleanup waits while anything could still write to or read from what it would
    delete: a download or cleanup Job of the claim that has not finished (a cancelled one until its pod is
    gone), or a running pod that loads a stale source's copy (a deleted backend's pods, or a rollout off an old
    revision). A backend whose source is not valid (stored before a rule existed, e.g. `@..`) names no copy: it
    has no download Job of its own, and its pods' refs still count; a ref no copy can have is left out of the
    keep list (the cleanup program would refuse it)."""
    needed: set[str] = set()
    spec_refs: dict[str, set[str]] = {}
    for backend in backends:
        if backend["metadata"].get("deletionTimestamp"):
            continue
        for raw, adapter in _named_sources(backend.get("spec") or {}):
            if not raw.get("uri"):
                continue
            try:
                source = ModelSource.model_validate(raw)
                ref = ref_path(source)
            except (ValidationError, ValueError, FetchError):
                continue
            needed.add(download_job_name(source, adapter))
            spec_refs.setdefault(cache_claim(source), set()).add(ref)
    pod_refs: dict[str, set[str]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        found = pod_cache_ref(pod)
        if found and _safe_ref(found[1]):
            pod_refs.setdefault(found[0], set()).add(found[1])
    by_claim: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for job in jobs:
        labels = job["metadata"].get("labels") or {}
        component, claim = labels.get("app.kubernetes.io/component"), labels.get(CACHE_LABEL)
        if claim and component in (DOWNLOAD_COMPONENT, CLEANUP_COMPONENT):
            by_claim.setdefault(claim, {}).setdefault(component, []).append(job)
    out = []
    for claim, kinds in sorted(by_claim.items()):
        downloads = kinds.get(DOWNLOAD_COMPONENT, [])
        stale = tuple(sorted(j["metadata"]["name"] for j in downloads if j["metadata"]["name"] not in needed
                             and not j["metadata"].get("deletionTimestamp")))
        if not stale:
            continue
        spec_keep, in_use = spec_refs.get(claim, set()), pod_refs.get(claim, set())
        wait = None
        # A stale download still running is cancelled (suspended: the Job controller deletes its pod) rather than
        # waited for; once its pod is gone it no longer holds the cleanup back.
        cancel = tuple(sorted(j["metadata"]["name"] for j in downloads if j["metadata"]["name"] in stale
                              and not job_finished(j) and not suspended(j)))
        cancelled = {j["metadata"]["name"] for j in downloads if j["metadata"]["name"] in stale and suspended(j)
                     and not _pods_of(j, pods)}
        busy = [j["metadata"]["name"] for j in kinds.get(CLEANUP_COMPONENT, []) + downloads
                if _running(j) and j["metadata"]["name"] not in cancelled]
        stale_refs = {_job_ref(j) for j in downloads if j["metadata"]["name"] in stale}
        leaving = sorted((in_use - spec_keep) & stale_refs)
        if busy:
            wait = (f"Job {busy[0]} is being cancelled on claim {claim}" if busy[0] in stale
                    else f"Job {busy[0]} is still running on claim {claim}")
        elif leaving:
            wait = f"serving pods still load {leaving[0]} from claim {claim}"
        out.append(CacheCleanup(claim, stale, tuple(sorted(spec_keep | in_use)), wait, cancel))
    return out


def render_cleanup_job(namespace: str, cleanup: CacheCleanup, image: str, uid: int) -> dict[str, Any]:
    """The Job that deletes, in the cache claim, every copy and ref not in `cleanup.keep` (not owned: the
    claim is shared; it deletes itself an hour after it finishes)."""
    args = ["prune", "--cache", CACHE_MOUNT, "--termination-log", "/dev/termination-log"]
    for ref in cleanup.keep:
        args += ["--keep", ref]
    container = _program_container("cleanup", image, args, uid, cpu="100m", memory="128Mi", memory_limit="512Mi",
                                   mounts=[{"name": "cache", "mountPath": CACHE_MOUNT}])
    labels = _labels(cleanup.claim, CLEANUP_COMPONENT)
    return _job({"name": cleanup_job_name(cleanup.claim, cleanup.stale_jobs), "namespace": namespace, "labels": labels},
                {"backoffLimit": 2, "ttlSecondsAfterFinished": CLEANUP_TTL_S}, labels, container,
                [{"name": "cache", "persistentVolumeClaim": {"claimName": cleanup.claim}}], fs_group=uid)
