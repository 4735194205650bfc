"""Multi-node replicas (render/multinode.py): rank layouts, the LeaderWorkerSet group, launch RBAC,
vLLM on Ray, ComputeDomains and all-or-nothing placement. Pure rendering; the launch scripts
themselves run for real in tests/launch."""

from __future__ import annotations

import json

import pytest

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.controller.permissions import WATCHED, Grant, grants, permissions
from llmbackend.controller.reconcile import Reconciler  # noqa: F401  (registers the operator's permissions)
from llmbackend.render.multinode import (
    CLIQUE_LABEL,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    GROUP_INDEX_LABEL,
    KUEUE_QUEUE_LABEL,
    LAUNCH_KEY_PREFIX,
    LAUNCHER_CLUSTER_ROLE,
    choose_gang_scheduler,
    group_problem,
    launcher_cluster_role,
    rank_layout,
)
from llmbackend.render.names import MANAGED_KINDS, BackendRef, launcher_account_name, serving_account_name
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REF = BackendRef("big", "serving", "uid-1")
SERVING, LAUNCHER = serving_account_name(REF), launcher_account_name(REF)
RECREATE = RolloutStrategy("Recreate")


def _spec(backend="tensorrtllm", **overrides) -> LLMBackendSpec:
    spec = {"model": {"preset": "llama-3.1-405b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}},
            "engine": {"backend": backend}}
    spec.update(overrides)
    return LLMBackendSpec.model_validate(spec)


def _plan(tp=8, pp=2, nodes=2, ep=None, clique=None) -> PlanStatus:
    return PlanStatus(tensor_parallel=tp, pipeline_parallel=pp, expert_parallel=ep, gpus_per_replica=tp * pp,
                      nodes_per_replica=nodes, memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3",
                      spans_nvlink_clique=clique)


def _objects(spec=None, plan=None, replicas=1, **kw):
    return {o["kind"]: o for o in desired_objects(REF, spec or _spec(), plan or _plan(), replicas, RECREATE, **kw)}


def _pods(objects):
    t = objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    return t["leaderTemplate"]["spec"], t["workerTemplate"]["spec"]


def _env(container) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"]}


# ---- rank layouts ----

@pytest.mark.parametrize("tp,pp,ep,nodes,world,per_pod", [
    (8, 2, None, 2, 16, 8),     # 405B: TP8 inside a node, PP2 across two
    (16, 1, None, 2, 16, 8),    # TP over two nodes (NVLink clique)
    (4, 4, None, 4, 16, 4),     # four 4-GPU nodes
    (8, 3, None, 3, 24, 8),
    (1, 2, None, 2, 2, 1),
    (16, 2, 8, 4, 32, 8),       # MoE: EP splits the TP group, no extra ranks
    (8, 2, 8, 2, 16, 8),
    (72, 1, None, 18, 72, 4),   # a full GB200 NVL72 rack of 4-GPU trays
])
def test_rank_layout_is_one_rank_per_gpu_tp_times_pp(tp, pp, ep, nodes, world, per_pod):
    layout = rank_layout(_plan(tp, pp, nodes, ep))
    assert (layout.world_size, layout.pods, layout.gpus_per_pod) == (world, nodes, per_pod)
    ranks = [r for i in range(nodes) for r in layout.ranks_of_pod(i)]
    assert ranks == list(range(world)), "every rank on exactly one pod, rank 0 on the leader"
    objects = _objects(plan=_plan(tp, pp, nodes, ep))
    leader, worker = _pods(objects)
    for pod in (leader, worker):
        container = pod["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(per_pod)
        assert _env(container)["WORLD_SIZE"] == str(world) and _env(container)["GPUS_PER_POD"] == str(per_pod)
    assert objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["size"] == nodes


@pytest.mark.parametrize("tp,pp,ep,nodes,gpus,why", [
    (8, 2, None, 3, 16, "split evenly"),
    (8, 2, None, 2, 8, "GPUs per replica"),
    (8, 1, 3, 2, 8, "must divide"),
])
def test_rank_layout_rejects_contradictions(tp, pp, ep, nodes, gpus, why):
    plan = _plan(tp, pp, nodes, ep).model_copy(update={"gpus_per_replica": gpus})
    with pytest.raises(ValueError, match=why):
        rank_layout(plan)


# ---- the group ----

def test_group_starts_with_leader_created_and_recreates_as_a_unit():
    lws = _objects()["LeaderWorkerSet"]["spec"]
    assert lws["startupPolicy"] == "LeaderCreated"
    assert lws["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"


def test_mpi_leader_runs_the_llm_api_launch_through_the_shipped_scripts():
    objects = _objects()
    leader, worker = _pods(objects)
    lc, wc = leader["containers"][0], worker["containers"][0]
    assert lc["command"] == ["/bin/sh", "/launch/leader-mpi.sh"] and wc["command"] == ["/bin/sh", "/launch/worker-mpi.sh"]
    assert lc["args"][:2] == ["trtllm-llmapi-launch", "tritonserver"] and wc["args"] == []
    assert "--http-port=8000" in lc["args"], "rank 0 serves"
    assert lc["terminationMessagePolicy"] == "FallbackToLogsOnError"
    data = objects["ConfigMap"]["data"]
    for script in ("leader-mpi.sh", "worker-mpi.sh", "kubexec.sh"):
        assert data[LAUNCH_KEY_PREFIX + script].startswith("#!/bin/sh")
    launch = next(v for v in leader["volumes"] if v["name"] == "launch")
    assert {i["path"] for i in launch["configMap"]["items"]} == {"leader-mpi.sh", "worker-mpi.sh", "kubexec.sh"}
    model_config = next(v for v in leader["volumes"] if v["name"] == "model-config")
    assert not any(i["key"].startswith(LAUNCH_KEY_PREFIX) for i in model_config["configMap"]["items"]), \
        "scripts stay out of the model repository"


def test_serving_pods_stay_non_root_without_capabilities_and_only_the_leader_holds_a_token():
    leader, worker = _pods(_objects())
    for pod in (leader, worker):
        for c in pod["containers"] + pod["initContainers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] and sc["runAsUser"] != 0 and sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["allowPrivilegeEscalation"] is False
    assert leader["serviceAccountName"] == LAUNCHER and leader["automountServiceAccountToken"] is True
    # the workers run as the backend's own account (no token, no binding), not the namespace's default
    assert worker["serviceAccountName"] == SERVING and worker["automountServiceAccountToken"] is False
    launcher = next(c for c in leader["initContainers"] if c["name"] == "launcher")
    assert launcher["command"][0] == "cp" and launcher["command"][-1] == "/launcher/llmb-exec"
    assert _env(leader["containers"][0])["LLMB_EXEC"] == "/launcher/llmb-exec"


def test_launcher_gets_a_binding_of_the_fixed_launcher_cluster_role_and_no_role():
    objects = _objects(replicas=2, plan=_plan(4, 4, 4))
    assert "Role" not in objects, "the operator creates no Roles (it would have to hold what they grant)"
    binding = objects["RoleBinding"]
    assert binding["metadata"]["name"] == LAUNCHER
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LAUNCHER_CLUSTER_ROLE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": LAUNCHER, "namespace": "serving"}]
    kinds = list(objects)
    assert kinds.index("RoleBinding") < kinds.index("LeaderWorkerSet"), "exec rights exist before the leader starts"


def test_launcher_cluster_role_grants_exec_and_no_read_of_pods():
    """llmb-exec opens exec as a WebSocket upgrade of a GET, which the API server (1.35+) also authorizes as `create`:
    pods/exec needs both verbs. Issue 42: nothing else, `pods get` included (the token sits in the tenant's image)."""
    assert launcher_cluster_role()["rules"] == [
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}]


def test_operator_may_bind_the_launcher_role_without_holding_exec():
    """RBAC escalation prevention: a RoleBinding needs `bind` on its role (or every permission it grants)."""
    granted = grants()
    assert Grant(WATCHED, "rbac.authorization.k8s.io", "clusterroles", (LAUNCHER_CLUSTER_ROLE,)) in granted
    assert ("", "pods/exec") not in permissions()
    for kind in ("ServiceAccount", "RoleBinding"):
        api_version, plural = MANAGED_KINDS[kind]
        assert {"create", "patch", "delete"} <= permissions()[(api_version.rpartition("/")[0], plural)]


# ---- vLLM on Ray ----

def test_vllm_across_nodes_runs_on_ray_without_exec_rights():
    objects = _objects(spec=_spec("vllm"))
    assert not {"Role", "RoleBinding"} & set(objects), "Ray needs no exec"
    assert objects["ServiceAccount"]["metadata"]["name"] == SERVING, "only the serving pods' own account"
    leader, worker = _pods(objects)
    assert leader["serviceAccountName"] == worker["serviceAccountName"] == SERVING
    assert leader["automountServiceAccountToken"] is worker["automountServiceAccountToken"] is False
    lc, wc = leader["containers"][0], worker["containers"][0]
    assert lc["command"] == ["/bin/sh", "/launch/leader-ray.sh"] and lc["args"][0] == "tritonserver"
    assert wc["command"] == ["/bin/sh", "/launch/worker-ray.sh"]
    model_json = next(v for k, v in objects["ConfigMap"]["data"].items() if k.endswith("model.json"))
    args = json.loads(model_json)
    assert args["distributed_executor_backend"] == "ray"
    assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (8, 2)
    single = _objects(spec=_spec("vllm"), plan=_plan(8, 1, 1))
    single_json = next(v for k, v in single["ConfigMap"]["data"].items() if k.endswith("model.json"))
    assert "distributed_executor_backend" not in json.loads(single_json)


# ---- GB200 cliques and all-or-nothing ----

def test_clique_plan_gets_a_compute_domain_and_claims_its_channel_in_every_pod():
    plan = _plan(16, 1, 4, clique=True)
    objects = _objects(plan=plan, compute_domains=True)
    cd = objects["ComputeDomain"]
    assert cd["apiVersion"] == "resource.nvidia.com/v1beta1"
    template = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    for pod in _pods(objects):
        assert pod["resourceClaims"] == [{"name": "imex-channel", "resourceClaimTemplateName": template}]
        assert pod["containers"][0]["resources"]["claims"] == [{"name": "imex-channel"}]
    assert objects["LeaderWorkerSet"]["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY_ANNOTATION] == CLIQUE_LABEL
    assert list(objects).index("ComputeDomain") < list(objects).index("LeaderWorkerSet")
    without = _objects(plan=plan, compute_domains=False)
    assert "ComputeDomain" not in without and "resourceClaims" not in _pods(without)[0]
    plain = _objects(plan=_plan(8, 2, 2), compute_domains=True)
    assert "ComputeDomain" not in plain, "only plans whose TP spans nodes of a clique"
    assert "annotations" not in plain["LeaderWorkerSet"]["metadata"]


def test_exclusive_topology_from_the_spec():
    spec = _spec(scheduling={"multiNode": {"exclusiveTopology": "cloud.google.com/gce-topology-block"}})
    lws = _objects(spec=spec)["LeaderWorkerSet"]
    assert lws["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY_ANNOTATION] == "cloud.google.com/gce-topology-block"


@pytest.mark.parametrize("choice,queue,volcano,kueue,expected", [
    ("auto", None, False, False, None),
    ("auto", None, True, False, "volcano"),
    ("auto", "gpu", False, True, "kueue"),
    ("auto", None, False, True, None),          # Kueue admits only workloads that name a queue
    ("auto", "gpu", True, True, "volcano"),
    ("kueue", "gpu", True, True, "kueue"),
    ("volcano", "gpu", False, True, None),      # asked for Volcano, not installed
    ("none", "gpu", True, True, None),
])
def test_gang_scheduler_choice(choice, queue, volcano, kueue, expected):
    spec = _spec(scheduling={"multiNode": {"gangScheduler": choice, **({"queueName": queue} if queue else {})}})
    assert choose_gang_scheduler(spec, volcano, kueue) == expected


def test_gang_scheduling_metadata():
    spec = _spec(scheduling={"multiNode": {"queueName": "gpu"}})
    kueue = _objects(spec=spec, gang_scheduler="kueue")["LeaderWorkerSet"]
    assert kueue["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "gpu"
    assert all("schedulerName" not in pod for pod in _pods({"LeaderWorkerSet": kueue}))
    volcano = _objects(spec=spec, gang_scheduler="volcano")["LeaderWorkerSet"]
    assert all(pod["schedulerName"] == "volcano" for pod in _pods({"LeaderWorkerSet": volcano}))
    assert volcano["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "gpu"
    assert KUEUE_QUEUE_LABEL not in volcano["metadata"]["labels"]
    plain = _objects(spec=spec)["LeaderWorkerSet"]
    assert KUEUE_QUEUE_LABEL not in plain["metadata"]["labels"] and "annotations" not in plain["metadata"]


def test_startup_timeout_reaches_both_scripts():
    spec = _spec(scheduling={"multiNode": {"startupTimeoutSeconds": 1200}})
    for pod in _pods(_objects(spec=spec)):
        assert _env(pod["containers"][0])["LAUNCH_WAIT_SECONDS"] == "1200"


# ---- partial groups ----

def _pod(name, group, ready=False, unschedulable=None, waiting=None):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable})
    status = {"conditions": conditions}
    if waiting:
        status["containerStatuses"] = [{"name": "triton", "state": {"waiting": {"reason": waiting, "message": "boom"}}}]
    return {"metadata": {"name": name, "labels": {GROUP_INDEX_LABEL: str(group)}}, "status": status}


FATAL = {"ImagePullBackOff", "CrashLoopBackOff"}


@pytest.mark.parametrize("pods,expected", [
    ([_pod("b-0", 0, True), _pod("b-0-1", 0, True)], None),
    ([_pod("b-0", 0, True), _pod("b-0-1", 0)], None),  # still starting: not a problem yet
    ([_pod("b-0", 0, True), _pod("b-0-1", 0, unschedulable="0/4 nodes have 8 free GPUs")],
     "group 0: 1/2 pods ready; pod b-0-1: Unschedulable: 0/4 nodes have 8 free GPUs."),
    ([_pod("b-0", 0, True), _pod("b-0-1", 0, True), _pod("b-1", 1), _pod("b-1-1", 1, waiting="CrashLoopBackOff")],
     "group 1: 0/2 pods ready; pod b-1-1: CrashLoopBackOff: boom."),
])
def test_a_partial_group_is_a_reason_with_the_stuck_pod(pods, expected):
    problem = group_problem(pods, 2, FATAL)
    if expected is None:
        assert problem is None
    else:
        assert problem[0] == "PartialGroup" and problem[1].startswith(expected), problem
        assert "serves nothing" in problem[1]
        # waiting for the scheduler (nodes may be added) is a wait with a start; a crash loop needs a person
        assert (problem[2] is not None) == ("Unschedulable" in expected)


def test_default_launcher_image_is_the_operator_image_that_ships_llmb_exec():
    from pathlib import Path

    import yaml

    from llmbackend.api.v1alpha1 import DEFAULT_LAUNCHER_IMAGE, LAUNCHER_EXEC

    root = Path(__file__).resolve().parents[2]
    deployment = yaml.safe_load((root / "manifests/default/deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == DEFAULT_LAUNCHER_IMAGE
    dockerfile = (root / "Dockerfile").read_text()
    assert f"COPY --from=launcher /out/llmb-exec {LAUNCHER_EXEC}" in dockerfile, "the Dockerfile installs llmb-exec there"
    assert "COPY launcher/go.mod launcher/go.sum launcher/main.go" in dockerfile and "kubectl" not in dockerfile
