"""Pure rendering of the model cache: the cache claim, the download Job, and what serving pods add.

A URI source (hf://, s3://) is downloaded ONCE per (cache claim, source) by a Job that runs
`python -m llmbackend.model_fetch download` (operator image) into the claim; see model_fetch for
the layout. Neither the claim nor the Job is owned by a backend: every backend of the same source
and cache uses the same Job name and the same copy, and deleting a backend deletes neither (the
operator never deletes a cache claim or a copy in it).

Serving pods mount the whole claim read-only at CACHE_MOUNT (no subPath: the kubelet would create
a missing subPath directory, which would hide the copy renamed there later), wait in an init
container for the completion marker, and load `model_path(source)`: the `refs/<revision>` link to
the complete copy.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from ..api.v1alpha1 import ModelSource
from ..model_fetch import MARKER, Source, parse_uri

CACHE_MOUNT = "/model-cache"
# The download Job runs the operator's own image (model_fetch is in it); override with LLMBACKEND_DOWNLOADER_IMAGE.
DEFAULT_DOWNLOADER_IMAGE = "ghcr.io/llmbackend/operator:0.1.0"
DEFAULT_CACHE_CLAIM = "llmbackend-model-cache"
CACHE_LABEL = "llmbackend.dev/model-cache"
SOURCE_ANNOTATION = "llmbackend.dev/model-source"
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
    return parse_uri(source.uri)


def cache_claim(source: ModelSource) -> str:
    return (source.cache.claim_name if source.cache else None) or DEFAULT_CACHE_CLAIM


def model_path(source: ModelSource) -> str:
    """Where serving pods find the checkpoint (a link to the complete copy of the requested revision)."""
    src = _source(source)
    return f"{CACHE_MOUNT}/{src.key}/refs/{src.requested}"


def download_job_name(source: ModelSource) -> str:
    """One Job per (cache claim, source, endpoint, region): backends of the same model share it."""
    ident = "\n".join([cache_claim(source), source.uri or "", source.endpoint or "", source.region or ""])
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


def render_download_job(namespace: str, source: ModelSource, image: str, uid: int) -> dict[str, Any]:
    """The Job that downloads the source into the cache claim (its termination message reports the result)."""
    src = _source(source)
    claim, name = cache_claim(source), download_job_name(source)
    args = ["download", "--source", source.uri or "", "--cache", CACHE_MOUNT,
            "--progress-file", f"{CACHE_MOUNT}/.progress/{name}.json"]
    if source.endpoint:
        args += ["--endpoint", source.endpoint]
    if source.region:
        args += ["--region", source.region]
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                "runAsUser": uid, "runAsGroup": uid, "readOnlyRootFilesystem": True}
    container = {
        "name": "fetch",
        "image": image,
        "command": ["python", "-m", "llmbackend.model_fetch"],
        "args": args,
        "env": _credential_env(source, src),
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": security,
        "terminationMessagePolicy": "File",
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(claim, "model-download"),
                     "annotations": {SOURCE_ANNOTATION: source.uri or ""}},
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                "containerName": "fetch", "operator": "In", "values": PERMANENT_EXIT_CODES}}]},
            "template": {
                "metadata": {"labels": _labels(claim, "model-download")},
                "spec": {
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": uid},
                    "containers": [container],
                    "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": claim}},
                                {"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def serving_volume(source: ModelSource) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) of the cache claim in serving pods: the whole claim, read-only."""
    volume = {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache_claim(source), "readOnly": True}}
    return volume, {"name": "model-cache", "mountPath": CACHE_MOUNT, "readOnly": True}


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
    conditions = {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or []}
    if (conditions.get("Complete") or {}).get("status") == "True":
        return {"phase": "Ready", "reason": "ModelCached", "message": "the checkpoint is complete in the model cache", **progress}
    if (conditions.get("Failed") or {}).get("status") == "True":
        reason = term.get("reason") or conditions["Failed"].get("reason") or "DownloadFailed"
        message = term.get("message") or conditions["Failed"].get("message") or "the download Job failed"
        return {"phase": "Failed", "reason": reason, "message": message, **progress}
    return {"phase": "Downloading", "reason": "Downloading", "message": "the download Job is running", **progress}
