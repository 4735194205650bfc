"""Desired Kubernetes objects for one LLMBackend: pure functions of (backend identity, spec, plan, replicas).

The controller applies what `desired_objects()` returns with server-side apply and deletes owned
objects of the managed kinds that are no longer desired. Nothing here talks to the API server.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Any

from ..api.v1alpha1 import (
    DEFAULT_TRITON_IMAGE,
    DEFAULT_VLLM_IMAGE,
    GROUP,
    KIND,
    VERSION,
    AutoscalingMode,
    Backend,
    LLMBackendSpec,
    PlanStatus,
)
from . import modelcache, triton

MANAGED_BY = "llmbackend-operator"
BACKEND_LABEL = "llmbackend.dev/backend"
CONFIG_HASH_ANNOTATION = "llmbackend.dev/config-hash"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
CONFIG_MOUNT = "/model-config"
HOSTFILE = "/tmp/hostfile"
SERVING_UID = 1000  # the Triton images' triton-server user

# Every kind the operator may own, keyed by kind: (apiVersion, plural). The controller prunes
# owned objects of these kinds that are no longer desired.
MANAGED_KINDS: dict[str, tuple[str, str]] = {
    "ConfigMap": ("v1", "configmaps"),
    "Service": ("v1", "services"),
    "Deployment": ("apps/v1", "deployments"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets"),
    "HorizontalPodAutoscaler": ("autoscaling/v2", "horizontalpodautoscalers"),
    "PrometheusRule": ("monitoring.coreos.com/v1", "prometheusrules"),
}
PROMETHEUS_RULE_API = MANAGED_KINDS["PrometheusRule"]


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


@dataclass(frozen=True)
class RolloutStrategy:
    """How to replace pods on a spec change, decided from free GPU capacity."""

    type: str  # RollingUpdate | Recreate
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


def selector_string(ref: BackendRef) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_for(ref).items())


def _meta(ref: BackendRef, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": labels or labels_for(ref),
        "ownerReferences": [ref.owner_reference()],
    }


def config_map_name(ref: BackendRef) -> str:
    return f"{ref.name}-model-repo"


def model_name(ref: BackendRef, spec: LLMBackendSpec) -> str:
    return spec.model.name or spec.model.preset or ref.name


def metrics_model(ref: BackendRef, spec: LLMBackendSpec) -> str:
    """The Triton model whose queue/compute times drive autoscaling: the engine, not the ensemble."""
    if spec.engine.backend == Backend.TENSORRTLLM:
        return "tensorrt_llm"
    return triton.served_model_name(spec.engine.backend, model_name(ref, spec))


def image_for(spec: LLMBackendSpec) -> str:
    if spec.engine.image:
        return spec.engine.image
    return DEFAULT_VLLM_IMAGE if spec.engine.backend == Backend.VLLM else DEFAULT_TRITON_IMAGE


def _config_key(path: str) -> str:
    # ConfigMap keys may not contain '/'; the volume's items map them back to paths.
    return path.replace("/", "__")


def render_config_map(ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus) -> dict[str, Any]:
    files = triton.render_model_repository(spec, model_name(ref, spec), plan.tensor_parallel, plan.pipeline_parallel)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ref, config_map_name(ref)),
        "data": {_config_key(path): content for path, content in sorted(files.items())},
    }


def _config_hash(config_map: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config_map["data"], sort_keys=True).encode()).hexdigest()[:16]


def _copy_repository_script(spec: LLMBackendSpec, ref: BackendRef) -> str:
    """Init step: assemble the writable model repository from the ConfigMap (and the image's Python models).

    Every interpolated value is a validated constant or model name, and shell-quoted anyway.
    """
    repo = triton.MODEL_REPOSITORY
    steps = [f"cp -rL {CONFIG_MOUNT}/. {repo}/"]
    for directory in triton.version_dirs(spec.engine.backend, model_name(ref, spec)):
        steps.append(f"mkdir -p {shlex.quote(repo + '/' + directory)}")
    if spec.engine.backend == Backend.TENSORRTLLM:
        for target, source in sorted(triton.IMAGE_PYTHON_MODELS.items()):
            steps.append(f"cp {shlex.quote(source)} {shlex.quote(repo + '/' + target)}")
    return " && ".join(steps)


def _shm_size(gpus_per_pod: int) -> str:
    # NCCL and the Python backend use /dev/shm; multi-GPU pods need room for NCCL buffers per rank.
    return f"{2 + 4 * max(0, gpus_per_pod - 1) if gpus_per_pod > 1 else 2}Gi"


def _pod_spec(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, config_map: dict[str, Any], *, role: str, world_size: int
) -> dict[str, Any]:
    """Pod spec of a single-node replica (role=server), or of an LWS leader/worker."""
    gpus_per_pod = plan.gpus_per_replica // max(1, plan.nodes_per_replica)
    image = image_for(spec)
    backend = spec.engine.backend
    if role == "worker":
        # Workers host MPI ranks launched by the leader; they serve nothing themselves.
        args = ["sleep", "infinity"]
        command: list[str] | None = None
    elif role == "leader":
        # Wait for the group, write the hostfile, then mpirun (argv passed as "$@", never interpolated).
        script = (
            'set -e; : > "$HOSTFILE"; i=0; while [ "$i" -lt "$LWS_GROUP_SIZE" ]; do '
            'if [ "$i" -eq 0 ]; then h="$LWS_LEADER_ADDRESS"; else h="$(echo "$LWS_LEADER_ADDRESS" | sed "s/^\\([^.]*\\)\\./\\1-$i./")"; fi; '
            'echo "$h slots=$GPUS_PER_POD" >> "$HOSTFILE"; i=$((i+1)); done; exec "$@"'
        )
        command = ["/bin/sh", "-c", script, "leader"]
        args = triton.mpi_leader_command(world_size, HOSTFILE)
    else:
        command = None
        args = triton.triton_command(triton.MODEL_REPOSITORY, plan.tensor_parallel, plan.pipeline_parallel, backend)

    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": str(gpus_per_pod)}, "requests": {"nvidia.com/gpu": str(gpus_per_pod)}}
    if spec.scheduling.resources:
        for key in ("cpu", "memory"):
            value = getattr(spec.scheduling.resources, key)
            if value:
                resources["requests"][key] = value
                resources["limits"][key] = value

    volume_mounts = [
        {"name": "model-repository", "mountPath": triton.MODEL_REPOSITORY},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "model-repository", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _shm_size(gpus_per_pod)}},
        {"name": "tmp", "emptyDir": {}},
        {
            "name": "model-config",
            "configMap": {
                "name": config_map["metadata"]["name"],
                "items": [{"key": key, "path": key.replace("__", "/")} for key in sorted(config_map["data"])],
            },
        },
    ]
    source = spec.model.source
    if source is not None and source.pvc is not None:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": source.pvc.claim_name, "readOnly": True}})
        mount = {"name": "models", "mountPath": triton.MODELS_DIR, "readOnly": True}
        sub_path = source.pvc.path.strip("/")
        if sub_path:
            mount["subPath"] = sub_path
        volume_mounts.append(mount)
    if source is not None and source.uri is not None:
        cache_volume, cache_mount = modelcache.serving_volume(source)
        volumes.append(cache_volume)
        volume_mounts.append(cache_mount)

    container: dict[str, Any] = {
        "name": "triton",
        "image": image,
        "args": args,
        "env": [
            {"name": "GPUS_PER_POD", "value": str(gpus_per_pod)},
            {"name": "HOSTFILE", "value": HOSTFILE},
        ],
        "resources": resources,
        "volumeMounts": volume_mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": SERVING_UID,
            "runAsGroup": SERVING_UID,
        },
    }
    if command:
        container["command"] = command
    if source is not None and source.uri is not None:
        container["env"].append({"name": "MODEL_PATH", "value": modelcache.model_path(source)})
    if role != "worker":
        container["ports"] = [
            {"name": "http", "containerPort": triton.HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": triton.GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": triton.METRICS_PORT, "protocol": "TCP"},
        ]
        # Large engines load for minutes: the startup probe allows up to 30 minutes before liveness applies.
        container["startupProbe"] = {
            "httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 10, "failureThreshold": 180,
        }
        container["readinessProbe"] = {
            "httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5, "failureThreshold": 3,
        }
        container["livenessProbe"] = {
            "httpGet": {"path": "/v2/health/live", "port": "http"}, "periodSeconds": 10, "failureThreshold": 6,
        }

    init = {
        "name": "model-repository",
        "image": image,
        "command": ["/bin/sh", "-c", _copy_repository_script(spec, ref)],
        "volumeMounts": [
            {"name": "model-repository", "mountPath": triton.MODEL_REPOSITORY},
            {"name": "model-config", "mountPath": CONFIG_MOUNT, "readOnly": True},
        ],
        "securityContext": container["securityContext"],
    }

    node_selector = dict(spec.scheduling.node_selector or {})
    if plan.gpu_product:
        node_selector.setdefault("nvidia.com/gpu.product", plan.gpu_product)
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 60,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": SERVING_UID},
        "initContainers": [init] + (
            [modelcache.wait_init_container(source, image, container["securityContext"])]
            if source is not None and source.uri is not None else []),
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": node_selector,
    }
    if spec.scheduling.tolerations:
        pod["tolerations"] = [t.dump() for t in spec.scheduling.tolerations]
    if spec.scheduling.priority_class_name:
        pod["priorityClassName"] = spec.scheduling.priority_class_name
    return pod


def render_deployment(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, replicas: int | None, strategy: RolloutStrategy,
    config_map: dict[str, Any],
) -> dict[str, Any]:
    """replicas=None leaves the field to another owner (the HPA in autoscaling mode hpa)."""
    pod = _pod_spec(ref, spec, plan, config_map, role="server", world_size=plan.gpus_per_replica)
    # Spread replicas over nodes (soft: an 8-GPU replica fills a node anyway).
    pod["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": selector_for(ref)},
    }]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ref, ref.name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_for(ref)},
            "strategy": strategy.to_k8s(),
            "progressDeadlineSeconds": 3600,  # engines take minutes to load; 1 h before "stuck"
            "template": {
                "metadata": {"labels": labels_for(ref), "annotations": {CONFIG_HASH_ANNOTATION: _config_hash(config_map)}},
                "spec": pod,
            },
        },
    }
    if replicas is None:
        del deployment["spec"]["replicas"]
    return deployment


def render_leader_worker_set(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, replicas: int, config_map: dict[str, Any]
) -> dict[str, Any]:
    """A multi-node replica: one LWS group of nodesPerReplica pods; the leader launches MPI over the group."""
    annotations = {CONFIG_HASH_ANNOTATION: _config_hash(config_map)}
    leader = _pod_spec(ref, spec, plan, config_map, role="leader", world_size=plan.gpus_per_replica)
    worker = _pod_spec(ref, spec, plan, config_map, role="worker", world_size=plan.gpus_per_replica)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(ref, ref.name),
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderReady",
            "leaderWorkerTemplate": {
                "size": plan.nodes_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": labels_for(ref), "annotations": annotations}, "spec": leader},
                "workerTemplate": {"metadata": {"labels": labels_for(ref, "worker"), "annotations": annotations}, "spec": worker},
            },
        },
    }


def render_service(ref: BackendRef, multi_node: bool) -> dict[str, Any]:
    selector = selector_for(ref)
    if multi_node:
        selector = {**selector, LWS_WORKER_INDEX_LABEL: "0"}  # only leaders serve
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ref, ref.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": "http", "port": triton.HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": triton.GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "metrics", "port": triton.METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def render_pdb(ref: BackendRef) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(ref, ref.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_for(ref)}},
    }


def minimum_replicas(spec: LLMBackendSpec) -> int:
    return spec.autoscaling.min_replicas if spec.autoscaling.enabled else spec.replicas


def desired_objects(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, replicas: int, strategy: RolloutStrategy,
    prometheus_rules: bool = False,
) -> list[dict[str, Any]]:
    """Everything one LLMBackend should own, in apply order (config before the pods that mount it).

    prometheus_rules: the PrometheusRule CRD is served, so `mode: hpa` also owns its recording rule.
    """
    multi_node = plan.nodes_per_replica > 1
    hpa_mode = spec.autoscaling.enabled and spec.autoscaling.mode == AutoscalingMode.HPA
    config_map = render_config_map(ref, spec, plan)
    objects = [config_map]
    if multi_node:
        objects.append(render_leader_worker_set(ref, spec, plan, replicas, config_map))
    else:
        objects.append(render_deployment(ref, spec, plan, None if hpa_mode else replicas, strategy, config_map))
    objects.append(render_service(ref, multi_node))
    if max(minimum_replicas(spec), replicas) > 1:
        objects.append(render_pdb(ref))
    if hpa_mode:
        from ..autoscaling.hpa import render_hpa, render_prometheus_rule

        workload = objects[1]
        target = {"apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": workload["metadata"]["name"]}
        hpa = render_hpa(ref.name, ref.namespace, target, spec.autoscaling, labels_for(ref))
        hpa["metadata"]["ownerReferences"] = [ref.owner_reference()]
        objects.append(hpa)
        if prometheus_rules:
            rule = render_prometheus_rule(ref.name, ref.namespace, metrics_model(ref, spec), labels_for(ref),
                                          window_seconds=spec.autoscaling.window_seconds)
            rule["metadata"]["ownerReferences"] = [ref.owner_reference()]
            objects.append(rule)
    return objects
