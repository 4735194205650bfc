"""Gateway API Inference Extension: the InferencePool and its endpoint picker, rendered only when asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmbackend.api import engine_metrics as m
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render import gateway, openai
from llmbackend.render.names import LWS_WORKER_INDEX_LABEL, BackendRef, owned_names
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REF = BackendRef("llama", "serving", "uid-1")
ROOT = Path(__file__).resolve().parents[2]


def _spec(**overrides) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-8b"}, **overrides})


def _plan(nodes=1) -> PlanStatus:
    return PlanStatus(tensor_parallel=8, pipeline_parallel=nodes, gpus_per_replica=8 * nodes, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=60 << 30)


def _objects(spec, inference_pool=True, nodes=1):
    return desired_objects(REF, spec, _plan(nodes), 1, RolloutStrategy("Recreate"), inference_pool=inference_pool)


def _by(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def test_nothing_without_the_crd_or_without_openai():
    assert not [o for o in _objects(_spec(), inference_pool=False) if o["kind"] == "InferencePool"]
    assert not [o for o in _objects(_spec(serving={"openai": False})) if o["kind"] == "InferencePool"]


def test_pool_selects_the_serving_pods_on_the_openai_port():
    objects = _objects(_spec())
    pool = _by(objects, "InferencePool", "llama")
    deployment = _by(objects, "Deployment", "llama")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert pool["spec"]["targetPorts"] == [{"number": openai.OPENAI_PORT}]
    epp_service = _by(objects, "Service", gateway.epp_name("llama"))
    ref = pool["spec"]["endpointPickerRef"]
    assert ref["name"] == epp_service["metadata"]["name"]
    assert ref["port"]["number"] in [p["port"] for p in epp_service["spec"]["ports"]]
    epp_pods = _by(objects, "Deployment", gateway.epp_name("llama"))["spec"]["template"]["metadata"]["labels"]
    assert not all(epp_pods.get(k) == v for k, v in pool["spec"]["selector"]["matchLabels"].items()), \
        "the picker's own pods are not in the pool"
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "uid-1" for o in objects)


def test_multi_node_pool_holds_only_leaders():
    pool = _by(_objects(_spec(), nodes=2), "InferencePool", "llama")
    assert pool["spec"]["selector"]["matchLabels"][LWS_WORKER_INDEX_LABEL] == "0"


@pytest.mark.parametrize("backend, queued, kv", [
    ("tensorrtllm", f"{m.REQUEST_GAUGE}{{request_type=waiting}}", f"{m.KV_GAUGE}{{kv_cache_block_type=fraction}}"),
    ("vllm", m.VLLM_WAITING_GAUGE, m.VLLM_KV_USAGE_GAUGE),
])
def test_picker_reads_the_metric_names_the_model_exports(backend, queued, kv):
    objects = _objects(_spec(engine={"backend": backend}))
    config = yaml.safe_load(_by(objects, "ConfigMap", gateway.epp_name("llama"))["data"][gateway.EPP_CONFIG_FILE])
    assert config["kind"] == "EndpointPickerConfig"
    extractor = next(p for p in config["plugins"] if p["type"] == "core-metrics-extractor")["parameters"]
    engine = next(e for e in extractor["engineConfigs"] if e["name"] == extractor["defaultEngine"])
    assert (engine["queuedRequestsSpec"], engine["kvUsageSpec"]) == (queued, kv)
    defined = {p.get("name", p["type"]) for p in config["plugins"]}
    assert {r["pluginRef"] for profile in config["schedulingProfiles"] for r in profile["plugins"]} <= defined
    args = _by(objects, "Deployment", gateway.epp_name("llama"))["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--total-queued-requests-metric") + 1] == queued
    assert args[args.index("--pool-name") + 1] == "llama"


def test_picker_runs_as_its_own_service_account_and_the_operator_grants_nothing():
    objects = _objects(_spec())
    name = gateway.epp_name("llama")
    assert _by(objects, "ServiceAccount", name)
    assert _by(objects, "Deployment", name)["spec"]["template"]["spec"]["serviceAccountName"] == name
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")]
    assert f"--serviceaccount=serving:{name}" in gateway.binding_command("llama", "serving")


def test_shipped_cluster_role_is_the_rendered_one():
    shipped = yaml.safe_load((ROOT / "manifests" / "gateway" / "endpoint-picker-rbac.yaml").read_text())
    assert shipped == gateway.cluster_role(), "regenerate manifests/gateway/endpoint-picker-rbac.yaml"
    granted = {(g, r) for rule in shipped["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert ("", "pods") in granted and ("inference.networking.k8s.io", "inferencepools") in granted


def test_everything_rendered_can_be_pruned():
    objects = _objects(_spec(autoscaling={"enabled": True, "mode": "keda", "prometheus": {"url": "http://p:9090"}}))
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} <= set(owned_names(REF))
