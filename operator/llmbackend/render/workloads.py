"""Desired Kubernetes objects for one LLMBackend: pure functions of (backend identity, spec, plan, replicas).

The controller applies what `desired_objects()` returns with server-side apply and deletes owned
objects of the managed kinds that are no longer desired. Nothing here talks to the API server.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from ..api.v1alpha1 import (
    OPERATOR_IMAGE,
    AutoscalingMode,
    LLMBackendSpec,
    PlanStatus,
)
from . import activator, gateway, keda, monitoring, openai, triton
from .hpa import render_hpa, render_prometheus_rule
from .multinode import multi_node_objects, needs_compute_domain
from .names import (
    BACKEND_LABEL,
    CONFIG_HASH_ANNOTATION,
    LWS_WORKER_INDEX_LABEL,
    BackendRef,
    activator_selector,
    labels_for,
    metrics_model,
    object_meta,
    selector_for,
)
from .podtemplate import apply_pod_template
from .servingpod import (
    config_hash,
    render_config_map,
    render_serving_account,
    serving_pod_spec,
    uses_serving_account,
    with_serving_account,
)


@dataclass(frozen=True)
class RolloutStrategy:
    """How to replace pods on a spec change, decided from free GPU capacity."""

    type: Literal["RollingUpdate", "Recreate"]
    max_surge: int = 0
    max_unavailable: int = 0

    def to_k8s(self) -> dict[str, Any]:
        if self.type == "Recreate":
            return {"type": "Recreate"}
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": self.max_surge, "maxUnavailable": self.max_unavailable}}


def choose_rollout_strategy(replicas: int, spare_replicas: int) -> tuple[RolloutStrategy, str]:
    """Surge when the cluster can hold one more replica; otherwise replace in place.

    `spare_replicas`: whole replicas the matching nodes could hold beyond `replicas`.
    """
    if spare_replicas >= 1:
        return RolloutStrategy("RollingUpdate", 1, 0), "one spare replica of GPUs: surge one new pod before removing an old one"
    if replicas > 1:
        return RolloutStrategy("RollingUpdate", 0, 1), "no spare GPUs for a surge: replace one pod at a time"
    return RolloutStrategy("Recreate"), "no spare GPUs for a surge and a single replica: recreate (brief downtime)"


def render_deployment(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, replicas: int | None, strategy: RolloutStrategy,
    config_map: dict[str, Any],
) -> dict[str, Any]:
    """replicas=None leaves the field to another owner (the HPA in autoscaling mode hpa)."""
    pod = serving_pod_spec(ref, spec, plan, config_map, role="server", world_size=plan.gpus_per_replica)
    # Spread replicas over nodes (soft: an 8-GPU replica fills a node anyway).
    pod["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": selector_for(ref)},
    }]
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(ref, ref.name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_for(ref)},
            "strategy": strategy.to_k8s(),
            "progressDeadlineSeconds": 3600,  # engines take minutes to load; 1 h before "stuck"
            "template": with_serving_account(ref, apply_pod_template({
                "metadata": {"labels": labels_for(ref), "annotations": {CONFIG_HASH_ANNOTATION: config_hash(config_map)}},
                "spec": pod,
            }, spec, "Deployment's pods")),
        },
    }
    if replicas is None:
        del deployment["spec"]["replicas"]
    return deployment


def render_service(ref: BackendRef, multi_node: bool, openai_port: bool = False, to_activator: bool = False) -> dict[str, Any]:
    """The backend's Service. to_activator: no Ready serving pod (or scaled to 0), the activator receives requests."""
    selector = selector_for(ref)
    if multi_node:
        selector = {**selector, LWS_WORKER_INDEX_LABEL: "0"}  # only leaders serve
    if to_activator:
        selector = activator_selector(ref)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, ref.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": "http", "port": triton.HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": triton.GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "metrics", "port": triton.METRICS_PORT, "targetPort": monitoring.METRICS_PORT_NAME,
                 "protocol": "TCP"},
                *([openai.service_port()] if openai_port else []),
            ],
        },
    }


def render_pdb(ref: BackendRef) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(ref, ref.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_for(ref)}},
    }


def minimum_replicas(spec: LLMBackendSpec) -> int:
    return spec.autoscaling.min_replicas if spec.autoscaling.enabled else spec.replicas


def desired_objects(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, replicas: int, strategy: RolloutStrategy,
    prometheus_rules: bool = False, compute_domains: bool = False, gang_scheduler: str | None = None,
    scaled_objects: bool = True, inference_pool: bool = False, serving_ready: bool = False,
    operator_image: str = OPERATOR_IMAGE, pod_monitor: bool = False, ready_adapters: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """Everything one LLMBackend should own, in apply order (config before the pods that mount it).

    prometheus_rules: the PrometheusRule CRD is served, so `mode: hpa`/`keda` also own their recording rule.
    compute_domains: the ComputeDomain CRD (NVIDIA DRA driver) is served: a plan whose tensor
    parallelism spans an NVLink clique gets one, and its pods claim the IMEX channel.
    gang_scheduler: "volcano" or "kueue" places multi-node groups whole (multinode.choose_gang_scheduler).
    scaled_objects: KEDA's ScaledObject CRD is served (`mode: keda` renders one).
    inference_pool: the InferencePool CRD is served: with serving.openai, render the pool and its endpoint picker.
    serving_ready: a serving pod is Ready. With scale to zero (render/activator.py) the Service selects the activator
    while none is, or while replicas is 0; operator_image: the activator's image.
    pod_monitor: the PodMonitor CRD (Prometheus Operator) is served: Prometheus scrapes the serving pods.
    ready_adapters: the adapters of spec.adapters the pods are told to serve (None: all; render/adapters.py).
    """
    multi_node = plan.nodes_per_replica > 1
    hpa_mode = spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.HPA
    keda_mode = spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.KEDA
    config_map = render_config_map(ref, spec, plan, ready_adapters)
    objects = [config_map]
    if uses_serving_account(spec):  # before the workload whose pods name it
        objects.append(render_serving_account(ref))
    with_activator = activator.enabled(spec)
    if with_activator:  # before the workload: it receives the requests that wait for the first replica
        objects += activator.render(ref.name, ref.namespace, spec, render_service(ref, multi_node, openai.enabled(spec)),
                                    labels_for(ref, activator.COMPONENT), activator_selector(ref),
                                    ref.owner_reference(), operator_image)
    if multi_node:
        objects += multi_node_objects(ref, spec, plan, replicas, config_map, compute_domains and needs_compute_domain(plan),
                                      gang_scheduler)
    else:
        objects.append(render_deployment(ref, spec, plan, None if hpa_mode or keda_mode else replicas, strategy, config_map))
    objects.append(render_service(ref, multi_node, openai.enabled(spec),
                                  to_activator=with_activator and (replicas == 0 or not serving_ready)))
    if max(minimum_replicas(spec), replicas) > 1:
        objects.append(render_pdb(ref))
    if hpa_mode or keda_mode:
        workload = next(o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet"))
        target = {"apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": workload["metadata"]["name"]}
        if hpa_mode:
            scaler = render_hpa(ref.name, ref.namespace, target, spec.autoscaling, labels_for(ref))
        else:
            scaler = keda.render_scaled_object(ref.name, ref.namespace, target, spec.autoscaling, labels_for(ref))
        scaler["metadata"]["ownerReferences"] = [ref.owner_reference()]
        if hpa_mode or scaled_objects:
            objects.append(scaler)
        if prometheus_rules:
            rule = render_prometheus_rule(ref.name, ref.namespace, metrics_model(ref, spec), labels_for(ref),
                                          window_seconds=spec.autoscaling.window_seconds)
            rule["metadata"]["ownerReferences"] = [ref.owner_reference()]
            objects.append(rule)
    if pod_monitor:
        objects.append(render_serving_pod_monitor(ref, multi_node))
    if inference_pool and openai.enabled(spec):
        pool_selector = {**selector_for(ref), LWS_WORKER_INDEX_LABEL: "0"} if multi_node else selector_for(ref)
        objects += gateway.render(ref.name, ref.namespace, spec, pool_selector, labels_for(ref), ref.owner_reference())
    return objects


def render_serving_pod_monitor(ref: BackendRef, multi_node: bool) -> dict[str, Any]:
    """The backend's PodMonitor: the pods that expose the metrics port (multi-node: the leaders)."""
    selector = {**selector_for(ref), LWS_WORKER_INDEX_LABEL: "0"} if multi_node else selector_for(ref)
    return monitoring.render_pod_monitor(ref.name, ref.namespace, selector, BACKEND_LABEL, labels_for(ref),
                                         ref.owner_reference())

