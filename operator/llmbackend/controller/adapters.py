"""Reconcile step for spec.adapters: each URI adapter is downloaded once into the model cache by the same download
machinery as the base model (render/modelcache.py: a shared, unowned Job per source, `model_fetch download
--adapter`), and its adapter_config.json, reported by that Job, is checked against the base model
(api/adapters.check_adapter). The result is status.adapters; the adapters in phase Ready are the ones the serving pods
are told of (render/adapters.py). An adapter that does not fit turns Degraded with its reason (the base model and
the other adapters are served all the same).

The operator never reads an adapter itself: a pvc adapter's adapter_config.json is not read (no inspector Job): it is
listed Ready with a message saying so, and the engine checks it when a request names it.
"""

from __future__ import annotations

import logging
from typing import Any

from ..api.adapters import ADAPTER_CONFIG_INVALID, check_adapter
from ..api.v1alpha1 import AdapterSpec, LLMBackendSpec
from ..model_fetch import FetchError
from ..render import adapters as ra
from ..render import modelcache as mc
from ..render.servingpod import SERVING_UID
from .egress import settings
from .kube import ApiError
from .modelcache import (
    _cleanup_owed,
    _create_if_missing,
    _job_pods,
    _namespace_lock,
    _termination,
    cleanup_model_caches_safely,
    downloader_image,
)

log = logging.getLogger(__name__)

ADAPTER_NOT_CHECKED = "AdapterNotChecked"
"""status.adapters: an adapter is served without its adapter_config.json checked (a pvc adapter, which the operator
does not read; or a download whose report is gone with its pod): the engine checks it at the first request."""
ADAPTER_NAME_TAKEN = "AdapterNameIsBaseModel"
"""An adapter has the name the base model is served as (the backend's name while spec.model.name and
spec.model.preset are unset), so requests for it would reach the base model; it is not served: rename it, or set
spec.model.name."""
ADAPTER_REPORT_UNREADABLE = "AdapterReportUnreadable"
"""An adapter's finished download Job left a report without its adapter_config.json (not JSON: the kubelet keeps at
most 4 KiB of it), so the adapter cannot be checked; it is not served: delete the Job to have it checked again."""
ADAPTER_DOWNLOAD_FAILED = "AdapterDownloadFailed"
"""An adapter's download failed without a reason of its own; status.adapters has the message."""
PROBLEM_PHASES = ("Incompatible", "Failed")


def _entry(spec: LLMBackendSpec, adapter: AdapterSpec) -> dict[str, Any]:
    source = adapter.source
    shown = mc.pvc_source_label(source.pvc) if source.pvc is not None else source.uri
    return {"name": adapter.name, "source": shown, "path": ra.adapter_path(spec, adapter)}


def adapter_status(spec: LLMBackendSpec, adapter: AdapterSpec, outcome: dict[str, Any] | None,
                   report: dict[str, Any] | None) -> dict[str, Any]:
    """status.adapters[] of one adapter (wire form), from its download Job's outcome (render/modelcache.job_outcome;
    None for a pvc source) and the Job's report (its termination message: adapterConfig)."""
    source = adapter.source
    entry = _entry(spec, adapter)
    if outcome is None:
        return {**entry, "phase": "Ready", "reason": ADAPTER_NOT_CHECKED,
                "message": f"adapter {adapter.name} is read from a claim: its adapter_config.json is not checked by "
                           "the operator; the engine refuses it at the first request if it does not fit"}
    if outcome["phase"] == "Failed":
        return {**entry, "phase": "Failed", "reason": outcome.get("reason") or ADAPTER_DOWNLOAD_FAILED,
                "message": f"adapter {adapter.name}: {outcome.get('message', '')}"[:4096]}
    if outcome["phase"] != "Ready":
        return {**entry, "phase": "Pending" if outcome["phase"] == "Resolving" else "Downloading",
                "reason": outcome.get("reason"), "message": outcome.get("message")}
    job = mc.download_job_name(source, adapter=True)
    config = (report or {}).get("adapterConfig")
    if config is None and (report or {}).get("adapterConfigError"):  # the program says what is wrong with the file
        return {**entry, "phase": "Incompatible", "reason": ADAPTER_CONFIG_INVALID,
                "message": f"adapter {adapter.name}: {str((report or {})['adapterConfigError'])[:1024]}"}
    if config is None and report is not None:
        # A finished Job's report without adapter_config.json (unparsable: cut at 4 KiB by the kubelet): what would
        # have been checked is unknown, so the adapter is not served (never "not checked", which skips the check).
        return {**entry, "phase": "Incompatible", "reason": ADAPTER_REPORT_UNREADABLE,
                "message": f"adapter {adapter.name}: its download Job's report does not hold adapter_config.json "
                           "(the report is cut, or not the download program's), so the adapter cannot be checked and is "
                           f"not served; delete Job {job} to have it downloaded and checked again"}
    if config is None:  # a finished Job whose pod (and report) is gone: the copy is there, the check cannot be made
        return {**entry, "phase": "Ready", "reason": ADAPTER_NOT_CHECKED,
                "message": f"adapter {adapter.name} is in the model cache, but its download Job's report "
                           f"(adapter_config.json) is gone with its pod; delete Job {job} to have it checked again"}
    check = check_adapter(adapter.name, config, spec)
    return {**entry, "phase": "Ready" if check.ok else "Incompatible", "reason": check.reason,
            "message": check.message, **({"rank": check.rank} if check.rank is not None else {})}


def name_taken(spec: LLMBackendSpec, adapter: AdapterSpec) -> dict[str, Any]:
    """status.adapters[] of an adapter named as the base model is served: without spec.model.name or a preset that is
    the backend's own name, which the CRD cannot compare in every case (a backend stored before its rule). Requests
    naming it would reach the base model, so it is neither downloaded nor served."""
    return {**_entry(spec, adapter), "phase": "Incompatible", "reason": ADAPTER_NAME_TAKEN,
            "message": f"adapter {adapter.name} has the name the base model is served as (the backend's name, since "
                       "spec.model.name and spec.model.preset are not set): requests for it would reach the base "
                       "model; rename the adapter, or set spec.model.name to another name"}


def ready_adapters(statuses: list[dict[str, Any]] | None) -> set[str] | None:
    """The adapters the pods may serve; None when there is no status (nothing listed would be a wrong answer)."""
    if statuses is None:
        return None
    return {s["name"] for s in statuses if s.get("phase") == "Ready"}


def adapters_problem(statuses: list[dict[str, Any]] | None) -> tuple[str, str] | None:
    """(reason, message) of the Degraded condition when an adapter cannot be served, else None."""
    bad = [s for s in statuses or [] if s.get("phase") in PROBLEM_PHASES]
    if not bad:
        return None
    more = f" ({len(bad) - 1} more adapter(s) cannot be served: see status.adapters)" if len(bad) > 1 else ""
    return str(bad[0].get("reason") or ADAPTER_DOWNLOAD_FAILED), (
        f"{bad[0].get('message', '')}{more}; the base model and the other adapters are served")


def sync_adapters(kube: Any, namespace: str, spec: LLMBackendSpec, previous: list[dict[str, Any]] | None = None, *,
                  served_model: str) -> list[dict[str, Any]] | None:
    """Ensure each URI adapter's cache claim and download Job; status.adapters (None without adapters).
    `previous` (status.adapters): an adapter source no longer named may leave a copy to clean up. `served_model`:
    the base model's name at the endpoints (render/names.model_name), which no adapter may take."""
    named = {a.source.uri for a in spec.adapters or []}
    if any(str(p.get("source") or "").startswith(("hf://", "s3://")) and p.get("source") not in named
           for p in previous or []):
        _cleanup_owed.add(namespace)  # the cleanup of sync_model_cache runs it (render/modelcache.cache_cleanups)
        cleanup_model_caches_safely(kube, namespace)
    if not spec.adapters:
        return None
    out = []
    for adapter in spec.adapters:
        source = adapter.source
        if adapter.name == served_model:
            out.append(name_taken(spec, adapter))
            continue
        if source.uri is None:
            out.append(adapter_status(spec, adapter, None, None))
            continue
        try:
            out.append(_sync_one(kube, namespace, spec, adapter))
        except FetchError as err:  # stored before the API server checked what the program checks
            out.append(adapter_status(spec, adapter, {"phase": "Failed", "reason": err.reason, "message": str(err)},
                                      None))
        except ApiError as err:
            log.info("adapter %s/%s: %s", namespace, adapter.name, err)
            out.append(adapter_status(spec, adapter, {"phase": "Resolving", "reason": "ApiRequestFailed",
                                                      "message": str(err)}, None))
    return out


def _sync_one(kube: Any, namespace: str, spec: LLMBackendSpec, adapter: AdapterSpec) -> dict[str, Any]:
    source = adapter.source
    mc.ref_path(source)  # FetchError for a URI the download program refuses
    if source.secret_ref is not None and not settings.credentials_may_go_to(source.endpoint):
        return adapter_status(spec, adapter, {"phase": "Failed", "reason": "EndpointNotAllowed", "message": (
            f"source.endpoint {source.endpoint} is not an endpoint this operator sends credentials to; Secret "
            f"{source.secret_ref.name} is not used and nothing is downloaded")}, None)
    claim = mc.cache_claim(source)
    if kube.get("PersistentVolumeClaim", namespace, claim) is None:
        _create_if_missing(kube, mc.render_cache_claim(namespace, source, None))
    name = mc.download_job_name(source, adapter=True)
    with _namespace_lock(namespace):  # never start a download while a cleanup of the claim runs
        job = kube.get("Job", namespace, name)
        if job is not None and job["metadata"].get("deletionTimestamp"):
            # Being deleted (replaced below on an earlier pass, or by a cleanup): neither its report nor its copy is
            # this adapter's any more; its own Job is created once it is gone.
            return adapter_status(spec, adapter, {"phase": "Resolving", "reason": "DownloadPending", "message": (
                f"Job {name} is being deleted; the adapter's download Job is created when it is gone")}, None)
        if job is not None and mc.is_download_job(job, source) and not mc.credentials_match(job, source):
            # As the base model's Job (controller/modelcache.sync_model_cache): a Job of this name that reads another
            # Secret (or none) is never trusted, whatever its name hashes today; replaced by this backend's own.
            kube.delete("Job", namespace, name, uid=job["metadata"].get("uid"))
            log.info("adapter %s/%s: Job %s read Secret(s) %s, not %s: replaced", namespace, adapter.name, name,
                     ", ".join(mc.job_secrets(job)) or "none", mc.download_secret(source) or "none")
            return adapter_status(spec, adapter, {"phase": "Resolving", "reason": "DownloadPending", "message": (
                f"Job {name} read another Secret than this adapter's source.secretRef; it was deleted and the "
                "adapter's own download Job is created next")}, None)
        if job is None:
            job = _create_if_missing(kube, mc.render_download_job(namespace, source, downloader_image(), SERVING_UID,
                                                                  adapter=True))
    if not mc.is_download_job(job, source):
        return adapter_status(spec, adapter, {"phase": "Failed", "reason": "ResourceExists", "message": (
            f"Job {name} exists but is not the operator's download Job for {source.uri}; delete it")}, None)
    report, config_error = _termination(kube, namespace, _job_pods(kube, job))
    outcome = mc.job_outcome(job, report)
    if config_error and outcome["phase"] != "Ready":
        outcome = {"phase": "Failed", "reason": "SecretNotFound", "message": f"the download Job cannot start: "
                   f"{config_error}; create the Secret adapter {adapter.name}'s source.secretRef names"}
    return adapter_status(spec, adapter, outcome, report)
