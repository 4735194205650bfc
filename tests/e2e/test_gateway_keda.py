"""InferencePool (+ endpoint picker) and KEDA ScaledObject against their real CRDs on the local control plane.

The CRDs come from the Go modules that define them (devcluster.crds). The rendered objects pass
the API server's validation (dry-run=server: OpenAPI schema and CEL rules of the CRDs); then the operator,
seeing the CRDs served, creates them for a backend. The CRDs are removed at the end of the module and the
session operator restarts afterwards (exclusive_cluster), so other tests see a cluster without them.
"""

from __future__ import annotations

import pytest
import yaml
from conftest import REPO_ROOT, apply_manifest, backend_manifest, installed_crds, wait_for

from devcluster.crds import THIRD_PARTY_CRDS
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render import gateway
from llmbackend.render.names import BackendRef
from llmbackend.render.workloads import RolloutStrategy, desired_objects

PROMETHEUS = {"url": "http://prometheus.monitoring:9090"}


def test_without_the_crds_keda_mode_is_degraded_and_nothing_else_breaks(exclusive_cluster, own_operator, namespace):
    """Runs before the `crds` fixture installs them (file order)."""
    op = own_operator()
    kube = exclusive_cluster.kube
    assert kube.get("CustomResourceDefinition", None, "scaledobjects.keda.sh") is None
    apply_manifest(exclusive_cluster, backend_manifest(
        "nokeda", namespace, autoscaling={"enabled": True, "mode": "keda", "prometheus": PROMETHEUS}))
    obj = wait_for(lambda: (o := kube.get("LLMBackend", namespace, "nokeda"))
                   and ((o.get("status") or {}).get("conditions") or []) and o, timeout=60, what=f"status\n{op.log_tail()}")
    degraded = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "KEDANotInstalled"), degraded
    assert "keda.sh" in degraded["message"]
    # A first pass writes status before its children (that write confirms the backend): the workload comes last.
    deployment = wait_for(lambda: kube.get("Deployment", namespace, "nokeda"), timeout=30, what="Deployment")
    assert "openai" in [p["name"] for p in kube.get("Service", namespace, "nokeda")["spec"]["ports"]]
    replica_managers = [m["manager"] for m in deployment["metadata"]["managedFields"]
                        if "f:replicas" in str(m.get("fieldsV1", {}).get("f:spec", {}))]
    assert "llmbackend-operator" not in replica_managers
    assert kube.get("Deployment", namespace, gateway.epp_name("nokeda")) is None, "no InferencePool CRD: no picker"
    assert op.proc.poll() is None, op.log_tail()


@pytest.fixture(scope="module")
def crds(exclusive_cluster):
    yield from installed_crds(exclusive_cluster, THIRD_PARTY_CRDS)


def _rendered(namespace: str, backend: str, nodes: int = 1) -> list[dict]:
    spec = LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-8b"}, "engine": {"backend": backend},
        "autoscaling": {"enabled": True, "mode": "keda", "prometheus": PROMETHEUS, "minReplicas": 0, "maxReplicas": 3},
    })
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=nodes, gpus_per_replica=nodes, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=40 << 30)
    ref = BackendRef("llama", namespace, "00000000-0000-0000-0000-000000000000")
    return desired_objects(ref, spec, plan, 1, RolloutStrategy("Recreate"), inference_pool=True)


def _dry_run(cluster, obj):
    return cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(obj), check=False)


@pytest.mark.parametrize("backend", ["tensorrtllm", "vllm"])
def test_rendered_objects_pass_server_side_validation(crds, namespace, backend):
    objects = [o for o in _rendered(namespace, backend) if o["kind"] != "LeaderWorkerSet"]
    kinds = {o["kind"] for o in objects}
    assert {"InferencePool", "ScaledObject", "ServiceAccount"} <= kinds
    for obj in objects:
        result = _dry_run(crds, obj)
        assert result.returncode == 0, f"{obj['kind']} {obj['metadata']['name']}: {result.stderr}"


def test_the_crds_do_validate(crds, namespace):
    """The check above can fail: the same server rejects a pool without target ports and a trigger-less ScaledObject."""
    objects = {o["kind"]: o for o in _rendered(namespace, "tensorrtllm")}
    pool = objects["InferencePool"]
    pool["spec"]["targetPorts"] = []
    assert _dry_run(crds, pool).returncode != 0
    scaled = objects["ScaledObject"]
    del scaled["spec"]["triggers"]
    assert _dry_run(crds, scaled).returncode != 0


def test_operator_creates_pool_picker_and_scaled_object_when_the_crds_are_served(crds, own_operator, namespace):
    op = own_operator()
    manifest = backend_manifest("routed", namespace,
                                autoscaling={"enabled": True, "mode": "keda", "prometheus": PROMETHEUS, "maxReplicas": 2})
    apply_manifest(crds, manifest)
    kube = crds.kube
    pool = wait_for(lambda: kube.get("InferencePool", namespace, "routed"), timeout=90, what=f"InferencePool\n{op.log_tail()}")
    backend = kube.get("LLMBackend", namespace, "routed")
    assert pool["metadata"]["ownerReferences"][0]["uid"] == backend["metadata"]["uid"]
    epp = gateway.epp_name("routed")
    picker = wait_for(lambda: kube.get("Deployment", namespace, epp), timeout=60, what="endpoint picker Deployment")
    assert picker["spec"]["template"]["spec"]["serviceAccountName"] == epp
    # The user binds the shipped ClusterRole (the operator grants nothing); the binding is valid as documented.
    crds.kubectl("apply", "-f", str(REPO_ROOT / "manifests/gateway/endpoint-picker-rbac.yaml"))
    crds.kubectl(*gateway.binding_command("routed", namespace).split()[1:])
    assert kube.get("Service", namespace, epp) is not None
    scaled = wait_for(lambda: kube.get("ScaledObject", namespace, "routed"), timeout=60, what="ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "routed"
    # the workload is applied last in a pass: the ScaledObject can be there a moment before it
    deployment = wait_for(lambda: kube.get("Deployment", namespace, "routed"), timeout=60, what="the Deployment")
    assert "openai" in [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    replica_managers = [m["manager"] for m in deployment["metadata"]["managedFields"]
                        if "f:replicas" in str(m.get("fieldsV1", {}).get("f:spec", {}))]
    assert "llmbackend-operator" not in replica_managers, "KEDA owns replicas"
    # Turning the OpenAI endpoint off removes the pool and its picker (they target that port).
    manifest["spec"]["serving"] = {"openai": False}
    apply_manifest(crds, manifest)
    wait_for(lambda: kube.get("InferencePool", namespace, "routed") is None and kube.get("Deployment", namespace, epp) is None,
             timeout=60, what="pool and picker pruned")
    assert op.proc.poll() is None, op.log_tail()
