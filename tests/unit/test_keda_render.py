"""autoscaling.mode keda: the ScaledObject, and the single-writer rule for replicas (same as mode hpa)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from llmbackend.api.engine_metrics import RECORDING_RULE_NAME
from llmbackend.api.v1alpha1 import AutoscalingSpec, LLMBackendSpec, PlanStatus
from llmbackend.render.hpa import render_hpa
from llmbackend.render.keda import pod_name_regex, quantity_str, render_scaled_object, trigger_query
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REF = BackendRef("llama", "serving", "uid-1")
PROM = {"url": "http://prometheus.monitoring:9090"}


def _spec(autoscaling) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-8b"}, "autoscaling": autoscaling})


def _plan(nodes=1) -> PlanStatus:
    return PlanStatus(tensor_parallel=8, pipeline_parallel=nodes, gpus_per_replica=8 * nodes, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=60 << 30)


def _kinds(objects):
    return {o["kind"]: o for o in objects}


def test_keda_mode_renders_a_scaled_object_and_leaves_replicas_to_it():
    spec = _spec({"enabled": True, "mode": "keda", "prometheus": PROM, "minReplicas": 0, "maxReplicas": 6, "targetRatio": 1.5})
    objects = _kinds(desired_objects(REF, spec, _plan(), 3, RolloutStrategy("Recreate"), prometheus_rules=True))
    assert "replicas" not in objects["Deployment"]["spec"], "one writer for replicas: KEDA's HPA"
    assert "HorizontalPodAutoscaler" not in objects
    assert "PrometheusRule" in objects, "the trigger reads the recording rule"
    so = objects["ScaledObject"]
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    assert so["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"}
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (0, 6)
    trigger = so["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["serverAddress"] == PROM["url"]
    assert trigger["metadata"]["threshold"] == "1.5"
    assert trigger["metadata"]["query"].startswith(f"sum({RECORDING_RULE_NAME}{{")
    assert all(isinstance(v, str) for v in trigger["metadata"].values()), "KEDA trigger metadata is map[string]string"


def test_keda_behavior_is_mode_hpas():
    auto = AutoscalingSpec(enabled=True, mode="keda", prometheus=PROM, scale_down_stabilization_seconds=120, max_scale_up_step=2)
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"}
    so = render_scaled_object("llama", "ns", target, auto)
    assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == render_hpa("llama", "ns", target, auto)["spec"]["behavior"]


def test_without_the_crd_no_scaled_object_and_still_no_replicas_written():
    spec = _spec({"enabled": True, "mode": "keda", "prometheus": PROM})
    objects = _kinds(desired_objects(REF, spec, _plan(), 1, RolloutStrategy("Recreate"), scaled_objects=False))
    assert "ScaledObject" not in objects and "replicas" not in objects["Deployment"]["spec"]


def test_multi_node_targets_the_leader_worker_set():
    spec = _spec({"enabled": True, "mode": "keda", "prometheus": PROM})
    so = _kinds(desired_objects(REF, spec, _plan(nodes=2), 1, RolloutStrategy("Recreate")))["ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    assert 'pod=~"llama-[0-9]+"' in so["spec"]["triggers"][0]["metadata"]["query"]


@pytest.mark.parametrize("kind, pod, matches", [
    ("Deployment", "llama-7d9f8b6c4-x2k9p", True),
    ("Deployment", "llama-2-7d9f8b6c4-x2k9p", False),   # another backend named llama-2
    ("Deployment", "llama-7d9f8b6c4", False),
    ("LeaderWorkerSet", "llama-0", True),
    ("LeaderWorkerSet", "llama-0-1", False),             # a worker: serves nothing
])
def test_pod_regex_selects_only_this_backends_serving_pods(kind, pod, matches):
    assert bool(re.fullmatch(pod_name_regex(kind, "llama"), pod)) is matches


def test_trigger_query_escapes_the_namespace():
    assert 'namespace="a\\"b"' in trigger_query('a"b', "Deployment", "llama")


@pytest.mark.parametrize("value, text", [(1.0, "1"), (1.5, "1.5"), (0.25, "0.25"), (3.5, "3.5")])
def test_threshold_is_a_decimal_string(value, text):
    assert quantity_str(value) == text


def test_keda_mode_needs_prometheus():
    with pytest.raises(ValidationError, match="mode keda requires prometheus.url"):
        AutoscalingSpec(enabled=True, mode="keda")


def test_schedule_floors_become_kedas_own_cron_triggers():
    spec = AutoscalingSpec.model_validate({
        "enabled": True, "mode": "keda", "prometheus": PROM, "schedule": [
            {"start": "0 8 * * 1-5", "end": "0 18 * * 1-5", "timeZone": "Europe/Berlin", "desiredReplicas": 4},
            {"start": "22:00", "end": "06:00", "minReplicas": 2},   # the older form: daily, UTC
            {"start": "0 12 * * *", "end": "0 13 * * *", "desiredReplicas": 0}]})  # KEDA refuses 0: left out
    so = render_scaled_object("llama", "serving", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
                              spec)
    cron = [t for t in so["spec"]["triggers"] if t["type"] == "cron"]
    assert [t["metadata"] for t in cron] == [
        {"timezone": "Europe/Berlin", "start": "0 8 * * 1-5", "end": "0 18 * * 1-5", "desiredReplicas": "4"},
        {"timezone": "UTC", "start": "0 22 * * *", "end": "0 6 * * *", "desiredReplicas": "2"}]
    assert so["spec"]["triggers"][0]["type"] == "prometheus"
