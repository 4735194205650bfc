"""Serving-pod monitoring on the real control plane, against the Prometheus Operator's own CRDs (devcluster.crds:
github.com/prometheus-operator/prometheus-operator's, from the Go module proxy).

The rendered PodMonitor and manifests/monitoring (ServiceMonitor, alert rules) pass the API server's validation
(dry-run=server); then the operator, seeing podmonitors served, creates one per backend, and that PodMonitor's
selector picks exactly the backend's serving pods, whose container port of that name is Triton's metrics port.
The CRDs are removed at the end of the module (exclusive_cluster restarts the session operator afterwards).
"""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO_ROOT, apply_manifest, backend_manifest, installed_crds, wait_for

from devcluster.crds import MONITORING_CRDS
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render import triton
from llmbackend.render.names import BackendRef, label_selector
from llmbackend.render.workloads import RolloutStrategy, desired_objects


@pytest.fixture(scope="module")
def crds(exclusive_cluster):
    yield from installed_crds(exclusive_cluster, MONITORING_CRDS)


def _dry_run(cluster, obj):
    return cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(obj), check=False)


def _pod_monitor(namespace: str, nodes: int) -> dict:
    spec = LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-8b"}})
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=nodes, gpus_per_replica=nodes, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=40 << 30)
    ref = BackendRef("llama", namespace, "00000000-0000-0000-0000-000000000000")
    objects = desired_objects(ref, spec, plan, 1, RolloutStrategy("Recreate"), pod_monitor=True)
    return next(o for o in objects if o["kind"] == "PodMonitor")


def _shipped(namespace: str) -> list[dict]:
    docs = []
    for path in sorted((REPO_ROOT / "manifests" / "monitoring").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                doc["metadata"]["namespace"] = namespace
                docs.append(doc)
    return docs


def test_rendered_and_shipped_monitoring_objects_pass_server_side_validation(crds, namespace):
    objects = [_pod_monitor(namespace, 1), _pod_monitor(namespace, 2), *_shipped(namespace)]
    assert {o["kind"] for o in objects} == {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    for obj in objects:
        result = _dry_run(crds, obj)
        assert result.returncode == 0, f"{obj['kind']} {obj['metadata']['name']}: {result.stderr}"


def test_the_crds_do_validate(crds, namespace):
    """The check above can fail: the same server rejects a bad relabel action and a rule without an expression."""
    monitor = _pod_monitor(namespace, 1)
    monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "rename-everything"
    assert _dry_run(crds, monitor).returncode != 0
    (rule,) = [o for o in _shipped(namespace) if o["kind"] == "PrometheusRule"]
    broken = copy.deepcopy(rule)
    del broken["spec"]["groups"][0]["rules"][0]["expr"]
    assert _dry_run(crds, broken).returncode != 0


def test_the_operators_pod_monitor_selects_the_serving_pods_metrics_port(crds, own_operator, namespace):
    op = own_operator()
    kube = crds.kube
    apply_manifest(crds, backend_manifest("scraped", namespace, replicas=2))
    apply_manifest(crds, backend_manifest("neighbour", namespace))  # its pods must not be selected
    monitor = wait_for(lambda: kube.get("PodMonitor", namespace, "scraped"), timeout=90,
                       what=f"PodMonitor\n{op.log_tail()}")
    backend = kube.get("LLMBackend", namespace, "scraped")
    assert monitor["metadata"]["ownerReferences"][0]["uid"] == backend["metadata"]["uid"]
    # the workload is applied last in a pass (a name found taken stops the pass before anything runs on GPUs)
    deployment = wait_for(lambda: kube.get("Deployment", namespace, "scraped"), timeout=60, what="the Deployment")
    ours = wait_for(lambda: (pods := kube.list("Pod", namespace, label_selector(deployment["spec"]["selector"]["matchLabels"])))
                    and len(pods) == 2 and pods, timeout=90, what="the Deployment's two pods")
    wait_for(lambda: kube.list("Pod", namespace, "llmbackend.dev/backend=neighbour"), timeout=90, what="neighbour pods")

    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [namespace]}
    selected = kube.list("Pod", namespace, label_selector(monitor["spec"]["selector"]["matchLabels"]))
    assert sorted(p["metadata"]["name"] for p in selected) == sorted(p["metadata"]["name"] for p in ours)
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    for pod in selected:
        ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert ports[endpoint["port"]] == triton.METRICS_PORT, pod["metadata"]["name"]
        assert pod["metadata"]["labels"]["llmbackend.dev/backend"] == "scraped", "the label relabelled into `name`"
    assert op.proc.poll() is None, op.log_tail()
