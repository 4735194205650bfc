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

from ..api.adapters import check_adapter
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
ADAPTER_DOWNLOAD_FAILED = "AdapterDownloadFailed"
"""An adapter's download failed without a reason of its own; status.adapters has the message."""
PROBLEM_PHASES = ("Incompatible", "Failed")


def adapter_status(spec: LLMBackendSpec, adapter: AdapterSpec, outcome: dict[str, Any] | None,
                   report: dict[str, Any] | None) -> dict[str, Any]:
    """status.adapters[] of one adapter (wire form), from its download Job's outcome (render/modelcache.job_outcome;
    None for a pvc source) and the Job's report (its termination message: adapterConfig)."""
    source = adapter.source
    shown = mc.pvc_source_label(source.pvc) if source.pvc is not None else source.uri
    entry: dict[str, Any] = {"name": adapter.name, "source": shown, "path": ra.adapter_path(spec, adapter)}
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
    config = (report or {}).get("adapterConfig")
    if config is None and (report or {}).get("adapterConfigError"):
        config = (report or {})["adapterConfigError"]  # not an object: check_adapter names it invalid
    elif config is None:  # a finished Job whose pod (and report) is gone: the copy is there, the check cannot be made
        return {**entry, "phase": "Ready", "reason": ADAPTER_NOT_CHECKED,
                "message": f"adapter {adapter.name} is in the model cache, but its download Job's report "
                           f"(adapter_config.json) is gone with its pod; delete Job "
                           f"{mc.download_job_name(source, adapter=True)} to have it checked again"}
    check = check_adapter(adapter.name, config, spec)
    return {**entry, "phase": "Ready" if check.ok else "Incompatible", "reason": check.reason,
            "message": check.message, **({"rank": check.rank} if check.rank is not None else {})}


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


def sync_adapters(kube: Any, namespace: str, spec: LLMBackendSpec,
                  previous: list[dict[str, Any]] | None = None) -> list[dict[str, Any]] | None:
    """Ensure each URI adapter's cache claim and download Job; status.adapters (None without adapters).
    `previous` (status.adapters): an adapter source no longer named may leave a copy to clean up."""
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
