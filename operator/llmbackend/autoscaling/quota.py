"""A namespace's ResourceQuotas on GPUs, as the GPU pool reads them (autoscaling/pool.py: ``Claim.quota``,
``Claim.quota_free``): the free GPUs of the quotas that apply to a backend's pods (their scopes as the API server
reads them), one budget its namespace's backends share, and the GPUs its live pods hold of it."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..planning import quantity
from ..planning.inventory import GPU_RESOURCE, gpu_quantity
from ..planning.podfit import pod_gpus


def quota_replicas(quotas: Iterable[dict], pods: Iterable[dict] | None, gpus_per_replica: int,
                   priority_class: str | None, resource: str = GPU_RESOURCE) -> int | None:
    """The replicas of a backend that its namespace's ResourceQuotas on GPUs admit in all: the GPUs its live pods
    request and the GPUs each quota has free (hard - used; the API server counts at admission), in whole replicas,
    the least over the quotas that apply to its pods (their scopes: a quota of a PriorityClass applies to the pods of
    that class). None: no quota on GPUs applies. ``pods``: the backend's pods (None: not known, none counted).
    The free GPUs are the namespace's: ``quota_free`` names them, so that ``share`` spends them once."""
    own = live_pod_gpus(pods, resource)
    free = quota_free(quotas, priority_class, resource)
    if not free or gpus_per_replica <= 0:
        return None  # a quota on GPUs admits pods that request none
    return min((own + f) // max(1, gpus_per_replica) for _, f in free)


def quota_free(quotas: Iterable[dict], priority_class: str | None,
               resource: str = GPU_RESOURCE) -> tuple[tuple[str, int], ...]:
    """Each of the namespace's ResourceQuotas on GPUs that applies to a backend's pods: (its name and key, the GPUs
    it has free), as ``Claim.quota_free``."""
    out = []
    for quota in quotas:
        if not _quota_applies(quota, priority_class or ""):
            continue
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        name = str((quota.get("metadata") or {}).get("name") or "")
        for key in (f"requests.{resource}", f"limits.{resource}", resource):
            if key in hard:
                out.append((f"{name}/{key}", _free(hard[key], used.get(key, 0))))
    return tuple(out)


def live_pod_gpus(pods: Iterable[dict] | None, resource: str = GPU_RESOURCE) -> int:
    """The GPUs a backend's live pods request (planning/podfit.py pod_gpus): what its namespace's quotas count as
    used by it."""
    return sum(pod_gpus(p, resource) for p in pods or [] if _live(p))


def _live(pod: dict) -> bool:
    return (not (pod.get("metadata") or {}).get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def _free(hard: object, used: object) -> int:
    """The whole GPUs a quota has free: hard - used, rounded down (a pod requests whole GPUs); a hard that is not a
    quantity admits nothing."""
    parsed = quantity.parse(hard)
    return max(0, math.floor(parsed) - gpu_quantity(used)) if parsed is not None else 0


# how a quota scope applies to a serving pod: it runs with no deadline and requests GPUs (not BestEffort)
_SCOPE_MATCHES = {"Terminating": False, "NotTerminating": True, "BestEffort": False, "NotBestEffort": True,
                  "CrossNamespacePodAffinity": False}


def _quota_applies(quota: dict, priority_class: str) -> bool:
    """Whether a ResourceQuota's scopes select a backend's serving pods (all of them must, as the API server reads
    them); a scope it does not know is taken to apply (the cap is then the stricter)."""
    spec = quota.get("spec") or {}
    for scope in spec.get("scopes") or []:
        if not _SCOPE_MATCHES.get(scope, True):
            return False
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        name, op, values = expr.get("scopeName"), expr.get("operator"), expr.get("values") or []
        if name != "PriorityClass":
            if op in ("Exists", "In") and not _SCOPE_MATCHES.get(name, True):
                return False
            if op == "DoesNotExist" and _SCOPE_MATCHES.get(name, True):
                return False
            continue
        if (op == "In" and priority_class not in values) or (op == "NotIn" and priority_class in values) \
                or (op == "Exists" and not priority_class) or (op == "DoesNotExist" and priority_class):
            return False
    return True
