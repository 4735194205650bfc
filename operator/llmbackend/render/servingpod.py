"""The serving pod: the one pod spec a Deployment's replicas and a LeaderWorkerSet group's leader and workers run
(Triton with the engine, the checkpoint check, the model repository copied from its ConfigMap), and that ConfigMap.
render/workloads.py and render/multinode.py both build their workloads around it."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Collection
from typing import Any

from ..api.v1alpha1 import (
    LLMBackendSpec,
    PlanStatus,
)
from ..planning.inventory import GPU_TOLERATIONS
from . import adapters, drain, modelcache, monitoring, openai, triton
from .names import (
    BackendRef,
    config_map_name,
    model_name,
    object_meta,
    serving_account_name,
)

CONFIG_MOUNT = "/model-config"


SERVING_UID = 1000  # the Triton images' triton-server user


# Triton images create that user without a home directory (triton-inference-server/server#7015): HOME and the
# engines' caches (vLLM's torch.compile and kernel caches, TensorRT-LLM's JIT kernels, the Hub client, Triton-lang)
# point into a writable emptyDir mounted here.
SERVING_HOME = "/home/llmbackend"


CHECKPOINT_CHECK_CONTAINER = "check-checkpoint"  # init container; its termination message says what is wrong


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
        "metadata": object_meta(ref, config_map_name(ref)),
        "data": {**data, **openai.config_map_data(spec), **adapters.config_map_data(spec, ready_adapters)},
    }


def config_hash(config_map: dict[str, Any]) -> str:
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


def serving_pod_spec(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, config_map: dict[str, Any], *, role: str, world_size: int
) -> dict[str, Any]:
    """Pod spec of a single-node replica (role=server), or of an LWS leader/worker."""
    gpus_per_pod = plan.gpus_per_replica // max(1, plan.nodes_per_replica)
    drain_s = drain.backend_drain_seconds(spec)
    image = triton.image_for(spec)
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
    adapter_volumes, adapter_mounts = adapters.volumes(spec, config_map)
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


def uses_serving_account(spec: LLMBackendSpec) -> bool:
    """spec.serving.podTemplate names no ServiceAccount: the serving pods run as the backend's own (not the
    namespace's `default`, whose cloud identities the tenant may not hold: docs/security.md, "Trust model")."""
    return not (spec.serving.pod_template and spec.serving.pod_template.service_account_name)


def with_serving_account(ref: BackendRef, template: dict[str, Any]) -> dict[str, Any]:
    """A pod template that runs as no account yet (after the podTemplate merge; an MPI leader has the launcher's)
    runs as the backend's own."""
    template["spec"].setdefault("serviceAccountName", serving_account_name(ref))
    return template


def render_serving_account(ref: BackendRef) -> dict[str, Any]:
    """The serving pods' ServiceAccount: no token, no binding, nothing tied to it but by an admin who names it; what
    is tied to it acts for whoever may edit the backend (docs/security.md, "Trust model")."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(ref, serving_account_name(ref)),
            "automountServiceAccountToken": False}
