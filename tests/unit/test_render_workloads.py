"""Pure rendering of the Kubernetes children of an LLMBackend."""

from __future__ import annotations

import pytest

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render.names import CONFIG_HASH_ANNOTATION, BackendRef
from llmbackend.render.workloads import RolloutStrategy, choose_rollout_strategy, desired_objects

REF = BackendRef("llama", "serving", "uid-1")


def _spec(**overrides) -> LLMBackendSpec:
    spec = {"model": {"preset": "llama-3.1-70b", "source": {"pvc": {"claimName": "models", "path": "/llama-70b"}}}}
    spec.update(overrides)
    return LLMBackendSpec.model_validate(spec)


def _plan(tp=4, pp=1, nodes=1) -> PlanStatus:
    return PlanStatus(tensor_parallel=tp, pipeline_parallel=pp, gpus_per_replica=tp * pp, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=60 << 30, gpu_product="NVIDIA-H100-80GB-HBM3", topology_source="annotation")


def _by_kind(objects):
    return {o["kind"]: o for o in objects}


SURGE = RolloutStrategy("RollingUpdate", 1, 0)


def test_single_node_replica_renders_configmap_serviceaccount_deployment_service():
    objects = desired_objects(REF, _spec(), _plan(), 1, SURGE)
    kinds = [o["kind"] for o in objects]
    assert kinds == ["ConfigMap", "ServiceAccount", "Deployment", "Service"], \
        "config and the pods' account first, no PDB for one replica"
    for obj in objects:
        assert obj["metadata"]["namespace"] == "serving"
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "name": "llama", "uid": "uid-1",
            "controller": True, "blockOwnerDeletion": True}]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "llmbackend-operator"


def test_deployment_pod_requests_the_plans_gpus_and_probes_triton():
    deployment = _by_kind(desired_objects(REF, _spec(), _plan(tp=4), 2, SURGE))["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    triton = pod["containers"][0]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert [p["containerPort"] for p in triton["ports"]] == [8000, 8001, 8002]
    assert triton["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert triton["args"][:4] == ["mpirun", "--allow-run-as-root", "-n", "1"], \
        "TP4 on one node: one tritonserver; the LLM API spawns its 4 GPU ranks"
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert triton["securityContext"]["allowPrivilegeEscalation"] is False
    assert triton["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    models = next(m for m in triton["volumeMounts"] if m["name"] == "models")
    assert models == {"name": "models", "mountPath": "/models", "readOnly": True, "subPath": "llama-70b"}
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_config_change_changes_the_pod_template_hash():
    a = _by_kind(desired_objects(REF, _spec(), _plan(), 1, SURGE))["Deployment"]
    b = _by_kind(desired_objects(REF, _spec(engine={"maxBatchSize": 8}), _plan(), 1, SURGE))["Deployment"]
    hash_of = lambda d: d["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]  # noqa: E731
    assert hash_of(a) != hash_of(b)
    assert hash_of(a) == hash_of(_by_kind(desired_objects(REF, _spec(), _plan(), 3, SURGE))["Deployment"]), \
        "replicas alone do not roll pods"


def test_pdb_when_more_than_one_replica_or_autoscaling_minimum():
    assert "PodDisruptionBudget" in _by_kind(desired_objects(REF, _spec(), _plan(), 2, SURGE))
    autoscaled = _spec(autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 4})
    assert "PodDisruptionBudget" in _by_kind(desired_objects(REF, autoscaled, _plan(), 2, SURGE))


def test_multi_node_replica_is_a_leader_worker_set_and_service_selects_leaders():
    objects = _by_kind(desired_objects(REF, _spec(), _plan(tp=8, pp=2, nodes=2), 1, SURGE))
    assert "Deployment" not in objects
    lws = objects["LeaderWorkerSet"]["spec"]
    assert lws["leaderWorkerTemplate"]["size"] == 2
    leader = lws["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    worker = lws["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "8" and worker["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "startupProbe" in leader and "startupProbe" not in worker, "probe only the leader"
    assert leader["command"] == ["/bin/sh", "/launch/leader-mpi.sh"], "the launch script takes the server argv as $@"
    assert leader["args"][:2] == ["trtllm-llmapi-launch", "tritonserver"]
    assert lws["startupPolicy"] == "LeaderCreated", "LeaderReady would never create the workers the leader waits for"
    assert objects["Service"]["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_hpa_mode_leaves_replicas_to_the_hpa():
    spec = _spec(autoscaling={"enabled": True, "mode": "hpa", "minReplicas": 1, "maxReplicas": 3})
    objects = _by_kind(desired_objects(REF, spec, _plan(), 2, SURGE))
    assert "replicas" not in objects["Deployment"]["spec"], "one writer for replicas: the HPA"
    hpa = objects["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "llama"
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert "PrometheusRule" not in objects, "only where the Prometheus Operator's CRD is served"
    rule = _by_kind(desired_objects(REF, spec, _plan(), 2, SURGE, prometheus_rules=True))["PrometheusRule"]
    assert rule["spec"]["groups"][0]["rules"][0]["record"] == "llmbackend:engine_queue_compute:ratio"
    assert 'model="llama-3.1-70b"' in rule["spec"]["groups"][0]["rules"][0]["expr"], "the LLM API model itself"
    assert rule["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


@pytest.mark.parametrize("replicas, spare, expected", [
    (1, 1, ("RollingUpdate", 1, 0)),
    (3, 0, ("RollingUpdate", 0, 1)),
    (1, 0, ("Recreate", 0, 0)),
])
def test_rollout_strategy_follows_free_capacity(replicas, spare, expected):
    strategy, why = choose_rollout_strategy(replicas, spare)
    assert (strategy.type, strategy.max_surge, strategy.max_unavailable) == expected
    assert why


def test_engine_managed_batching_in_the_rendered_configmap():
    from llmbackend.render.servingpod import config_map_files
    from llmbackend.render.triton import batching_violations

    config_map = _by_kind(desired_objects(REF, _spec(), _plan(), 1, SURGE))["ConfigMap"]
    files = config_map_files(config_map)
    name = _spec().model.preset
    assert set(files) == {f"{name}/config.pbtxt", f"{name}/1/model.yaml", f"{name}/1/model.py"}
    assert batching_violations(files) == []
    assert "dynamic_batching" not in files[f"{name}/config.pbtxt"]

    config_map = _by_kind(desired_objects(REF, _spec(engine={"format": "engine"}), _plan(), 1, SURGE))["ConfigMap"]
    files = config_map_files(config_map)
    assert set(files) == {"ensemble/config.pbtxt", "preprocessing/config.pbtxt", "tensorrt_llm/config.pbtxt",
                          "postprocessing/config.pbtxt"}
    assert batching_violations(files) == []
    assert "max_queue_delay_microseconds: 0" in files["tensorrt_llm/config.pbtxt"]


def test_checkpoint_check_init_container_runs_first_with_the_plan():
    from llmbackend.render import triton as t

    objects = _by_kind(desired_objects(REF, _spec(), _plan(tp=4), 1, SURGE))
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    check = pod["initContainers"][0]
    assert check["name"] == "check-checkpoint" and check["image"] == pod["containers"][0]["image"]
    assert check["command"][:2] == ["python3", f"{t.CHECKPOINT_CHECK_DIR}/check_checkpoint.py"]
    assert check["command"][check["command"].index("--tp") + 1] == "4"
    assert {m["name"] for m in check["volumeMounts"]} == {"checkpoint-check", "models"}
    assert objects["ConfigMap"]["data"][t.CHECKPOINT_CHECK_KEY] == t.checkpoint_check_source()
    repo_items = next(v for v in pod["volumes"] if v["name"] == "model-config")["configMap"]["items"]
    assert t.CHECKPOINT_CHECK_KEY not in {i["key"] for i in repo_items}, "the script is not a model in the repository"
    # nothing to check for the legacy engine ensemble or a URI source (fetched later)
    legacy = _by_kind(desired_objects(REF, _spec(engine={"format": "engine"}), _plan(), 1, SURGE))
    assert [c["name"] for c in legacy["Deployment"]["spec"]["template"]["spec"]["initContainers"]] == ["model-repository"]
