"""LLMBackend reconciliation on the real control plane: children, status, scale, rollout, deletion, bad input."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from conftest import REPO_ROOT, apply_manifest, available, backend_manifest, condition, wait_for

from devcluster.lws import CRD_FILE as LWS_CRD_FILE
from devcluster.lws import ensure_lws
from llmbackend.controller.reconcile import Reconciler, SharedState
from llmbackend.planning.inventory import Inventory


def test_sample_backend_gets_children_pods_and_becomesavailable(cluster, operator, namespace):
    sample = yaml.safe_load((REPO_ROOT / "manifests/samples/llama-3.1-8b-trtllm.yaml").read_text())
    sample["metadata"]["namespace"] = namespace
    sample["spec"]["model"]["source"] = {"uri": "s3://models/llama-3.1-8b"}  # no PVC in the test namespace
    apply_manifest(cluster, sample)
    name = sample["metadata"]["name"]

    obj = wait_for(lambda: available(cluster, namespace, name), timeout=60, what="Available=True")
    uid = obj["metadata"]["uid"]
    for kind, child in (("ConfigMap", f"{name}-model-repo"), ("Deployment", name), ("Service", name)):
        live = cluster.kube.get(kind, namespace, child)
        assert live is not None, kind
        owners = live["metadata"]["ownerReferences"]
        assert owners[0]["uid"] == uid and owners[0]["controller"] is True
        assert live["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "llmbackend-operator"

    pods = cluster.kube.list("Pod", namespace, label_selector=f"llmbackend.dev/backend={name}")
    assert len(pods) == 1
    assert pods[0]["spec"]["nodeName"].startswith("dgx-h100-")
    # The sample keeps the latency default: TP2 for Llama-3.1-8B on H100 (was TP1 before the objective mattered).
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pods[0]["spec"]["tolerations"]
    assert condition(pods[0], "Ready")["status"] == "True"

    status = obj["status"]
    assert status["plan"]["tensorParallel"] == 2 and status["plan"]["pipelineParallel"] == 1
    assert status["plan"]["objective"] == "latency" and status["plan"]["timePerOutputTokenMs"] > 0
    assert status["plan"]["interconnect"] == "NVLink4 900 GB/s" and status["plan"]["hbmBandwidthGbps"] == 3350
    assert status["readyReplicas"] == 1 and status["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, "Planned")["status"] == "True"
    assert condition(obj, "Degraded")["status"] == "False"
    # The user's object carries no operator bookkeeping (GitOps sees no drift).
    assert not [a for a in (obj["metadata"].get("annotations") or {}) if "kopf" in a]
    assert not obj["metadata"].get("finalizers")

    # Printer columns are filled: plain `kubectl get` says whether it serves; -o wide adds the plan.
    table = cluster.kubectl("get", "llmb", name, "-n", namespace, "-o", "wide").stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert header[:10] == ["NAME", "READY", "STATUS", "REASON", "MODEL", "TPXPP", "AGE", "BACKEND", "GPU", "GPUS/REPLICA"]
    assert row[1:6] == ["1/1", "Ready", "ReplicasReady", "llama-3.1-8b", "2x1"]  # latency default: TP2
    assert row[7:10] == ["tensorrtllm", "NVIDIA-H100-80GB-HBM3", "2"]

    # Events are what a person acts on or looks for: the plan; replicas turning ready is in the conditions only.
    events = cluster.kube.list("Event", namespace, field_selector=f"involvedObject.name={name}")
    reasons = [e["reason"] for e in events]
    assert reasons.count("Fits") == 1 and "ReplicasReady" not in reasons and "ReplicasNotReady" not in reasons, reasons


def test_reconcile_with_nothing_changed_makes_no_writes(cluster, operator, namespace):
    apply_manifest(cluster, backend_manifest("noop", namespace))
    wait_for(lambda: available(cluster, namespace, "noop"), timeout=60, what="Available=True")
    state = SharedState(inventory=Inventory(cluster.kube.list("Node")))
    reconciler = Reconciler(cluster.kube, state)
    # A pass may catch up with what changed since the last one: this backend's pod Ready a moment ago, or the free
    # GPUs its status counts, as other tests' pods on the session cluster come and go. A backend that churns never
    # gets a pass without writes.
    sent: list[str] = []  # what each pass wrote, for the failure message
    request = cluster.kube.request

    def recording(method, path, **kw):
        if method in ("PATCH", "POST", "PUT", "DELETE"):
            sent.append(f"{method} {path} {json.dumps(kw.get('body'))[:600]}")
        return request(method, path, **kw)

    cluster.kube.request = recording  # type: ignore[method-assign]
    try:
        writes = [reconciler.reconcile((namespace, "noop")).writes for _ in range(2)]
        while writes[-1] and len(writes) < 6:
            time.sleep(1)
            writes.append(reconciler.reconcile((namespace, "noop")).writes)
    finally:
        cluster.kube.request = request  # type: ignore[method-assign]
    assert writes[-1] == 0, f"a reconcile of an unchanged backend must not write (writes per pass: {writes}): {sent}"


def test_kubectl_scale_and_spec_change_roll_out(cluster, operator, namespace):
    apply_manifest(cluster, backend_manifest("scaled", namespace))
    wait_for(lambda: available(cluster, namespace, "scaled"), timeout=60, what="Available=True")
    template_hash = cluster.kube.get("Deployment", namespace, "scaled")["spec"]["template"]["metadata"]["annotations"]

    cluster.kubectl("scale", "llmb", "scaled", "-n", namespace, "--replicas=2")
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "scaled")["spec"]["replicas"] == 2, what="Deployment replicas 2")
    obj = wait_for(lambda: available(cluster, namespace, "scaled"), timeout=60, what="2 replicas Available")
    assert obj["status"]["replicas"] == 2 and obj["status"]["readyReplicas"] == 2
    assert cluster.kube.get("PodDisruptionBudget", namespace, "scaled") is not None, "PDB once replicas > 1"

    # A spec change that alters the Triton config rolls the pods (config hash on the pod template).
    cluster.kubectl("patch", "llmb", "scaled", "-n", namespace, "--type=merge", "-p", json.dumps({"spec": {"engine": {"maxBatchSize": 32}}}))
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "scaled")["spec"]["template"]["metadata"]["annotations"] != template_hash,
             what="new pod template")
    # the LLM API model: Triton's max_batch_size stays 0, the engine's limit is an LLM() argument in model.yaml
    config = cluster.kube.get("ConfigMap", namespace, "scaled-model-repo")["data"]["llama-3.1-8b__1__model.yaml"]
    assert "max_batch_size: 32" in config
    wait_for(lambda: available(cluster, namespace, "scaled"), timeout=90, what="rollout complete")

    cluster.kubectl("scale", "llmb", "scaled", "-n", namespace, "--replicas=1")
    wait_for(lambda: cluster.kube.get("PodDisruptionBudget", namespace, "scaled") is None, what="PDB pruned at 1 replica")


def test_deleting_the_backend_garbage_collects_children(cluster, operator, namespace):
    apply_manifest(cluster, backend_manifest("gone", namespace))
    wait_for(lambda: available(cluster, namespace, "gone"), timeout=60, what="Available=True")
    cluster.kubectl("delete", "llmb", "gone", "-n", namespace, "--wait=true")
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "gone") is None
             and cluster.kube.get("ConfigMap", namespace, "gone-model-repo") is None
             and cluster.kube.get("Service", namespace, "gone") is None,
             timeout=60, what="children garbage-collected")


LLAMA_8B = {"preset": "llama-3.1-8b", "source": {"uri": "s3://models/llama-3.1-8b"}}


@pytest.mark.parametrize("spec, message", [
    ({"model": LLAMA_8B, "autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "minReplicas must not exceed maxReplicas"),
    ({"model": LLAMA_8B, "parallelism": {"pipelineParallel": 2}}, "pipelineParallel requires tensorParallel"),
    ({"model": LLAMA_8B, "engine": {"quantization": "fp4"}}, 'Unsupported value: "fp4"'),
    ({"model": {}}, "set spec.model.source"),
    ({"model": {"preset": "llama-3.1-8b"}}, "set spec.model.source"),
    ({"model": LLAMA_8B, "replicas": -1}, "should be greater than or equal to 0"),
    ({"model": LLAMA_8B, "autoscaling": {"schedule": [{"start": "0 8 * * *", "end": "0 8 * * *", "desiredReplicas": 2}]}},
     "start and end must differ"),
    ({"model": LLAMA_8B, "autoscaling": {"schedule": [{"start": "0 8 * * *", "end": "0 9 * * *"}]}},
     "set desiredReplicas (minReplicas is its older name), not both"),
    ({"model": LLAMA_8B, "autoscaling": {"schedule": [{"start": "0 8 * * *", "end": "0 9 * * *", "desiredReplicas": 2,
                                                        "timeZone": "../etc/passwd"}]}}, "timeZone"),
    ({"model": LLAMA_8B, "autoscaling": {"panic": {"enabled": True, "thresholdPercentage": 100}}},
     "should be greater than or equal to 110"),
])
def test_invalid_backend_is_rejected_by_the_api_server(cluster, namespace, spec, message):
    manifest = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                "metadata": {"name": "bad", "namespace": namespace}, "spec": spec}
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


@pytest.mark.parametrize("spec, reason", [
    ({"model": {"preset": "no-such-model", "source": {"uri": "s3://m/x"}}}, "UnknownPreset"),
    ({"model": {"preset": "llama-3.1-70b", "source": {"uri": "s3://m/x"}}, "parallelism": {"tensorParallel": 3}},
     "TensorParallelDoesNotDivideHeads"),
    ({"model": {"architecture": {"numLayers": 200, "hiddenSize": 32768, "numAttentionHeads": 256, "numKeyValueHeads": 16,
                                 "headDim": 128, "vocabSize": 256000, "parameterCount": 9_000_000_000_000},
                "source": {"uri": "s3://m/x"}}}, "InsufficientGPUMemory"),
    # what the CRD's pattern lets through and the operator's cron matcher refuses: a minute of 61, a zone no database has
    ({"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://m/x"}},
      "autoscaling": {"schedule": [{"start": "61 8 * * *", "end": "0 9 * * *", "desiredReplicas": 2}]}}, "InvalidSpec"),
    ({"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://m/x"}},
      "autoscaling": {"schedule": [{"start": "0 8 * * *", "end": "0 9 * * *", "desiredReplicas": 2,
                                    "timeZone": "Mars/Olympus_Mons"}]}}, "InvalidSpec"),
])
def test_impossible_backend_is_reported_not_crashed(cluster, operator, namespace, spec, reason):
    manifest = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                "metadata": {"name": "impossible", "namespace": namespace}, "spec": spec}
    apply_manifest(cluster, manifest)
    obj = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "impossible"))
                   and condition(o, "Planned") and o, timeout=30, what="Planned condition")
    planned, degraded = condition(obj, "Planned"), condition(obj, "Degraded")
    assert planned["status"] == "False" and planned["reason"] == reason
    assert degraded["status"] == "True"
    assert cluster.kube.get("Deployment", namespace, "impossible") is None
    assert operator.proc.poll() is None, operator.log_tail()


def test_multi_node_plan_needs_leaderworkerset_then_renders_one(cluster, operator, namespace):
    manifest = backend_manifest("big", namespace)
    manifest["spec"]["model"]["preset"] = "llama-3.1-405b"  # bf16: TP8 inside a node x PP2 across two nodes
    apply_manifest(cluster, manifest)
    obj = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "big")) and condition(o, "Degraded") and o,
                   timeout=30, what="status")
    assert obj["status"]["plan"]["tensorParallel"] == 8 and obj["status"]["plan"]["pipelineParallel"] == 2
    assert obj["status"]["plan"]["nodesPerReplica"] == 2
    if cluster.kube.get("CustomResourceDefinition", None, "leaderworkersets.leaderworkerset.x-k8s.io") is None:
        assert condition(obj, "Degraded")["reason"] == "LeaderWorkerSetNotInstalled"
        # The real CRD (sigs.k8s.io/lws, as `make tools` builds it); no LWS controller runs in this test.
        cluster.kubectl("apply", "--server-side", "-f", str(ensure_lws() / LWS_CRD_FILE))
    lws = wait_for(lambda: cluster.kube.get("LeaderWorkerSet", namespace, "big"), timeout=90, what="LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert leader["args"][0] == "trtllm-llmapi-launch" and leader["command"][-1] == "/launch/leader-mpi.sh"
    assert lws["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    service = wait_for(lambda: cluster.kube.get("Service", namespace, "big"), what="Service")  # applied after the LWS
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_a_foreign_hpa_on_the_workload_is_reported_not_fought(cluster, operator, namespace):
    manifest = backend_manifest("contested", namespace, autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 2})
    apply_manifest(cluster, manifest)
    wait_for(lambda: available(cluster, namespace, "contested"), timeout=60, what="Available=True")
    # Someone adds their own HPA on our Deployment; the HPA controller lifts it to its minReplicas.
    cluster.kube.apply({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "someone-elses", "namespace": namespace},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "contested"},
                 "minReplicas": 3, "maxReplicas": 3,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]},
    })
    obj = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "contested"))
                   and (condition(o, "Degraded") or {}).get("reason") == "ConflictingHorizontalPodAutoscaler" and o,
                   timeout=60, what="conflict reported")
    assert "someone-elses" in condition(obj, "Degraded")["message"]
    # The operator no longer owns .spec.replicas, so the two writers do not flap.
    deployment = cluster.kube.get("Deployment", namespace, "contested")
    replica_managers = [m["manager"] for m in deployment["metadata"]["managedFields"]
                        if "f:replicas" in str(m.get("fieldsV1", {}).get("f:spec", {}))]
    assert "llmbackend-operator" not in replica_managers


def test_more_replicas_than_the_cluster_holds_is_degraded_with_the_reason(cluster, operator, namespace):
    # 5 replicas x TP8 = 40 GPUs; the four DGX nodes hold 32.
    manifest = backend_manifest("toomany", namespace, replicas=5)
    manifest["spec"]["model"]["preset"] = "llama-3.1-70b"
    manifest["spec"]["parallelism"] = {"tensorParallel": 8}
    apply_manifest(cluster, manifest)
    try:
        obj = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "toomany"))
                       and (condition(o, "Degraded") or {}).get("status") == "True" and o, timeout=60, what="Degraded")
        degraded = condition(obj, "Degraded")
        assert degraded["reason"] in ("Unschedulable", "InsufficientGPUs"), degraded
        assert "nvidia.com/gpu" in degraded["message"] or "GPUs" in degraded["message"], degraded
        assert condition(obj, "Available")["status"] == "False"
        # The event follows the status write; its reason is the first Degraded reason seen.
        wait_for(lambda: any(e["type"] == "Warning" and e["reason"] in ("Unschedulable", "InsufficientGPUs")
                             for e in cluster.kube.list("Event", namespace, field_selector="involvedObject.name=toomany")),
                 timeout=30, what="Warning event")
    finally:
        # Give the GPUs back before the next test: delete and wait for the pods to go.
        cluster.kubectl("delete", "llmb", "toomany", "-n", namespace, "--wait=true")
        wait_for(lambda: not cluster.kube.list("Pod", namespace, label_selector="llmbackend.dev/backend=toomany"),
                 timeout=60, what="pods gone")
