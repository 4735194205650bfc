"""Gateway API Inference Extension: an InferencePool over the backend's serving pods and its endpoint picker (EPP).

Rendered only when the cluster serves `inference.networking.k8s.io/v1` InferencePools (the controller checks,
as for LeaderWorkerSet and PrometheusRule) and `serving.openai` is on: the pool's target port is the OpenAI
endpoint, the protocol the EPP and the gateways speak. The EPP reads each pod's queue and KV-cache gauges
(names from api/engine_metrics.py) from the same port: the OpenAI frontend serves Triton's /metrics there.

EPP configuration follows the upstream chart of the pinned EPP version (EPP_IMAGE): an EndpointPickerConfig
file (queue, KV-cache and prefix-cache scorers; the core metrics extractor with this project's engine names)
plus the model-server metric flags that version still reads.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..api import engine_metrics as m
from ..api.v1alpha1 import EPP_SUFFIX, Backend, LLMBackendSpec
from . import openai

INFERENCE_POOL_API = ("inference.networking.k8s.io/v1", "inferencepools")  # MANAGED_KINDS reads it from here
EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
EPP_GRPC_PORT = 9002        # ext-proc, what the gateway calls
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
EPP_CONFIG_FILE = "default-plugins.yaml"
EPP_CONFIG_DIR = "/config"
ENGINE_NAME = "llmbackend"  # the core metrics extractor's engine entry for this project's serving models
_READ = ["get", "watch", "list"]
# The operator creates no Roles or RoleBindings (it must not be able to grant rights: tests/e2e/test_security.py).
# The picker's rights are this ClusterRole, shipped in manifests/gateway/, which the user binds to the picker's
# ServiceAccount in the backend's namespace (docs/gateway.md). Rules as in the upstream chart's Roles.
EPP_CLUSTER_ROLE = "llmbackend-endpoint-picker"
EPP_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
    {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": _READ},
    {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": _READ},
]


def epp_name(backend_name: str) -> str:
    return backend_name + EPP_SUFFIX


def metric_specs(spec: LLMBackendSpec) -> dict[str, str]:
    """EPP metric specs (``name{label=value}``) of the gauges the serving model exports ("lora": "" while LoRA is off)."""
    lora = m.LORA_INFO_GAUGE if spec.engine.lora is not None else ""
    if spec.engine.backend == Backend.VLLM:
        return {"queued": m.VLLM_WAITING_GAUGE, "running": m.VLLM_RUNNING_GAUGE, "kv": m.VLLM_KV_USAGE_GAUGE,
                "lora": lora}
    return {
        "queued": f"{m.REQUEST_GAUGE}{{request_type=waiting}}",
        "running": f"{m.REQUEST_GAUGE}{{request_type=scheduled}}",
        "kv": f"{m.KV_GAUGE}{{kv_cache_block_type=fraction}}",
        "lora": lora,
    }


def lora_affinity(spec: LLMBackendSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(plugins, profile entries) of the EPP's lora-affinity-scorer while LoRA is on (spec.adapters): a request for an
    adapter prefers a pod that has it loaded, then one with room to load it (the pinned EPP's
    pkg/epp/scheduling/framework/plugins/scorer/lora_affinity.go `LoraAffinityScorer.Score`, on the LoRA gauge)."""
    if spec.engine.lora is None:
        return [], []
    return [{"type": "lora-affinity-scorer"}], [{"pluginRef": "lora-affinity-scorer", "weight": 1}]


def epp_config(spec: LLMBackendSpec) -> dict[str, Any]:
    specs = metric_specs(spec)
    lora_plugins, lora_profile = lora_affinity(spec)
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "prefix-cache-scorer"},
            *lora_plugins,
            {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
            {"type": "core-metrics-extractor", "parameters": {
                "defaultEngine": ENGINE_NAME,
                "engineConfigs": [{
                    "name": ENGINE_NAME, "queuedRequestsSpec": specs["queued"], "runningRequestsSpec": specs["running"],
                    "kvUsageSpec": specs["kv"], "loraSpec": specs["lora"], "cacheInfoSpec": "",
                }],
            }},
        ],
        "schedulingProfiles": [{"name": "default", "plugins": [
            {"pluginRef": "queue-scorer", "weight": 2},
            {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
            {"pluginRef": "prefix-cache-scorer", "weight": 3},
            *lora_profile,
        ]}],
    }


def cluster_role() -> dict[str, Any]:
    """manifests/gateway/endpoint-picker-rbac.yaml (a unit test keeps the file equal to this)."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": EPP_CLUSTER_ROLE, "labels": {"app.kubernetes.io/part-of": "llmbackend"}},
            "rules": [dict(rule) for rule in EPP_RULES]}


def binding_command(name: str, namespace: str) -> str:
    """What a user with RBAC rights runs once per backend (the operator cannot)."""
    return (f"kubectl -n {namespace} create rolebinding {epp_name(name)} --clusterrole={EPP_CLUSTER_ROLE} "
            f"--serviceaccount={namespace}:{epp_name(name)}")


def render(name: str, namespace: str, spec: LLMBackendSpec, pod_selector: dict[str, str],
           labels: dict[str, str], owner: dict[str, Any]) -> list[dict[str, Any]]:
    """InferencePool + EPP (ServiceAccount, ConfigMap, Deployment, Service), in apply order."""
    epp = epp_name(name)
    epp_labels = {**labels, "app.kubernetes.io/component": "endpoint-picker"}
    epp_selector = {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "endpoint-picker"}

    def meta(obj_name: str, obj_labels: dict[str, str]) -> dict[str, Any]:
        return {"name": obj_name, "namespace": namespace, "labels": obj_labels, "ownerReferences": [owner]}

    specs = metric_specs(spec)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(epp, epp_labels), "automountServiceAccountToken": True},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(epp, epp_labels),
         "data": {EPP_CONFIG_FILE: yaml.safe_dump(epp_config(spec), sort_keys=False)}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(epp, epp_labels), "spec": {
            "replicas": 1,
            "selector": {"matchLabels": epp_selector},
            "template": {"metadata": {"labels": epp_labels}, "spec": {
                "serviceAccountName": epp,
                "terminationGracePeriodSeconds": 130,
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "epp",
                    "image": EPP_IMAGE,
                    "args": [
                        "--pool-name", name, "--pool-namespace", namespace, "--pool-group", "inference.networking.k8s.io",
                        # The model-server metric flags this EPP version still reads besides the config file.
                        "--total-queued-requests-metric", specs["queued"],
                        "--total-running-requests-metric", specs["running"],
                        "--kv-cache-usage-percentage-metric", specs["kv"],
                        "--lora-info-metric", specs["lora"],
                        "--zap-encoder", "json",
                        "--config-file", f"{EPP_CONFIG_DIR}/{EPP_CONFIG_FILE}",
                        "--tracing=false",
                        "--metrics-endpoint-auth=false",  # no cluster-wide TokenReview rights for a per-backend EPP
                    ],
                    "ports": [
                        {"name": "grpc", "containerPort": EPP_GRPC_PORT},
                        {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT},
                        {"name": "metrics", "containerPort": EPP_METRICS_PORT},
                    ],
                    "livenessProbe": {"grpc": {"port": EPP_HEALTH_PORT, "service": "liveness"}, "periodSeconds": 10},
                    "readinessProbe": {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": 2},
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "config", "mountPath": EPP_CONFIG_DIR, "readOnly": True}],
                }],
                "volumes": [{"name": "config", "configMap": {"name": epp}}],
            }},
        }},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(epp, epp_labels), "spec": {
            "type": "ClusterIP",
            "selector": epp_selector,
            "ports": [
                {"name": "grpc-ext-proc", "port": EPP_GRPC_PORT, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "http2"},
                {"name": "http-metrics", "port": EPP_METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        }},
        {"apiVersion": INFERENCE_POOL_API[0], "kind": "InferencePool", "metadata": meta(name, labels), "spec": {
            "selector": {"matchLabels": pod_selector},
            "targetPorts": [{"number": openai.OPENAI_PORT}],
            "endpointPickerRef": {"name": epp, "kind": "Service", "port": {"number": EPP_GRPC_PORT}, "failureMode": "FailOpen"},
        }},
    ]
