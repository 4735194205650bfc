"""Who a child belongs to and what it is called: the backend's identity (BackendRef), the labels and selectors the
operator sets and selects by, child names, and the kinds it owns. Used by every renderer and by the controller."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api.v1alpha1 import (
    GROUP,
    KIND,
    LAUNCHER_SUFFIX,
    MODEL_REPO_SUFFIX,
    SERVING_SUFFIX,
    VERSION,
    LLMBackendSpec,
)
from . import activator, gateway, keda, monitoring, triton

MANAGED_BY = "llmbackend-operator"


BACKEND_LABEL = "llmbackend.dev/backend"


CONFIG_HASH_ANNOTATION = "llmbackend.dev/config-hash"


LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


# Every kind the operator may own, keyed by kind: (apiVersion, plural). The controller prunes
# owned objects of these kinds that are no longer desired.
MANAGED_KINDS: dict[str, tuple[str, str]] = {
    "ConfigMap": ("v1", "configmaps"),
    "Service": ("v1", "services"),
    "Deployment": ("apps/v1", "deployments"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
    # The serving pods' own account (render/workloads.py), and for multi-node groups the MPI leader's exec rights
    # (render/multinode.py: a binding of the fixed launcher ClusterRole; the operator creates no Roles) and GB200
    # IMEX domains.
    "ServiceAccount": ("v1", "serviceaccounts"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    "ComputeDomain": ("resource.nvidia.com/v1beta1", "computedomains"),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets"),
    "HorizontalPodAutoscaler": ("autoscaling/v2", "horizontalpodautoscalers"),
    "PrometheusRule": ("monitoring.coreos.com/v1", "prometheusrules"),
    "ScaledObject": keda.SCALED_OBJECT_API,
    "InferencePool": gateway.INFERENCE_POOL_API,
    "PodMonitor": monitoring.POD_MONITOR_API,
}


PROMETHEUS_RULE_API = MANAGED_KINDS["PrometheusRule"]


# Kinds served only when their CRDs are installed: looked up (and pruned) only then.
OPTIONAL_KINDS = ("LeaderWorkerSet", "PrometheusRule", "ScaledObject", "InferencePool", "ComputeDomain", "PodMonitor")


def owned_names(ref: BackendRef) -> list[tuple[str, str]]:
    """Every (kind, name) the operator may create for a backend (tests/unit/test_child_names.py proves two backends'
    never meet). Children an older version named otherwise are found by the backend's label and pruned, not here."""
    epp = gateway.epp_name(ref.name)
    names = [(kind, config_map_name(ref) if kind == "ConfigMap" else ref.name) for kind in MANAGED_KINDS
             if kind not in ("ServiceAccount", "RoleBinding")] + [
        ("ServiceAccount", launcher_account_name(ref)), ("RoleBinding", launcher_account_name(ref)),
        ("ServiceAccount", serving_account_name(ref))]
    return names + [(kind, epp) for kind in ("ServiceAccount", "ConfigMap", "Deployment", "Service")] + [
        ("Deployment", activator.deployment_name(ref.name)), ("Service", activator.serving_service_name(ref.name))]


@dataclass(frozen=True)
class BackendRef:
    """Identity of the LLMBackend that owns the children."""

    name: str
    namespace: str
    uid: str

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def labels_for(ref: BackendRef, component: str = "server") -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "triton",
        "app.kubernetes.io/instance": ref.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "llmbackend",
        BACKEND_LABEL: ref.name,
    }


def selector_for(ref: BackendRef) -> dict[str, str]:
    return {BACKEND_LABEL: ref.name, "app.kubernetes.io/component": "server"}


def activator_selector(ref: BackendRef) -> dict[str, str]:
    return {BACKEND_LABEL: ref.name, "app.kubernetes.io/component": activator.COMPONENT}


def label_selector(labels: dict[str, str]) -> str:
    """The labelSelector query string that matches ``labels``."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def selector_string(ref: BackendRef) -> str:
    return label_selector(selector_for(ref))


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (as the kubelet reports it; terminating pods included)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def serving_pod_ready(pod: dict[str, Any]) -> bool:
    """Ready and not terminating: a pod a Service sends requests to, or whose engine metrics count."""
    return not pod["metadata"].get("deletionTimestamp") and pod_ready(pod)


def object_meta(ref: BackendRef, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": labels or labels_for(ref),
        "ownerReferences": [ref.owner_reference()],
    }


# Kubernetes and cloud workload identities (a RoleBinding subject, GKE Workload Identity, EKS Pod Identity) name a
# ServiceAccount by namespace and name alone. So the accounts the operator creates carry a tag of the backend's uid:
# a name nobody could bind before the backend existed, and a new one for a backend deleted and created again
# (docs/security.md, "Trust model"). 10 hex digits (40 bits): guessing a name an admin already bound by creating
# backends until one's uid fits would take some 10^12 creates. No '-' in it, so the names stay unambiguous
# (tests/unit/test_child_names.py) and manifests/default/launcher-admission.yaml can strip it by its length.
ACCOUNT_TAG_LENGTH = 10


def account_tag(ref: BackendRef) -> str:
    return hashlib.sha256(ref.uid.encode()).hexdigest()[:ACCOUNT_TAG_LENGTH]


def serving_account_name(ref: BackendRef) -> str:
    """The serving pods' own ServiceAccount when spec.serving.podTemplate names none (render/workloads.py):
    <backend>-serving-<tag>."""
    return f"{ref.name}{SERVING_SUFFIX}-{account_tag(ref)}"


def launcher_account_name(ref: BackendRef) -> str:
    """A multi-node MPI leader's ServiceAccount and the RoleBinding of the launcher ClusterRole to it share this name,
    <backend>-launcher-<tag>. manifests/default/launcher-admission.yaml relies on it: a launcher binding's only
    subject is the ServiceAccount of its own name and namespace, and such an account execs only into the workers of
    its own backend's leader, the backend its name names."""
    return f"{ref.name}{LAUNCHER_SUFFIX}-{account_tag(ref)}"


def config_map_name(ref: BackendRef) -> str:
    return ref.name + MODEL_REPO_SUFFIX


def model_name(ref: BackendRef, spec: LLMBackendSpec) -> str:
    return spec.model.name or spec.model.preset or ref.name


def metrics_model(ref: BackendRef, spec: LLMBackendSpec) -> str:
    """The Triton model whose queue/compute times drive autoscaling: the engine, not the ensemble."""
    if triton.is_engine_ensemble(spec.engine.backend, spec.engine.format):
        return "tensorrt_llm"
    return triton.served_model_name(spec.engine.backend, model_name(ref, spec), spec.engine.format)

