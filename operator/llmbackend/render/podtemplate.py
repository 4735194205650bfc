"""spec.serving.podTemplate merged into a serving pod template (Deployment, LeaderWorkerSet leader and worker).

Conflict rule: what the operator sets itself is never overridden. A label or annotation key, env name (per
container), volume name or mount path (per container) that the rendered pod already has is refused with
PodTemplateConflictError (condition reason InvalidPodTemplate), so the backend keeps its selector, hashes,
launch settings and volumes, and the user learns what to rename. A model cache claim (the namespace's default one, or
this backend's) may be mounted only read-only: the operator's download Job alone writes it. Pure: nothing here talks
to the API server.
"""

from __future__ import annotations

from typing import Any

from ..api import conditions as cond
from ..api.v1alpha1 import LLMBackendSpec, PodTemplate, same_mount_path
from .modelcache import CACHE_MOUNT, DEFAULT_CACHE_CLAIM, cache_claim
from .vllm_backend import EngineConfigError


class PodTemplateConflictError(EngineConfigError):
    """The podTemplate collides with what the operator sets; the message names the field and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(cond.INVALID_POD_TEMPLATE, message)


def _refuse(what: str, taken: list[str], where: str) -> None:
    if taken:
        raise PodTemplateConflictError(
            f"spec.serving.podTemplate.{what} sets {', '.join(sorted(taken))}, which the operator already sets on the "
            f"{where}; rename or remove {'it' if len(taken) == 1 else 'them'} in spec.serving.podTemplate")


def _merge_map(meta: dict[str, Any], field: str, extra: dict[str, str] | None, where: str) -> None:
    if not extra:
        return
    current = meta.get(field) or {}
    _refuse(field, [k for k in extra if k in current], where)
    meta[field] = {**current, **extra}


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _refuse_writable_cache(spec: LLMBackendSpec, extra: PodTemplate) -> None:
    source = spec.model.source
    caches = {DEFAULT_CACHE_CLAIM} | ({cache_claim(source)} if source is not None and source.uri else set())
    writable = [v.name for v in extra.volumes or []
                if v.persistent_volume_claim and v.persistent_volume_claim.claim_name in caches
                and not v.persistent_volume_claim.read_only]
    if writable:
        raise PodTemplateConflictError(
            f"spec.serving.podTemplate.volumes {', '.join(sorted(writable))} mount a model cache claim "
            f"({', '.join(sorted(caches))}) writable; only the operator's download Job writes the cache: set "
            "persistentVolumeClaim.readOnly: true, or remove the volume")


def apply_pod_template(template: dict[str, Any], spec: LLMBackendSpec, where: str) -> dict[str, Any]:
    """Merge spec.serving.podTemplate into `template` ({"metadata", "spec"} of a pod template), in place.

    `where` names the template in error messages ("Deployment's pods", "LeaderWorkerSet's worker pods").
    """
    extra: PodTemplate | None = spec.serving.pod_template
    if extra is None:
        return template
    meta, pod = template.setdefault("metadata", {}), template["spec"]
    _merge_map(meta, "labels", extra.labels, where)
    _merge_map(meta, "annotations", extra.annotations, where)
    if extra.image_pull_secrets:
        pod["imagePullSecrets"] = [s.dump() for s in extra.image_pull_secrets]
    if extra.runtime_class_name:
        pod["runtimeClassName"] = extra.runtime_class_name
    # A multi-node MPI leader keeps the launcher account (its Role lets it exec into its workers).
    if extra.service_account_name and "serviceAccountName" not in pod:
        pod["serviceAccountName"] = extra.service_account_name
    _refuse_writable_cache(spec, extra)
    if extra.volumes:
        volumes = pod.setdefault("volumes", [])
        _refuse("volumes", [v.name for v in extra.volumes if v.name in {o["name"] for o in volumes}], where)
        volumes += [v.dump() for v in extra.volumes]
    for container in pod["containers"]:  # Triton and the OpenAI frontend; init containers keep their own
        in_container = f"{where} (container {container['name']})"
        if extra.env:
            env = container.setdefault("env", [])
            _refuse("env", [e.name for e in extra.env if e.name in {o["name"] for o in env}], in_container)
            env += [e.dump() for e in extra.env]
        if extra.env_from:
            container.setdefault("envFrom", []).extend(e.dump() for e in extra.env_from)
        if extra.volume_mounts:
            mounts = container.setdefault("volumeMounts", [])
            taken = {same_mount_path(m["mountPath"]) for m in mounts}
            # The cache copies are mounted one by one under CACHE_MOUNT (render/modelcache.copy_mount): that folder and
            # everything under it stay the operator's, as CACHE_MOUNT itself was when the claim was mounted whole.
            cache_root = any(_within(path, CACHE_MOUNT) for path in taken)
            _refuse("volumeMounts", [m.mount_path for m in extra.volume_mounts if same_mount_path(m.mount_path) in taken
                                     or (cache_root and _within(same_mount_path(m.mount_path), CACHE_MOUNT))],
                    in_container)
            mounts += [m.dump() for m in extra.volume_mounts]
    return template
