"""Serving-pod monitoring: the PodMonitor (render/monitoring.py) and the per-backend series the operator exports
(autoscaling/metrics.py, written from every status by controller/reconcile.py)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.autoscaling import metrics
from llmbackend.controller.reconcile import export_status_metrics
from llmbackend.render import triton
from llmbackend.render.names import BackendRef, owned_names
from llmbackend.render.workloads import RolloutStrategy, desired_objects

REF = BackendRef("llama", "serving", "uid-1")
SURGE = RolloutStrategy("RollingUpdate", 1, 0)


def _spec(preset: str = "llama-3.1-8b") -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({"model": {"preset": preset, "source": {"pvc": {"claimName": "m"}}}})


def _plan(nodes: int = 1) -> PlanStatus:
    tp = 8 * nodes
    return PlanStatus(tensor_parallel=tp, pipeline_parallel=1, gpus_per_replica=tp, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _kinds(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def test_pod_monitor_only_when_its_crd_is_served() -> None:
    assert "PodMonitor" not in _kinds(desired_objects(REF, _spec(), _plan(), 1, SURGE))
    monitor = _kinds(desired_objects(REF, _spec(), _plan(), 1, SURGE, pod_monitor=True))["PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert ("PodMonitor", "llama") in owned_names(REF), "pruned when the CRD goes or the backend is deleted"


def test_pod_monitor_selects_the_serving_pods_and_names_their_metrics_port() -> None:
    objects = _kinds(desired_objects(REF, _spec(), _plan(), 2, SURGE, pod_monitor=True))
    monitor, template = objects["PodMonitor"]["spec"], objects["Deployment"]["spec"]["template"]
    assert monitor["namespaceSelector"] == {"matchNames": ["serving"]}
    assert _matches(monitor["selector"]["matchLabels"], template["metadata"]["labels"])
    (endpoint,) = monitor["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    assert ports[endpoint["port"]] == triton.METRICS_PORT, "Triton's metrics port, where the engine series are"
    assert endpoint["path"] == "/metrics"
    (relabel,) = endpoint["relabelings"]
    assert relabel["sourceLabels"] == ["__meta_kubernetes_pod_label_llmbackend_dev_backend"]
    assert relabel["targetLabel"] == "name", "engine series join the operator's on (namespace, name)"
    assert template["metadata"]["labels"]["llmbackend.dev/backend"] == "llama"


def test_multi_node_pod_monitor_selects_leaders_only() -> None:
    objects = _kinds(desired_objects(REF, _spec("llama-3.1-405b"), _plan(nodes=2), 1, SURGE, pod_monitor=True))
    selector = objects["PodMonitor"]["spec"]["selector"]["matchLabels"]
    lwt = objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    # LeaderWorkerSet adds worker-index to each pod (0 on leaders); the templates carry the operator's labels.
    leader = {**lwt["leaderTemplate"]["metadata"]["labels"], "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    worker = {**lwt["workerTemplate"]["metadata"]["labels"], "leaderworkerset.sigs.k8s.io/worker-index": "1"}
    assert _matches(selector, leader) and not _matches(selector, worker)
    assert any(p["name"] == "metrics" for p in lwt["leaderTemplate"]["spec"]["containers"][0]["ports"])
    assert "ports" not in lwt["workerTemplate"]["spec"]["containers"][0], "workers expose no metrics port"


# ---- the operator's per-backend series ----

def _samples(name: str) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(metrics.REGISTRY).decode()
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def _of(name: str, backend: str) -> list[tuple[dict[str, str], float]]:
    return [(labels, v) for labels, v in _samples(name) if labels.get("name") == backend]


def _conditions(status: str = "True", reason: str = "ReplicasReady") -> list[dict[str, str]]:
    return [{"type": "Available", "status": status, "reason": reason},
            {"type": "Degraded", "status": "False", "reason": "AsExpected"}]


@pytest.fixture
def backend():
    name = "metrics-test"
    yield name
    metrics.forget_backend("ns", name)


def test_conditions_keep_one_series_per_type(backend: str) -> None:
    metrics.set_backend_status("ns", backend, _conditions(), replicas=2, ready=2, desired=2)
    metrics.set_backend_status("ns", backend, _conditions("False", "ReplicasNotReady"), replicas=2, ready=1, desired=3)
    series = {(s["type"], s["status"], s["reason"]): v for s, v in _of("llmbackend_backend_condition", backend)}
    assert series == {("Available", "False", "ReplicasNotReady"): 1.0, ("Degraded", "False", "AsExpected"): 1.0}
    assert _of("llmbackend_backend_ready_replicas", backend)[0][1] == 1
    assert _of("llmbackend_backend_desired_replicas", backend)[0][1] == 3
    assert _of("llmbackend_backend_replicas", backend)[0][1] == 2


def test_signal_series_follows_the_last_reading(backend: str) -> None:
    metrics.set_backend("ns", backend, ratio=0.5, signal="triton")
    metrics.set_backend("ns", backend, ratio=0.5, signal="engine")
    assert [(s["signal"], v) for s, v in _of("llmbackend_backend_autoscaling_signal", backend)] == [("engine", 1.0)]


def test_a_deleted_backend_leaves_no_series(backend: str) -> None:
    metrics.set_backend_status("ns", backend, _conditions(), replicas=1, ready=1, desired=1)
    metrics.set_backend("ns", backend, ratio=0.1, signal="engine")
    metrics.forget_backend("ns", backend)
    for name in ("llmbackend_backend_condition", "llmbackend_backend_ready_replicas",
                 "llmbackend_backend_autoscaling_signal", "llmbackend_backend_replicas"):
        assert _of(name, backend) == [], name


@pytest.mark.parametrize("spec,status,desired", [
    ({"replicas": 3}, {"replicas": 2, "readyReplicas": 1}, 3),
    ({}, {}, 1),
    ({"autoscaling": {"enabled": True}}, {"autoscaling": {"desiredReplicas": 4}}, 4),
])
def test_every_backend_exports_its_status(backend: str, spec: dict, status: dict, desired: int) -> None:
    obj = {"metadata": {"namespace": "ns", "name": backend}, "spec": spec}
    export_status_metrics(obj, {**status, "conditions": _conditions()})
    assert _of("llmbackend_backend_desired_replicas", backend)[0][1] == desired
    assert _of("llmbackend_backend_ready_replicas", backend)[0][1] == status.get("readyReplicas", 0)
    assert len(_of("llmbackend_backend_condition", backend)) == 2


def test_a_pass_applies_the_pod_monitor_when_the_api_is_served() -> None:
    from devcluster.cli import topology_nodes
    from llmbackend.controller.decide import Observed, decide
    from llmbackend.planning.inventory import Inventory

    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    obj = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "status": {},
           "metadata": {"name": "llama", "namespace": "serving", "uid": "u-1", "generation": 1},
           "spec": {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "m"}}}}}

    def applied(apis: frozenset[str]) -> set[str]:
        asked = decide(Observed(obj, inventory.nodes(), apis=apis))
        done = decide(Observed(obj, inventory.nodes(), apis=apis, children={k: None for k in asked.look_up}))
        return {c["kind"] for c in done.apply}

    assert "PodMonitor" in applied(frozenset({"PodMonitor"}))
    assert "PodMonitor" not in applied(frozenset())
