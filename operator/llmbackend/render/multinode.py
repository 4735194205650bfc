"""Replicas that span nodes: one LeaderWorkerSet group per replica, and what it takes to start it.

- TensorRT-LLM (LLM API, MPI): the leader waits for its workers, then runs
  `mpirun -np TPxPP trtllm-llmapi-launch tritonserver ...` over the group's pods, one rank per GPU,
  starting remote ranks through the pods' exec subresource as MPI's rsh agent (no sshd; llmb-exec, launcher/). Rank 0 (on the leader)
  serves; the others work. The leader's ServiceAccount is bound to the fixed launcher ClusterRole (exec) in its namespace.
- vLLM: the leader runs a Ray head, workers join it, and the leader serves once every GPU joined
  (vLLM's `distributed_executor_backend: ray` places TP x PP workers on the Ray cluster).
- GB200/GB300 plans whose tensor parallelism spans the nodes of an NVLink clique get a ComputeDomain
  (NVIDIA DRA driver) and its IMEX channel claim in every pod of the group.
- All-or-nothing: LeaderWorkerSet recreates a group as a unit; exclusive topology and Kueue place
  and admit it whole.

The launch scripts are files in render/scripts/, shipped in the backend's ConfigMap. Pure: nothing
here talks to the API server.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..api.v1alpha1 import (
    DEFAULT_LAUNCHER_IMAGE,
    LAUNCHER_EXEC,
    Backend,
    LLMBackendSpec,
    MultiNodeSpec,
    PlanStatus,
)
from . import drain, triton
from .names import (
    CONFIG_HASH_ANNOTATION,
    MANAGED_KINDS,
    BackendRef,
    labels_for,
    launcher_account_name,
    object_meta,
    pod_ready,
)
from .podtemplate import apply_pod_template
from .servingpod import config_hash, serving_pod_spec, with_exit_timeout, with_serving_account

EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_API = ("kueue.x-k8s.io/v1beta1", "localqueues")
VOLCANO_API = ("scheduling.volcano.sh/v1beta1", "podgroups")
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
VOLCANO_SCHEDULER = "volcano"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
IMEX_CLAIM = "imex-channel"

LAUNCH_MOUNT = "/launch"  # the scripts (ConfigMap keys launch__*.sh)
LAUNCH_KEY_PREFIX = "launch__"
LAUNCHER_DIR = "/launcher"  # llmb-exec, copied from the launcher image
HOSTFILE = "/tmp/hostfile"
# TensorRT-LLM's launcher: on rank 0 it runs the command (tritonserver serves), other ranks become the LLM's MPI workers.
LLMAPI_LAUNCH = "trtllm-llmapi-launch"
SERVING_CONTAINER = "triton"

SCRIPTS = {
    Backend.TENSORRTLLM: ("leader-mpi.sh", "worker-mpi.sh", "kubexec.sh"),
    Backend.VLLM: ("leader-ray.sh", "worker-ray.sh"),
}


@dataclass(frozen=True)
class RankLayout:
    """How one replica's ranks lie over its pods: one rank per GPU, the leader's GPUs first."""

    world_size: int  # TP x PP (TensorRT-LLM's EP subdivides the TP group; it adds no ranks)
    pods: int
    gpus_per_pod: int

    def ranks_of_pod(self, index: int) -> range:
        """Global ranks hosted by pod `index` (0 = leader) with `--map-by slot` over the hostfile."""
        return range(index * self.gpus_per_pod, (index + 1) * self.gpus_per_pod)


def rank_layout(plan: PlanStatus) -> RankLayout:
    """Validate the plan's parallelism against its pods and GPUs; raise ValueError on a contradiction."""
    tp, pp, ep = plan.tensor_parallel, plan.pipeline_parallel, plan.expert_parallel
    if tp < 1 or pp < 1:
        raise ValueError(f"tensor and pipeline parallel sizes must be >= 1 (TP{tp} x PP{pp})")
    if ep is not None and (ep < 1 or tp % ep):
        raise ValueError(f"expert parallelism {ep} must divide tensor parallelism {tp} (TensorRT-LLM splits the TP group)")
    world = tp * pp
    nodes = max(1, plan.nodes_per_replica)
    if plan.gpus_per_replica != world:
        raise ValueError(f"plan has {plan.gpus_per_replica} GPUs per replica but TP{tp} x PP{pp} = {world} ranks")
    if world % nodes:
        raise ValueError(f"{world} ranks do not split evenly over {nodes} pods")
    return RankLayout(world_size=world, pods=nodes, gpus_per_pod=world // nodes)


def multi_node_spec(spec: LLMBackendSpec) -> MultiNodeSpec:
    return spec.scheduling.multi_node or MultiNodeSpec()


def uses_mpi(spec: LLMBackendSpec) -> bool:
    return Backend(spec.engine.backend) == Backend.TENSORRTLLM


def needs_compute_domain(plan: PlanStatus) -> bool:
    return bool(plan.spans_nvlink_clique) and plan.nodes_per_replica > 1


def script_text(name: str) -> str:
    return (resources.files(__package__) / "scripts" / name).read_text()


def add_launch_files(config_map: dict[str, Any], spec: LLMBackendSpec) -> None:
    """Ship the backend's launch scripts in its ConfigMap; vLLM across nodes runs its workers on Ray."""
    backend = Backend(spec.engine.backend)
    for name in SCRIPTS[backend]:
        config_map["data"][LAUNCH_KEY_PREFIX + name] = script_text(name)
    if backend == Backend.VLLM:
        for key, content in config_map["data"].items():
            if key.endswith("__model.json"):
                args = json.loads(content)
                args["distributed_executor_backend"] = "ray"
                config_map["data"][key] = json.dumps(args, indent=2, sort_keys=True) + "\n"


def group_child_names(lws: str, groups: int, size: int) -> list[tuple[str, str]]:
    """(kind, name) of what LeaderWorkerSet `lws` creates for `groups` groups of `size` pods. As lws v0.8.0 names
    them (pkg/controllers/leaderworkerset_controller.go, constructLeaderStatefulSetApplyConfiguration and
    reconcileHeadlessServices with subdomainPolicy Shared; pod_controller.go, constructWorkerStatefulSetApplyConfiguration):
    StatefulSet and headless Service <lws>; per group, the leader pod and the workers' StatefulSet <lws>-<group>;
    worker pods <lws>-<group>-<index>, index from 1 (the leader is index 0)."""
    names = [("StatefulSet", lws), ("Service", lws)]
    for g in range(groups):
        names += group_names(lws, g, size)
    return names


def group_names(lws: str, group: int, size: int) -> list[tuple[str, str]]:
    """(kind, name) of what LeaderWorkerSet `lws` creates for one group, in the order of their controllers' chain:
    the leader pod (controlled by the StatefulSet <lws>), the workers' StatefulSet (by the leader pod), the workers
    (by that StatefulSet)."""
    return [("Pod", f"{lws}-{group}"), ("StatefulSet", f"{lws}-{group}"),
            *[("Pod", f"{lws}-{group}-{i}") for i in range(1, size)]]


# The launcher's rights, one fixed ClusterRole shipped in manifests/default/rbac.yaml. The operator binds it (RBAC
# `bind` on this name only) to each MPI leader's ServiceAccount in that backend's namespace; it holds none of
# these rights itself and can grant nothing else. No `pods get`: the leader runs the tenant's image, and that right
# would read every pod of the namespace; llmb-exec (launcher/main.go) opens the exec stream without reading the pod
# first, as kubectl does. The stream is a WebSocket upgrade of a GET; since Kubernetes 1.35 the API server also
# checks `create` for it (feature AuthorizePodWebsocketUpgradeCreatePermission), so pods/exec needs both verbs.
LAUNCHER_CLUSTER_ROLE = "llmbackend-launcher"
LAUNCHER_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
)


def launcher_cluster_role() -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": LAUNCHER_CLUSTER_ROLE, "labels": {"app.kubernetes.io/name": "llmbackend-operator"}},
            "rules": [dict(rule) for rule in LAUNCHER_RULES]}


def launcher_rbac(ref: BackendRef) -> list[dict[str, Any]]:
    """ServiceAccount of the MPI leaders + a RoleBinding of the launcher ClusterRole to it, in the backend's namespace.

    A RoleBinding (not a Role): the operator may bind that one ClusterRole and create no Role. The binding is
    namespace-wide (RBAC cannot name pods that do not exist yet without the operator holding exec itself);
    docs/security-rbac.md says what that leaves and how manifests/default's admission policy narrows it.
    """
    labels = labels_for(ref, "launcher")
    name = launcher_account_name(ref)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(ref, name, labels),
               "automountServiceAccountToken": False}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": object_meta(ref, name, labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LAUNCHER_CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
    return [account, binding]


def compute_domain_name(ref: BackendRef) -> str:
    return ref.name


def render_compute_domain(ref: BackendRef) -> dict[str, Any]:
    """One ComputeDomain per backend; every pod that claims its channel joins the IMEX domain."""
    return {
        "apiVersion": MANAGED_KINDS["ComputeDomain"][0], "kind": "ComputeDomain", "metadata": object_meta(ref, compute_domain_name(ref)),
        # numNodes 0: the driver no longer gates startup on a node count (the field is deprecated).
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{ref.name}-{IMEX_CLAIM}"}}},
    }


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _launch_volume(config_map: dict[str, Any]) -> dict[str, Any]:
    items = [{"key": k, "path": k[len(LAUNCH_KEY_PREFIX):], "mode": 0o555}
             for k in sorted(config_map["data"]) if k.startswith(LAUNCH_KEY_PREFIX)]
    return {"name": "launch", "configMap": {"name": config_map["metadata"]["name"], "items": items, "defaultMode": 0o555}}


def _group_pod(ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, config_map: dict[str, Any], *, leader: bool,
               layout: RankLayout, compute_domain: bool) -> dict[str, Any]:
    pod = serving_pod_spec(ref, spec, plan, config_map, role="leader" if leader else "worker", world_size=layout.world_size)
    # The model repository volume must not carry the launch scripts (Triton would read them as models).
    for volume in pod["volumes"]:
        if volume["name"] == "model-config":
            volume["configMap"]["items"] = [i for i in volume["configMap"]["items"] if not i["key"].startswith(LAUNCH_KEY_PREFIX)]
    pod["volumes"].append(_launch_volume(config_map))
    container = pod["containers"][0]
    container["volumeMounts"].append({"name": "launch", "mountPath": LAUNCH_MOUNT, "readOnly": True})
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    options = multi_node_spec(spec)
    container["env"] = [e for e in container["env"] if e["name"] not in ("GPUS_PER_POD", "HOSTFILE")] + [
        _env("GPUS_PER_POD", str(layout.gpus_per_pod)),
        _env("WORLD_SIZE", str(layout.world_size)),
        _env("LAUNCH_WAIT_SECONDS", str(options.startup_timeout_seconds)),
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    mpi = uses_mpi(spec)
    serve = triton.triton_command(triton.MODEL_REPOSITORY, 1, 1, spec.engine.backend)  # what rank 0 runs
    if mpi:
        script = "leader-mpi.sh" if leader else "worker-mpi.sh"
        args = [LLMAPI_LAUNCH, *serve] if leader else []
    else:
        script = "leader-ray.sh" if leader else "worker-ray.sh"
        args = serve if leader else []
    container["command"] = ["/bin/sh", f"{LAUNCH_MOUNT}/{script}"]
    # The leader serves: it keeps the drain-safe exit timeout that serving_pod_spec gave the single-node args.
    container["args"] = with_exit_timeout(args, drain.backend_drain_seconds(spec))
    if leader and mpi:
        container["env"] += [
            _env("HOSTFILE", HOSTFILE),
            _env("LLMB_EXEC", f"{LAUNCHER_DIR}/llmb-exec"),
            _env("KUBEXEC", f"{LAUNCH_MOUNT}/kubexec.sh"),
            _env("LAUNCH_CONTAINER", SERVING_CONTAINER),
        ]
        container["volumeMounts"].append({"name": "launcher", "mountPath": LAUNCHER_DIR, "readOnly": True})
        pod["volumes"].append({"name": "launcher", "emptyDir": {}})
        pod["initContainers"].append({
            "name": "launcher",
            "image": options.launcher_image or DEFAULT_LAUNCHER_IMAGE,
            "command": ["cp", LAUNCHER_EXEC, f"{LAUNCHER_DIR}/llmb-exec"],
            "volumeMounts": [{"name": "launcher", "mountPath": LAUNCHER_DIR}],
            "securityContext": container["securityContext"],
        })
        # Only the leader holds a token, bound to the launcher ClusterRole; workers keep automount off.
        pod["serviceAccountName"] = launcher_account_name(ref)
        pod["automountServiceAccountToken"] = True
    if compute_domain:
        pod["resourceClaims"] = [{"name": IMEX_CLAIM, "resourceClaimTemplateName": f"{ref.name}-{IMEX_CLAIM}"}]
        container["resources"]["claims"] = [{"name": IMEX_CLAIM}]
    return pod


def choose_gang_scheduler(spec: LLMBackendSpec, volcano_served: bool, kueue_served: bool) -> str | None:
    """Who places each group whole: "volcano", "kueue" or None (LWS alone; it still recreates groups as units)."""
    options = multi_node_spec(spec)
    if options.gang_scheduler == "none":
        return None
    if options.gang_scheduler in ("auto", "volcano") and volcano_served:
        return "volcano"
    if options.gang_scheduler in ("auto", "kueue") and kueue_served and options.queue_name:
        return "kueue"
    return None


def exclusive_topology_key(spec: LLMBackendSpec, plan: PlanStatus) -> str | None:
    options = multi_node_spec(spec)
    if options.exclusive_topology:
        return options.exclusive_topology
    return CLIQUE_LABEL if plan.spans_nvlink_clique else None


def render_leader_worker_set(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, replicas: int, config_map: dict[str, Any],
    compute_domain: bool = False, gang: str | None = None,
) -> dict[str, Any]:
    """One LWS group per replica. LeaderCreated: the workers start with the leader (the leader is
    Ready only once every rank runs, so LeaderReady would never create them)."""
    layout = rank_layout(plan)
    annotations = {CONFIG_HASH_ANNOTATION: config_hash(config_map)}
    leader = _group_pod(ref, spec, plan, config_map, leader=True, layout=layout, compute_domain=compute_domain)
    worker = _group_pod(ref, spec, plan, config_map, leader=False, layout=layout, compute_domain=compute_domain)
    meta = object_meta(ref, ref.name)
    topology = exclusive_topology_key(spec, plan)
    if topology:
        meta["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: topology}
    queue = multi_node_spec(spec).queue_name
    if gang == "kueue" and queue:
        meta["labels"] = {**meta["labels"], KUEUE_QUEUE_LABEL: queue}
    if gang == VOLCANO_SCHEDULER:
        leader["schedulerName"] = worker["schedulerName"] = VOLCANO_SCHEDULER
        if queue:
            meta["annotations"] = {**meta.get("annotations", {}), VOLCANO_QUEUE_ANNOTATION: queue}
    return {
        "apiVersion": MANAGED_KINDS["LeaderWorkerSet"][0],
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": layout.pods,
                # Any container restart in a group (a lost rank ends the leader) recreates the whole group.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": with_serving_account(ref, apply_pod_template(
                    {"metadata": {"labels": labels_for(ref), "annotations": dict(annotations)}, "spec": leader},
                    spec, "LeaderWorkerSet's leader pods")),
                "workerTemplate": with_serving_account(ref, apply_pod_template(
                    {"metadata": {"labels": labels_for(ref, "worker"), "annotations": dict(annotations)}, "spec": worker},
                    spec, "LeaderWorkerSet's worker pods")),
            },
        },
    }


def multi_node_objects(
    ref: BackendRef, spec: LLMBackendSpec, plan: PlanStatus, replicas: int, config_map: dict[str, Any],
    compute_domain: bool = False, gang: str | None = None,
) -> list[dict[str, Any]]:
    """Everything a multi-node backend owns besides the ConfigMap and Service, in apply order."""
    add_launch_files(config_map, spec)
    objects: list[dict[str, Any]] = []
    if uses_mpi(spec):
        objects += launcher_rbac(ref)
    if compute_domain:
        objects.append(render_compute_domain(ref))
    objects.append(render_leader_worker_set(ref, spec, plan, replicas, config_map, compute_domain, gang))
    return objects


# ---- status: groups are all-or-nothing ----

GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
# the LeaderWorkerSet controller labels every pod of a LeaderWorkerSet with its name (in its StatefulSets' selectors)
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
PARTIAL_GROUP = "PartialGroup"  # reason: some pods of a group run, others cannot start; the group serves nothing


def _stuck(pod: dict[str, Any], fatal_waiting: Collection[str]) -> tuple[str, str | None] | None:
    """Why a pod does not start (the scheduler's or the kubelet's words) and, for a wait that may resolve by itself
    (nodes being added), since when; None: nothing wrong yet."""
    status = pod.get("status", {})
    for cond in status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return (f"Unschedulable: {cond.get('message', '')}",
                    cond.get("lastTransitionTime") or pod["metadata"].get("creationTimestamp") or "")
    for cs in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in fatal_waiting:
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": "), None
    return None


def group_problem(pods: list[dict[str, Any]], size: int,
                  fatal_waiting: Collection[str]) -> tuple[str, str, str | None] | None:
    """The first group with a pod that cannot start: (reason, message, since). A partial group is a reason, never
    capacity; `since` is set when the pod waits for the scheduler (nodes may be added: a wait bounded by the
    progress deadline), None when a person must act."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        groups.setdefault(pod["metadata"].get("labels", {}).get(GROUP_INDEX_LABEL, "?"), []).append(pod)
    for index in sorted(groups, key=lambda i: (not i.isdigit(), int(i) if i.isdigit() else 0, i)):
        members = groups[index]
        ready = sum(pod_ready(p) for p in members)
        for pod in sorted(members, key=lambda p: p["metadata"]["name"]):
            stuck = None if pod_ready(pod) else _stuck(pod, fatal_waiting)
            if stuck:
                why, since = stuck
                return PARTIAL_GROUP, (f"group {index}: {ready}/{size} pods ready; pod {pod['metadata']['name']}: {why}. "
                                       f"The group serves nothing until all {size} pods run."), since
    return None
