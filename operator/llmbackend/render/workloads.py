"""Desired Kubernetes objects for one LLMBackend: pure functions of (backend identity, spec, plan, replicas).

The controller applies what `desired_objects()` returns with server-side apply and deletes owned
objects of the managed kinds that are no longer desired. Nothing here talks to the API server.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..api.v1alpha1 import (
    GROUP,
    KIND,
    LAUNCHER_SUFFIX,
    MODEL_REPO_SUFFIX,
    OPERATOR_IMAGE,
    VERSION,
    AutoscalingMode,
    LLMBackendSpec,
    PlanStatus,
)
from ..planning.inventory import GPU_TOLERATIONS
from . import activator, adapters, drain, gateway, keda, modelcache, monitoring, openai, triton
from .hpa import render_hpa, render_prometheus_rule
from .podtemplate import apply_pod_template

MANAGED_BY = "llmbackend-operator"
BACKEND_LABEL = "llmbackend.dev/backend"
CONFIG_HASH_ANNOTATION = "llmbackend.dev/config-hash"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
CONFIG_MOUNT = "/model-config"
SERVING_UID = 1000  # the Triton images' triton-server user
# Triton images create that user without a home directory (triton-inference-server/server#7015): HOME and the
# engines' caches (vLLM's torch.compile and kernel caches, TensorRT-LLM's JIT kernels, the Hub client, Triton-lang)
# point into a writable emptyDir mounted here.
SERVING_HOME = "/home/llmbackend"
CHECKPOINT_CHECK_CONTAINER = "check-checkpoint"  # init container; its termination message says what is wrong

# Every kind the operator may own, keyed by kind: (apiVersion, plural). The controller prunes
# owned objects of these kinds that are no longer desired.
MANAGED_KINDS: dict[str, tuple[str, str]] = {
    "ConfigMap": ("v1", "configmaps"),
    "Service": ("v1", "services"),
    "Deployment": ("apps/v1", "deployments"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
    # Multi-node groups: the MPI leader's exec rights (render/multinode.py: a binding of the fixed launcher
    # ClusterRole; the operator creates no Roles) and GB200 IMEX domains.
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
    """Every (kind, name) a backend's children may have: what pruning looks up."""
    epp = gateway.epp_name(ref.name)
    names = [(kind, config_map_name(ref) if kind == "ConfigMap" else ref.name) for kind in MANAGED_KINDS
             if kind not in ("ServiceAccount", "RoleBinding")] + [
        ("ServiceAccount", ref.name + LAUNCHER_SUFFIX), ("RoleBinding", ref.name + LAUNCHER_SUFFIX),
        ("ServiceAccount", ref.name)]  # the launcher's account before it took the binding's name: pruned on upgrade
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


def _meta(ref: BackendRef, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": labels or labels_for(ref),
        "ownerReferences": [ref.owner_reference()],
    }


def config_map_name(ref: BackendRef) -> str:
    return ref.name + MODEL_REPO_SUFFIX


def model_name(ref: BackendRef, spec: LLMBackendSpec) -> str:
    return spec.model.name or spec.model.preset or ref.name


def metrics_model(ref: BackendRef, spec: LLMBackendSpec) -> str:
    """The Triton model whose queue/compute times drive autoscaling: the engine, not the ensemble."""
    if triton.is_engine_ensemble(spec.engine.backend, spec.engine.format):
        return "tensorrt_llm"
    return triton.served_model_name(spec.engine.backend, model_name(ref, spec), spec.engine.format)


image_for = triton.image_for


# ConfigMap entries that are programs mounted on their own, not files of the Triton model repository.
NON_REPOSITORY_KEYS = frozenset({triton.CHECKPOINT_CHECK_KEY, openai.FRONTEND_KEY, openai.HTTP_BODY_KEY,
                                 adapters.ADAPTERS_KEY})


def _config_key(path: str) -> str:
    # ConfigMap keys may not contain '/'; the volume's items map them back to paths.
    return path.replace("/", "__")


def config_map_files(config_map: dict[str, Any]) -> dict[str, str]:
    """The model repository a ConfigMap holds: path -> content, as the pod's volume items lay it out."""
    return {key.replace("__", "/"): content for key, content in (config_map.get("data") or {}).items()
            if key not in NON_REPOSITORY_KEYS}


def render_config_map(ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus,
                      ready_adapters: Collection[str] | None = None) -> dict[str, Any]:
    """The backend's ConfigMap; `ready_adapters`: the adapters the pods may be told of (None: all of spec.adapters)."""
    files = triton.render_model_repository(spec, model_name(ref, spec), plan.tensor_parallel, plan.pipeline_parallel,
                                           plan.expert_parallel, plan.gpu_product,
                                           bool(plan.attention_data_parallel))
    data = {_config_key(path): content for path, content in sorted(files.items())}
    if triton.checkpoint_check_command(spec, plan.tensor_parallel, plan.pipeline_parallel, plan.expert_parallel):
        data[triton.CHECKPOINT_CHECK_KEY] = triton.checkpoint_check_source()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ref, config_map_name(ref)),
        "data": {**data, **openai.config_map_data(spec), **adapters.config_map_data(spec, ready_adapters)},
    }


def _config_hash(config_map: dict[str, Any]) -> str:
    # The adapter list is re-read in place by the running pods (render/adapters.py): not a reason to roll them.
    data = {k: v for k, v in config_map["data"].items() if k != adapters.ADAPTERS_KEY}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _copy_repository_script(spec: LLMBackendSpec, ref: BackendRef) -> str:
    """Init step: assemble the writable model repository from the ConfigMap (and the image's Python models).

    Every interpolated value is a validated constant or model name, and shell-quoted anyway.
    """
    repo = triton.MODEL_REPOSITORY
    steps = [f"cp -rL {CONFIG_MOUNT}/. {repo}/"]
    for directory in triton.version_dirs(spec.engine.backend, model_name(ref, spec), spec.engine.format):
        steps.append(f"mkdir -p {shlex.quote(repo + '/' + directory)}")
    if triton.is_engine_ensemble(spec.engine.backend, spec.engine.format):
        for target, source in sorted(triton.IMAGE_PYTHON_MODELS.items()):
            steps.append(f"cp {shlex.quote(source)} {shlex.quote(repo + '/' + target)}")
    return " && ".join(steps)


def _shm_size(gpus_per_pod: int) -> str:
    # NCCL and the Python backend use /dev/shm; multi-GPU pods need room for NCCL buffers per rank.
    return f"{2 + 4 * max(0, gpus_per_pod - 1) if gpus_per_pod > 1 else 2}Gi"


def cache_env(home: str = SERVING_HOME) -> list[dict[str, str]]:
    """HOME and the cache variables of the serving container, all under the writable `home` emptyDir."""
    cache = f"{home}/.cache"
    return [{"name": "HOME", "value": home},
            {"name": "XDG_CACHE_HOME", "value": cache},
            {"name": "HF_HOME", "value": f"{cache}/huggingface"},
            {"name": "VLLM_CACHE_ROOT", "value": f"{cache}/vllm"},
            {"name": "TRITON_CACHE_DIR", "value": f"{cache}/triton"}]


def _add_writable_home(container: dict[str, Any], volumes: list[dict[str, Any]]) -> None:
    container["env"] += cache_env()
    container["volumeMounts"].append({"name": "home", "mountPath": SERVING_HOME})
    volumes.append({"name": "home", "emptyDir": {}})


def serving_resources(spec: LLMBackendSpec, gpus_per_pod: int) -> dict[str, Any]:
    """Requests (and limits) of the serving container.

    With `scheduling.resources` the user's CPU and memory are both request and limit. Without, the container still
    requests CPU and memory: it loads the checkpoint through host RAM and its /dev/shm is memory-backed, and a pod
    requesting none is BestEffort, the first evicted under memory pressure. The default (2 CPUs per GPU; 8 GiB plus
    8 GiB per GPU plus the /dev/shm size) is a floor for scheduling and eviction order, with no limit."""
    gpus = str(gpus_per_pod)
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    if spec.scheduling.resources and (spec.scheduling.resources.cpu or spec.scheduling.resources.memory):
        for key in ("cpu", "memory"):
            value = getattr(spec.scheduling.resources, key)
            if value:
                resources["requests"][key] = value
                resources["limits"][key] = value
        return resources
    shm_gib = int(_shm_size(gpus_per_pod).removesuffix("Gi"))
    resources["requests"]["cpu"] = str(2 * max(1, gpus_per_pod))
    resources["requests"]["memory"] = f"{8 + 8 * max(1, gpus_per_pod) + shm_gib}Gi"
    return resources


def with_exit_timeout(args: list[str], drain_s: int) -> list[str]:
    """tritonserver's argv with `--exit-timeout-secs` (how long it lets in-flight requests finish on SIGTERM)."""
    return [a for arg in args for a in ([arg, f"--exit-timeout-secs={drain_s}"] if arg == "tritonserver" else [arg])]


def _pod_spec(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, config_map: dict[str, Any], *, role: str, world_size: int
) -> dict[str, Any]:
    """Pod spec of a single-node replica (role=server), or of an LWS leader/worker."""
    gpus_per_pod = plan.gpus_per_replica // max(1, plan.nodes_per_replica)
    drain_s = drain.backend_drain_seconds(spec)
    image = image_for(spec)
    backend = spec.engine.backend
    # Leaders and workers of multi-node groups get their launch command from render/multinode.py.
    command: list[str] | None = None
    args = triton.triton_command(triton.MODEL_REPOSITORY, plan.tensor_parallel, plan.pipeline_parallel, backend,
                                 spec.engine.format)

    resources = serving_resources(spec, gpus_per_pod)

    volume_mounts: list[dict[str, Any]] = [
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
                "items": [{"key": key, "path": key.replace("__", "/")} for key in sorted(config_map["data"])
                          if key not in NON_REPOSITORY_KEYS],
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
    adapter_volumes, adapter_mounts = adapters.volumes(spec, config_map["metadata"]["name"])
    volumes += adapter_volumes
    volume_mounts += adapter_mounts

    container: dict[str, Any] = {
        "name": "triton",
        "image": image,
        "args": args,
        "env": [
            {"name": "GPUS_PER_POD", "value": str(gpus_per_pod)},
            {**triton.OFFLINE_ENV},
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
    _add_writable_home(container, volumes)
    if command:
        container["command"] = command
    if source is not None and source.uri is not None:
        container["env"].append({"name": "MODEL_PATH", "value": modelcache.model_path(source)})
    if adapters.lora_enabled(spec):
        container["env"].append(adapters.env())
    if role != "worker":
        container["ports"] = [
            {"name": "http", "containerPort": triton.HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": triton.GRPC_PORT, "protocol": "TCP"},
            {"name": monitoring.METRICS_PORT_NAME, "containerPort": triton.METRICS_PORT, "protocol": "TCP"},
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
        # Drain-safe scale-down: wait for in-flight requests, then Triton's exit timeout (render/drain.py).
        container["lifecycle"] = {"preStop": {"exec": {"command": drain.prestop_command(triton.METRICS_PORT, drain_s)}}}
        container["args"] = with_exit_timeout(args, drain_s)

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

    init_containers = [init]
    if source is not None and source.uri is not None:  # start only once the cached copy is complete
        init_containers.append(modelcache.wait_init_container(source, image, container["securityContext"]))
    check = triton.checkpoint_check_command(spec, plan.tensor_parallel, plan.pipeline_parallel, plan.expert_parallel)
    if check and role != "worker":
        # Fail fast with a readable reason (terminated.message) instead of a server crash loop.
        volumes.append({"name": "checkpoint-check", "configMap": {
            "name": config_map["metadata"]["name"],
            "items": [{"key": triton.CHECKPOINT_CHECK_KEY, "path": "check_checkpoint.py"}]}})
        init_containers.insert(0, {
            "name": CHECKPOINT_CHECK_CONTAINER,
            "image": image,
            "command": check,
            "volumeMounts": [
                {"name": "checkpoint-check", "mountPath": triton.CHECKPOINT_CHECK_DIR, "readOnly": True},
                *[m for m in volume_mounts if m["name"] == "models"],
            ],
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": container["securityContext"],
        })

    node_selector = dict(spec.scheduling.node_selector or {})
    if plan.node_selector:  # the label that names the product on the planned nodes (GFD's or a cloud's)
        for key, value in plan.node_selector.items():
            node_selector.setdefault(key, value)
    elif plan.gpu_product:
        node_selector.setdefault("nvidia.com/gpu.product", plan.gpu_product)
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": drain.termination_grace_seconds(drain_s),
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": SERVING_UID},
        "initContainers": init_containers,
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": node_selector,
    }
    if role != "worker" and openai.enabled(spec):
        pod["containers"].append(openai.container(
            spec, image, triton.served_model_name(backend, model_name(ref, spec)), model_name(ref, spec),
            container["securityContext"], [m for m in volume_mounts if m["name"] == "models"]))
        volumes.append(openai.volume(config_map["metadata"]["name"]))
        if adapters.lora_enabled(spec):  # /v1/models lists the adapters the Triton model serves: the same file
            frontend = pod["containers"][-1]
            frontend["env"].append(adapters.env())
            frontend["volumeMounts"].append({"name": adapters.ADAPTERS_VOLUME, "mountPath": adapters.ADAPTERS_DIR,
                                             "readOnly": True})
    # GPU nodes of managed clouds carry an nvidia.com/gpu taint (GKE adds the toleration only through an
    # admission plugin AKS lacks); the planner counts those nodes, so the pods tolerate it.
    pod["tolerations"] = [t.dump() for t in spec.scheduling.tolerations or []] + [dict(t) for t in GPU_TOLERATIONS]
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
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ref, ref.name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_for(ref)},
            "strategy": strategy.to_k8s(),
            "progressDeadlineSeconds": 3600,  # engines take minutes to load; 1 h before "stuck"
            "template": apply_pod_template({
                "metadata": {"labels": labels_for(ref), "annotations": {CONFIG_HASH_ANNOTATION: _config_hash(config_map)}},
                "spec": pod,
            }, spec, "Deployment's pods"),
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
        "metadata": _meta(ref, ref.name),
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
        "metadata": _meta(ref, ref.name),
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
    with_activator = activator.enabled(spec)
    if with_activator:  # before the workload: it receives the requests that wait for the first replica
        objects += activator.render(ref.name, ref.namespace, spec, render_service(ref, multi_node, openai.enabled(spec)),
                                    labels_for(ref, activator.COMPONENT), activator_selector(ref),
                                    ref.owner_reference(), operator_image)
    if multi_node:
        from .multinode import multi_node_objects, needs_compute_domain

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
